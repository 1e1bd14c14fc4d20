"""Repository resources: where a cloned repository goes in the sandbox, what a checkout may
name, what a failed git run means, and the tar stream of a working tree. Pure: the worker's git
adapter (integrations/git.py) runs git and reads the tree; `sandboxes/` extracts the stream.
"""

import posixpath
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from processors.errors import InvalidMountPath, ProcessorError
from processors.resources import WORKDIR, resolve_mount_path

MAX_REPOSITORY_RESOURCES = 10
MAX_URL_LENGTH = 2048
MAX_TOKEN_LENGTH = 4096
MAX_BRANCH_LENGTH = 255
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
_BLOCK = tarfile.BLOCKSIZE

# The five repository_* session.error types (the SDK's BetaManagedAgentsRepository*ErrorObject).
AUTHENTICATION = "repository_authentication_error"
FORBIDDEN = "repository_forbidden_error"
NOT_FOUND = "repository_not_found_error"
CHECKOUT = "repository_checkout_error"
CLONE = "repository_clone_error"
ERROR_TYPES = (AUTHENTICATION, FORBIDDEN, NOT_FOUND, CHECKOUT, CLONE)


def repository_name(url: str) -> str:
    """The last path segment of the URL without `.git`: `https://host/org/app.git` → `app`."""
    try:
        path = urlsplit(url).path
    except ValueError as exc:
        raise ProcessorError(f"url is not a valid URL: {exc}", reason="invalid_url") from exc
    name = posixpath.basename(path.rstrip("/"))
    if name.endswith(".git"):
        name = name[:-4]
    if not _NAME.match(name) or name in (".", ".."):
        raise InvalidMountPath(
            "Cannot derive a mount path from the repository URL (its last path segment must be 1-100 "
            "letters, digits, '.', '_' or '-'); give mount_path."
        )
    return name


def resolve_repository_mount_path(url: str, mount_path: str | None) -> str:
    """`/workspace/<repo-name>` by default; a given path follows the file resources' rules
    (processors.resources.resolve_mount_path)."""
    if mount_path is None:
        return f"{WORKDIR}/{repository_name(url)}"
    return resolve_mount_path("repository", mount_path)


def check_checkout(checkout: dict | None) -> dict | None:
    """`{type: branch, name}` or `{type: commit, sha}` (a full SHA-1 or SHA-256, lowercase), or
    None for the default branch. A branch name follows git's ref rules (`git check-ref-format`)."""
    if checkout is None:
        return None
    if checkout.get("type") == "branch":
        name = checkout.get("name")
        problem = _branch_problem(name)
        if problem:
            raise ProcessorError(f"checkout.name {problem}.", reason="invalid_checkout")
        return {"type": "branch", "name": name}
    if checkout.get("type") == "commit":
        sha = checkout.get("sha")
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise ProcessorError(
                "checkout.sha must be a full commit id (40 or 64 lowercase hexadecimal characters).",
                reason="invalid_checkout",
            )
        return {"type": "commit", "sha": sha}
    raise ProcessorError("checkout.type must be branch or commit.", reason="invalid_checkout")


def _branch_problem(name) -> str | None:
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_BRANCH_LENGTH:
        return f"must be at most {MAX_BRANCH_LENGTH} characters"
    if name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")) or name == "@":
        return "is not a valid branch name"
    if any(part in name for part in ("..", "//", "@{", "\\")) or re.search(r"[\x00-\x20\x7f~^:?*\[]", name):
        return "is not a valid branch name"
    if any(segment.startswith(".") for segment in name.split("/")):
        return "is not a valid branch name"
    return None


@dataclass(frozen=True)
class GitFailure:
    """What a failed git run means, in words safe to show the client (no server output)."""

    type: str
    message: str


_HTTP_STATUS = re.compile(r"returned error: (\d{3})")


