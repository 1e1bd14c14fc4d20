"""processors/repositories.py: the default mount path, the checkout rules, what git's messages
mean, and the tar stream of a working tree (extracted here by the tarfile module, as Docker's
put_archive would)."""

import io
import tarfile

import pytest

from processors.errors import InvalidMountPath, ProcessorError
from processors.repositories import (
    AUTHENTICATION,
    CHECKOUT,
    CLONE,
    FORBIDDEN,
    NOT_FOUND,
    TreeEntry,
    check_checkout,
    classify_git_failure,
    resolve_repository_mount_path,
    tar_stream_for_tree,
)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://github.com/acme/app", "/workspace/app"),
        ("https://github.com/acme/app.git", "/workspace/app"),
        ("https://gitlab.example.com/group/sub/my-lib.git/", "/workspace/my-lib"),
        ("http://127.0.0.1:8080/x/dotted.name", "/workspace/dotted.name"),
    ],
)
def test_the_default_mount_path_is_the_repository_name_under_workspace(url, path):
    assert resolve_repository_mount_path(url, None) == path


@pytest.mark.parametrize(
    "url", ["https://github.com/", "https://github.com/acme/..", "https://h/a/%2e%2e", "https://h/a/b c"]
)
def test_a_url_without_a_usable_name_needs_a_mount_path(url):
    with pytest.raises(InvalidMountPath, match="give mount_path"):
        resolve_repository_mount_path(url, None)
    assert resolve_repository_mount_path(url, "/home/agent/code") == "/home/agent/code"


@pytest.mark.parametrize("path", ["/etc/app", "/workspace", "relative", "/workspace/../etc", "/mnt/session/outputs/x"])
def test_a_given_mount_path_follows_the_file_resources_rules(path):
    with pytest.raises(InvalidMountPath):
        resolve_repository_mount_path("https://github.com/acme/app", path)


def test_checkouts():
    assert check_checkout(None) is None
    assert check_checkout({"type": "branch", "name": "release/1.x"}) == {"type": "branch", "name": "release/1.x"}
    sha = "a" * 40
    assert check_checkout({"type": "commit", "sha": sha}) == {"type": "commit", "sha": sha}
    assert check_checkout({"type": "commit", "sha": "b" * 64})["sha"] == "b" * 64
    for bad in ("", "-x", "a..b", "a b", "x.lock", ".hidden", "a/.b", "a:b", "a~1", "a^", "a\\b", "@", "x/", "a//b"):
        with pytest.raises(ProcessorError, match=r"checkout\.name"):
            check_checkout({"type": "branch", "name": bad})
    for bad in ("abc", "A" * 40, "g" * 40, "a" * 39, 7):
        with pytest.raises(ProcessorError, match=r"checkout\.sha"):
            check_checkout({"type": "commit", "sha": bad})
    with pytest.raises(ProcessorError, match=r"checkout\.type"):
        check_checkout({"type": "tag", "name": "v1"})


def test_git_messages_map_to_the_five_error_types():
    branch = {"type": "branch", "name": "nope"}
    cases = [
        ("fatal: could not read Username for 'https://h': terminal prompts disabled", None, AUTHENTICATION),
        ("fatal: Authentication failed for 'https://h/a.git/'", None, AUTHENTICATION),
        ("fatal: unable to access 'https://h/a.git/': The requested URL returned error: 403", None, FORBIDDEN),
        ("fatal: repository 'https://h/a.git/' not found", None, NOT_FOUND),
        ("fatal: unable to access 'x': The requested URL returned error: 404", None, NOT_FOUND),
        ("warning: Could not find remote branch nope to clone.\nfatal: Remote branch nope not found in upstream origin",
         branch, CHECKOUT),
        ("fatal: couldn't find remote ref refs/heads/nope", branch, CHECKOUT),
        ("fatal: unable to access 'x': The requested URL returned error: 302", None, CLONE),
        ("fatal: unable to access 'x': Failed to connect to h port 443", None, CLONE),
    ]  # fmt: skip
    for stderr, checkout, expected in cases:
        failure = classify_git_failure(stderr, checkout=checkout)
        assert failure.type == expected, stderr
        assert "https://h" not in failure.message  # nothing of the server's output is repeated
    assert "'nope'" in classify_git_failure(cases[5][0], checkout=branch).message


def test_the_tree_stream_extracts_to_the_tree_owned_by_the_sandbox_user():
    entries = [
        TreeEntry(".git", "dir"),
        TreeEntry(".git/HEAD", "file", mode=0o644, size=5, open_chunks=lambda: [b"ref:\n"]),
        TreeEntry("run.sh", "file", mode=0o775, size=3, open_chunks=lambda: [b"a", b"bc"]),
        TreeEntry("link", "symlink", target="../../etc/passwd"),
        TreeEntry("docs", "dir"),
        TreeEntry("docs/big.bin", "file", size=1000, open_chunks=lambda: [b"x" * 600, b"y" * 400]),
    ]
    data = b"".join(tar_stream_for_tree(entries, top="app", uid=10001, gid=10001))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert list(members) == [
            "app",
            "app/.git",
            "app/.git/HEAD",
            "app/run.sh",
            "app/link",
            "app/docs",
            "app/docs/big.bin",
        ]
        assert all((m.uid, m.gid) == (10001, 10001) for m in members.values())
        assert members["app/run.sh"].mode == 0o755 and members["app/.git/HEAD"].mode == 0o644
        assert members["app/link"].issym() and members["app/link"].linkname == "../../etc/passwd"
        assert archive.extractfile("app/docs/big.bin").read() == b"x" * 600 + b"y" * 400


def test_the_tree_stream_refuses_paths_that_leave_the_tree_and_short_files():
    with pytest.raises(ValueError, match="relative normalized"):
        b"".join(tar_stream_for_tree([TreeEntry("../x", "dir")], top="app", uid=1, gid=1))
    short = TreeEntry("f", "file", size=10, open_chunks=lambda: [b"abc"])
    with pytest.raises(ValueError, match="10 were listed"):
        b"".join(tar_stream_for_tree([short], top="app", uid=1, gid=1))
    with pytest.raises(ValueError, match="directory name"):
        next(tar_stream_for_tree([], top="a/b", uid=1, gid=1))
