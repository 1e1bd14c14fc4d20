import io
import tarfile

import pytest

from processors.outputs import (
    MAX_OUTPUT_FILE_BYTES,
    MAX_OUTPUT_FILES,
    OutputPlan,
    check_output_count,
    classify_output_member,
    plan_outputs,
)


def member(name, kind=tarfile.REGTYPE, size=0, **fields):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def test_regular_files_and_directories():
    assert classify_output_member(member("outputs", tarfile.DIRTYPE)) == ("dir", None)
    assert classify_output_member(member("outputs/sub", tarfile.DIRTYPE)) == ("dir", None)
    assert classify_output_member(member("outputs/sub/", tarfile.DIRTYPE)) == ("dir", None)
    assert classify_output_member(member("outputs/report.md", size=10)) == ("file", "report.md")
    assert classify_output_member(member("outputs/a/b/c.csv")) == ("file", "a/b/c.csv")
    assert classify_output_member(member("outputs/x", tarfile.AREGTYPE)) == ("file", "x")
    assert classify_output_member(member("outputs/x", tarfile.CONTTYPE)) == ("file", "x")
    assert classify_output_member(member("outputs/ünï cøde.txt")) == ("file", "ünï cøde.txt")


@pytest.mark.parametrize(
    ("info", "needle"),
    [
        (member("outputs/link", tarfile.SYMTYPE, linkname="/etc/passwd"), "symbolic link"),
        (member("outputs/hard", tarfile.LNKTYPE, linkname="outputs/a"), "hard link"),
        (member("outputs/tty", tarfile.CHRTYPE), "device"),
        (member("outputs/sda", tarfile.BLKTYPE), "device"),
        (member("outputs/pipe", tarfile.FIFOTYPE), "FIFO"),
        (member("outputs/weird", b"V"), "only regular files"),
        (member("/etc/passwd"), "absolute"),
        (member("/outputs/x"), "absolute"),
        (member("outputs/../etc/passwd"), "traversal"),
        (member("outputs/a/../../x"), "traversal"),
        (member("../outputs/x"), "traversal"),
        (member("outputs/./x"), "traversal"),
        (member("outputs//x"), "traversal"),
        (member("other/x"), "outside"),
        (member("x.txt"), "outside"),
        (member("outputsx/y"), "outside"),
        (member("outputs"), "must be a directory"),
        (member("outputs/a\\b"), "invalid file name"),
    ],
)
def test_invalid_members(info, needle):
    kind, reason = classify_output_member(info)
    assert kind == "invalid"
    assert needle in reason


def test_invalid_reasons_name_the_sandbox_path():
    _, reason = classify_output_member(member("outputs/dir/link", tarfile.SYMTYPE, linkname="x"))
    assert reason == "/mnt/session/outputs/dir/link: symbolic links are not published"


def test_file_size_limit():
    assert MAX_OUTPUT_FILE_BYTES == 500_000_000
    assert classify_output_member(member("outputs/big", size=MAX_OUTPUT_FILE_BYTES)) == ("file", "big")
    kind, reason = classify_output_member(member("outputs/big", size=MAX_OUTPUT_FILE_BYTES + 1))
    assert kind == "invalid" and "500,000,000" in reason
    assert classify_output_member(member("outputs/small", size=11), max_bytes=10)[0] == "invalid"


def test_custom_archive_root():
    assert classify_output_member(member("out/x"), root="out") == ("file", "x")


def test_members_of_a_real_archive():
    """What Docker's get_archive of /mnt/session/outputs looks like, read back by tarfile."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(member("outputs", tarfile.DIRTYPE, mode=0o755))
        tar.addfile(member("outputs/sub", tarfile.DIRTYPE, mode=0o755))
        tar.addfile(member("outputs/sub/a.txt", size=2), io.BytesIO(b"hi"))
        tar.addfile(member("outputs/" + "long" * 40 + ".txt", size=1), io.BytesIO(b"x"))
        tar.addfile(member("outputs/ln", tarfile.SYMTYPE, linkname="sub/a.txt"))
        tar.addfile(member("outputs/fifo", tarfile.FIFOTYPE))
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:") as tar:
        results = [classify_output_member(m) for m in tar]
    assert results[:4] == [("dir", None), ("dir", None), ("file", "sub/a.txt"), ("file", "long" * 40 + ".txt")]
    assert [r[0] for r in results[4:]] == ["invalid", "invalid"]


def test_output_count():
    assert MAX_OUTPUT_FILES == 500
    assert check_output_count(500) is None
    assert "501" in check_output_count(501)
    assert check_output_count(3, limit=2) is not None


def test_plan_outputs():
    current = {"same.txt": "aa", "edit.txt": "bb", "gone.txt": "cc", "b/x": "dd"}
    tree = {"same.txt": "AA", "edit.txt": "b2", "new.txt": "ee", "a/y": "ff", "b/x": "dd"}
    plan = plan_outputs(current, tree)
    assert plan == OutputPlan(
        unchanged=["b/x", "same.txt"], changed=["edit.txt"], added=["a/y", "new.txt"], removed=["gone.txt"]
    )
    unchanged, changed, added, removed = plan  # a plain 4-tuple as well
    assert (unchanged, changed, added, removed) == tuple(plan)


def test_plan_outputs_edges():
    assert plan_outputs({}, {}) == ([], [], [], [])
    assert plan_outputs({}, {"a": "1"}).added == ["a"]
    assert plan_outputs({"a": "1"}, {}).removed == ["a"]
    assert plan_outputs({"a": "1"}, {"a": "1"}).unchanged == ["a"]
