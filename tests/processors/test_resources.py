import io
import tarfile

import pytest

from processors.errors import InvalidMountPath, ProcessorError
from processors.resources import (
    MAX_FILE_RESOURCES,
    MAX_MOUNT_PATH_LENGTH,
    check_mount_path_available,
    check_resource_count,
    resolve_mount_path,
    tar_stream_for_file,
)

# --- mount paths ----------------------------------------------------------------------------


def test_default_mount_path():
    assert resolve_mount_path("file_01abc", None) == "/mnt/session/uploads/file_01abc"


@pytest.mark.parametrize("file_id", ["", "../x", "a/b", "file x", None])
def test_default_mount_path_needs_a_safe_id(file_id):
    with pytest.raises(InvalidMountPath):
        resolve_mount_path(file_id, None)


@pytest.mark.parametrize(
    "path",
    [
        "/mnt/session/uploads/data.csv",
        "/mnt/session/uploads/sub/dir/data.csv",
        "/workspace/input.json",
        "/home/agent/notes.md",
        "/tmp/x.txt",
        "/data",
        "/mnt/session/other.txt",
        "/mnt/session/outputs-not-really/x",  # a sibling, not inside outputs
        "/usrlocal/x",  # not /usr
        "/a/" + "b" * (MAX_MOUNT_PATH_LENGTH - 3),
    ],
)
def test_valid_mount_paths(path):
    assert resolve_mount_path("file_a", path) == path


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("", "empty"),
        ("relative/path.txt", "absolute"),
        ("./x", "absolute"),
        ("/", "'/'"),
        ("/mnt/../etc/passwd", ".."),
        ("/mnt/session/uploads/..", ".."),
        ("/mnt//session/x", "normalized"),
        ("/mnt/session/x/", "normalized"),
        ("/mnt/./session/x", "normalized"),
        ("/mnt/session/outputs", "outputs"),
        ("/mnt/session/outputs/x.txt", "outputs"),
        ("/mnt/session/outputs/a/b", "outputs"),
        ("/mnt/session/uploads", "replace the directory"),
        ("/mnt/session", "replace the directory"),
        ("/mnt", "replace the directory"),
        ("/tmp", "replace the directory"),
        ("/workspace", "replace the directory"),
        ("/bin", "system"),
        ("/bin/sh", "system"),
        ("/etc/passwd", "system"),
        ("/proc/self/mem", "system"),
        ("/sys/kernel", "system"),
        ("/dev/null", "system"),
        ("/usr/bin/python", "system"),
        ("/lib64/x", "system"),
        ("/a\x00b", "control"),
        ("/a\nb", "control"),
        ("/" + "a" * MAX_MOUNT_PATH_LENGTH, "longer"),
    ],
)
def test_invalid_mount_paths(path, needle):
    with pytest.raises(InvalidMountPath) as exc:
        resolve_mount_path("file_a", path)
    assert needle in str(exc.value)
    assert exc.value.reason == "invalid_mount_path"
    assert exc.value.status == 400


def test_mount_path_must_be_a_string():
    with pytest.raises(InvalidMountPath):
        resolve_mount_path("file_a", 7)


def test_mount_path_conflicts():
    existing = ["/mnt/session/uploads/file_a", "/data/x.txt"]
    check_mount_path_available("/mnt/session/uploads/file_b", existing)
    check_mount_path_available("/data/x.txt2", existing)
    for path in ["/data/x.txt", "/data/x.txt/inner", "/data", "/mnt/session/uploads/file_a"]:
        with pytest.raises(InvalidMountPath):
            check_mount_path_available(path, existing)


def test_resource_count():
    assert MAX_FILE_RESOURCES == 100
    check_resource_count(99)
    check_resource_count(0, adding=100)
    with pytest.raises(ProcessorError) as exc:
        check_resource_count(100)
    assert exc.value.reason == "too_many_resources"
    with pytest.raises(ProcessorError):
        check_resource_count(0, adding=101)


# --- tar stream -----------------------------------------------------------------------------


def _parse(stream: bytes) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isreg() else None
            out[member.name] = (member, data)
    return out