def classify_git_failure(stderr: str, *, checkout: dict | None) -> GitFailure:
    """The repository_* error a failed clone or fetch stands for, from git's own messages.
    Without an answer git's HTTP client asks for credentials on a 401; with prompts off that
    is "could not read Username" (or "Authentication failed" when it had some)."""
    text = stderr.lower()
    status = _HTTP_STATUS.search(text)
    code = int(status.group(1)) if status else None
    if code == 401 or "could not read username" in text or "authentication failed" in text:
        return GitFailure(AUTHENTICATION, "The git host refused the credentials (HTTP 401): check authorization_token.")
    if code == 403:
        return GitFailure(FORBIDDEN, "The git host denied access to the repository (HTTP 403).")
    if code == 404 or ("repository" in text and "not found" in text):
        return GitFailure(NOT_FOUND, "The git host has no such repository (HTTP 404), or hides it from this token.")
    if checkout is not None and (
        "remote branch" in text
        or "couldn't find remote ref" in text
        or "not a tree" in text
        or "unadvertised object" in text
        or "not our ref" in text
        or "did not match any" in text
        or "unable to read tree" in text
    ):
        what = f"branch {checkout['name']!r}" if checkout["type"] == "branch" else f"commit {checkout['sha']}"
        return GitFailure(CHECKOUT, f"The repository has no {what}.")
    if code is not None:
        return GitFailure(CLONE, f"The git host answered HTTP {code}.")
    return GitFailure(CLONE, "The repository could not be cloned.")


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a working tree below its root: a directory, a regular file (`size` bytes
    from `open_chunks()`), or a symbolic link to `target`."""

    path: str
    kind: str  # "dir" | "file" | "symlink"
    mode: int = 0o644
    size: int = 0
    target: str = ""
    mtime: int = 0
    open_chunks: Callable[[], Iterable[bytes]] | None = None


def tar_stream_for_tree(entries: Iterable[TreeEntry], *, top: str, uid: int, gid: int) -> Iterator[bytes]:
    """A tar stream that, extracted at the mount path's parent, creates `top/` holding every
    entry, owned by uid/gid (the sandbox's user: the tree is the agent's to work in). Files keep
    their executable bit only; symbolic links are carried as links, never followed. Memory stays
    bounded: each chunk is yielded as read. Raises ValueError for a path that leaves `top` or a
    file whose chunks do not hold its size."""
    if not top or "/" in top or top in (".", ".."):
        raise ValueError(f"not a directory name: {top!r}")
    yield _header(f"{top}/", kind=tarfile.DIRTYPE, mode=0o755, uid=uid, gid=gid)
    for entry in entries:
        relative = entry.path
        if relative.startswith("/") or posixpath.normpath(relative) != relative or relative.split("/")[0] == "..":
            raise ValueError(f"not a relative normalized path: {relative!r}")
        name = f"{top}/{relative}"
        if entry.kind == "dir":
            yield _header(f"{name}/", kind=tarfile.DIRTYPE, mode=0o755, uid=uid, gid=gid, mtime=entry.mtime)
        elif entry.kind == "symlink":
            yield _header(
                name, kind=tarfile.SYMTYPE, mode=0o777, uid=uid, gid=gid, linkname=entry.target, mtime=entry.mtime
            )
        elif entry.kind == "file":
            mode = 0o755 if entry.mode & 0o111 else 0o644
            yield _header(name, kind=tarfile.REGTYPE, mode=mode, size=entry.size, uid=uid, gid=gid, mtime=entry.mtime)
            written = 0
            for chunk in entry.open_chunks() if entry.open_chunks else ():
                written += len(chunk)
                if written > entry.size:
                    raise ValueError(f"{relative!r} grew while it was read")
                if chunk:
                    yield bytes(chunk)
            if written != entry.size:
                raise ValueError(f"{relative!r} is {written} bytes, but {entry.size} were listed")
            if entry.size % _BLOCK:
                yield b"\0" * (_BLOCK - entry.size % _BLOCK)
        else:
            raise ValueError(f"{relative!r}: unsupported entry kind {entry.kind!r}")
    yield b"\0" * (2 * _BLOCK)


def _header(
    name: str, *, kind: bytes, mode: int, uid: int, gid: int, size: int = 0, linkname: str = "", mtime: int = 0
) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = mtime
    info.uid, info.gid = uid, gid
    info.linkname = linkname
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")