@pytest.mark.parametrize("size", [0, 1, 511, 512, 513, 5000])
def test_tar_stream_round_trips(size):
    payload = bytes(i % 251 for i in range(size))
    chunks = [payload[i : i + 100] for i in range(0, size, 100)]
    stream = b"".join(tar_stream_for_file("/mnt/session/uploads/file_a", size, iter(chunks)))
    assert len(stream) % 512 == 0
    members = _parse(stream)
    assert list(members) == ["mnt", "mnt/session", "mnt/session/uploads", "mnt/session/uploads/file_a"]
    for name in ["mnt", "mnt/session", "mnt/session/uploads"]:
        info, _ = members[name]
        assert info.isdir() and info.mode == 0o755
    info, data = members["mnt/session/uploads/file_a"]
    assert info.isreg()
    assert info.mode == 0o444
    assert info.uid == 0 and info.gid == 0
    assert info.size == size
    assert data == payload


def test_tar_stream_extracts_read_only(tmp_path):
    stream = b"".join(tar_stream_for_file("/data/sub/in.txt", 5, [b"he", b"llo"]))
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as tar:
        tar.extractall(tmp_path, filter="fully_trusted")
    target = tmp_path / "data" / "sub" / "in.txt"
    assert target.read_bytes() == b"hello"
    assert target.stat().st_mode & 0o777 == 0o444


def test_tar_stream_relative_to_root_and_without_parents():
    stream = b"".join(
        tar_stream_for_file("/tmp/work/x.txt", 3, [b"abc"], root="/tmp", include_parents=False, mtime=1_700_000_000)
    )
    members = _parse(stream)
    assert list(members) == ["work/x.txt"]
    info, data = members["work/x.txt"]
    assert data == b"abc" and info.mtime == 1_700_000_000


def test_tar_stream_long_and_unicode_names():
    path = "/mnt/session/uploads/" + "d" * 150 + "/ünïcode-" + "n" * 120 + ".txt"
    members = _parse(b"".join(tar_stream_for_file(path, 2, [b"ok"])))
    assert members[path[1:]][1] == b"ok"


def test_tar_stream_is_lazy_and_bounded():
    """The stream pulls one chunk at a time and passes it through: it never holds more than
    the chunk in hand, so an arbitrarily large file streams in constant memory."""
    chunk_size = 64 * 1024
    count = 200  # 12.5 MiB in total, never materialised at once
    pulled = []

    def source():
        for i in range(count):
            pulled.append(i)
            yield bytes([i % 256]) * chunk_size

    stream = tar_stream_for_file("/mnt/session/uploads/file_big", chunk_size * count, source())
    assert pulled == []  # nothing happens until the consumer asks
    total = 0
    largest = 0
    for piece in stream:
        largest = max(largest, len(piece))
        total += len(piece)
        # At most one chunk has been pulled beyond what was yielded so far.
        assert len(pulled) * chunk_size <= total
    assert largest == chunk_size
    assert len(pulled) == count
    assert total == 512 * 4 + chunk_size * count + 1024  # 3 dir headers + file header, data, end


def test_tar_stream_streams_into_tarfile_reader():
    size = 3 * 1024 * 1024 + 7
    chunks = (b"z" * min(65536, size - offset) for offset in range(0, size, 65536))
    stream = b"".join(tar_stream_for_file("/x/big.bin", size, chunks))
    info, data = _parse(stream)["x/big.bin"]
    assert info.size == size and data == b"z" * size


def test_tar_stream_rejects_content_of_the_wrong_length():
    with pytest.raises(ValueError, match="longer"):
        b"".join(tar_stream_for_file("/x/a", 3, [b"ab", b"cd"]))
    with pytest.raises(ValueError, match="declared"):
        b"".join(tar_stream_for_file("/x/a", 5, [b"ab"]))


@pytest.mark.parametrize(
    ("path", "root"),
    [("relative", "/"), ("/x/../y", "/"), ("/x/", "/"), ("/tmp/a", "/var"), ("/tmp", "/tmp")],
)
def test_tar_stream_rejects_bad_paths(path, root):
    with pytest.raises(ValueError):
        b"".join(tar_stream_for_file(path, 0, [], root=root))


def test_tar_stream_accepts_memoryview_chunks():
    data = memoryview(b"hello world")
    stream = b"".join(tar_stream_for_file("/x/a", 11, [data[:5], data[5:]]))
    assert _parse(stream)["x/a"][1] == b"hello world"
