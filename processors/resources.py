"""File resources: where a File goes in the sandbox, and the tar stream that puts it there
(DESIGN flow 5). Pure; `sandboxes/` feeds the stream to Docker's put_archive."""

import posixpath
import re
import tarfile
from collections.abc import Iterable, Iterator

from processors.errors import InvalidMountPath, ProcessorError
from processors.filenames import filename_shown, path_problem
from processors.outputs import OUTPUTS_DIR

MAX_FILE_RESOURCES = 100
MAX_MOUNT_PATH_LENGTH = 1024
UPLOADS_DIR = "/mnt/session/uploads"
SKILLS_DIR = "/mnt/skills"  # skills are placed at /mnt/skills/<name>/ (sessions/services/skill_mounts.py)
FILE_MODE = 0o444
DIR_MODE = 0o755

# Mounting over (or inside) these would break the sandbox's operating system.
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
WORKDIR = "/workspace"  # the sandbox's working directory (sandboxes.WORKDIR)
TMP_DIR = "/tmp"
# Directories that must stay directories: a File placed exactly there (or at an ancestor) would
# shadow every default upload mount, the outputs mount, the working directory or /tmp (the
# sandbox's writable mounts). A new file below them is fine.
RESERVED_DIRS = (UPLOADS_DIR, OUTPUTS_DIR, WORKDIR, TMP_DIR, SKILLS_DIR)

_SAFE_FILE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_BLOCK = tarfile.BLOCKSIZE


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def resolve_mount_path(file_id: str, mount_path: str | None) -> str:
    """The absolute path at which a file resource appears in the sandbox.

    Default `/mnt/session/uploads/<file_id>`. A given path must be absolute and normalised
    (no `.`/`..` segments, no `//`, no trailing slash), free of control characters, at most
    MAX_MOUNT_PATH_LENGTH characters, not `/`, not inside a system directory, not inside
    /mnt/session/outputs (those are the agent's deliverables) and not an ancestor of or equal to
    a RESERVED_DIRS directory (/mnt/session/uploads, /mnt/session/outputs, /workspace, /tmp)."""
    if mount_path is None:
        if not isinstance(file_id, str) or not _SAFE_FILE_ID.match(file_id):
            raise InvalidMountPath(f"Cannot derive a mount path from file id {file_id!r}.")
        return f"{UPLOADS_DIR}/{file_id}"
    if not isinstance(mount_path, str):
        raise InvalidMountPath("mount_path must be a string.")
    shown = repr(filename_shown(mount_path[:100]))
    if not mount_path:
        raise InvalidMountPath("mount_path must not be empty.")
    if len(mount_path) > MAX_MOUNT_PATH_LENGTH:
        raise InvalidMountPath(f"mount_path is longer than {MAX_MOUNT_PATH_LENGTH} characters.")
    problem = path_problem(mount_path)
    if problem:
        raise InvalidMountPath(f"mount_path {shown} {problem}.")
    if not mount_path.startswith("/"):
        raise InvalidMountPath(f"mount_path {shown} must be an absolute path.")
    if ".." in mount_path.split("/"):
        raise InvalidMountPath(f"mount_path {shown} must not contain '..'.")
    if mount_path == "/":
        raise InvalidMountPath("mount_path must name a file, not '/'.")
    if posixpath.normpath(mount_path) != mount_path:
        raise InvalidMountPath(f"mount_path {shown} is not normalized (no '.', '//' or trailing '/').")
    for directory in SYSTEM_DIRS:
        if _is_within(mount_path, directory):
            raise InvalidMountPath(f"mount_path {shown} is inside the system directory {directory}.")
    if _is_within(mount_path, OUTPUTS_DIR):
        raise InvalidMountPath(f"mount_path {shown} is inside {OUTPUTS_DIR}, which holds the session's outputs.")
    for directory in RESERVED_DIRS:
        if _is_within(directory, mount_path):
            raise InvalidMountPath(f"mount_path {shown} would replace the directory {directory}.")
    return mount_path


def check_mount_path_available(mount_path: str, existing: Iterable[str]) -> None:
    """A new resource may not share its path with another, nor sit above or below one."""
    for other in existing:
        if _is_within(mount_path, other) or _is_within(other, mount_path):
            raise InvalidMountPath(f"mount_path {mount_path!r} conflicts with the existing resource at {other!r}.")


def check_resource_count(existing: int, adding: int = 1) -> None:
    if existing + adding > MAX_FILE_RESOURCES:
        raise ProcessorError(
            f"A session can have at most {MAX_FILE_RESOURCES} file resources.", reason="too_many_resources"
        )


def _header(name: str, *, kind: bytes, mode: int, size: int, mtime: int, uid: int, gid: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = mtime
    info.uid, info.gid = uid, gid
    info.uname = info.gname = "root" if uid == 0 else ""
    # PAX: names over 100 bytes and non-ASCII names are carried in an extended header.
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def tar_stream_for_file(
    path_in_container: str,
    size: int,
    chunks: Iterable[bytes],
    *,
    root: str = "/",
    include_parents: bool = True,
    mode: int = FILE_MODE,
    mtime: int = 0,
    uid: int = 0,
    gid: int = 0,
) -> Iterator[bytes]:
    """A tar stream that, extracted at `root` (Docker `put_archive(root, stream)`), creates
    `path_in_container` as a regular file with `mode` (read-only 0444 by default), owned by
    uid/gid (root by default), holding exactly `size` bytes from `chunks`.

    Memory stays bounded: each input chunk is yielded as is, never joined or buffered. The
    parent directories below `root` come first (mode 0755) when `include_parents`. Note that
    Docker applies a directory header's mode to an existing directory, so to place a file
    under a directory whose mode must be kept (e.g. /tmp), pass that directory as `root`.
    Raises ValueError if the chunks hold more or fewer bytes than `size`.
    """
    if not path_in_container.startswith("/") or posixpath.normpath(path_in_container) != path_in_container:
        raise ValueError(f"not an absolute normalized path: {path_in_container!r}")
    root = posixpath.normpath(root)
    relative = posixpath.relpath(path_in_container, root)
    if relative == "." or relative.split("/")[0] == "..":
        raise ValueError(f"{path_in_container!r} is not below {root!r}")
    if size < 0:
        raise ValueError("size must not be negative")

    if include_parents:
        parts = relative.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth]) + "/"
            yield _header(name, kind=tarfile.DIRTYPE, mode=DIR_MODE, size=0, mtime=mtime, uid=uid, gid=gid)
    yield _header(relative, kind=tarfile.REGTYPE, mode=mode, size=size, mtime=mtime, uid=uid, gid=gid)

    written = 0
    for chunk in chunks:
        if not chunk:
            continue
        written += len(chunk)
        if written > size:
            raise ValueError(f"file content is longer than the declared {size} bytes")
        yield bytes(chunk)
    if written != size:
        raise ValueError(f"file content is {written} bytes, but {size} were declared")
    remainder = size % _BLOCK
    if remainder:
        yield b"\0" * (_BLOCK - remainder)
    # End of archive: two zero blocks.
    yield b"\0" * (2 * _BLOCK)


def tar_stream_for_files(
    files: Iterable[tuple[str, int, Iterable[bytes]]],
    *,
    root: str,
    mode: int = FILE_MODE,
    uid: int = 0,
    gid: int = 0,
    directories: Iterable[str] = (),
) -> Iterator[bytes]:
    """One tar stream that, extracted at `root`, creates each of `directories` (relative; 0755),
    then each (relative path, size, chunks) as a regular file with `mode`, its parent
    directories (0755) first, all owned by uid/gid. Memory stays bounded as in
    tar_stream_for_file. Raises ValueError for a path that is not relative and normalized, or
    chunks that do not hold `size` bytes."""
    made: set[str] = set()
    for directory in directories:
        name = directory.rstrip("/") + "/"
        if name not in made:
            made.add(name)
            yield _header(name, kind=tarfile.DIRTYPE, mode=DIR_MODE, size=0, mtime=0, uid=uid, gid=gid)
    for relative, size, chunks in files:
        if relative.startswith("/") or posixpath.normpath(relative) != relative or relative.split("/")[0] == "..":
            raise ValueError(f"not a relative normalized path: {relative!r}")
        parts = relative.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth]) + "/"
            if name not in made:
                made.add(name)
                yield _header(name, kind=tarfile.DIRTYPE, mode=DIR_MODE, size=0, mtime=0, uid=uid, gid=gid)
        yield _header(relative, kind=tarfile.REGTYPE, mode=mode, size=size, mtime=0, uid=uid, gid=gid)
        written = 0
        for chunk in chunks:
            written += len(chunk)
            if written > size:
                raise ValueError(f"{relative!r}: content is longer than the declared {size} bytes")
            if chunk:
                yield bytes(chunk)
        if written != size:
            raise ValueError(f"{relative!r}: content is {written} bytes, but {size} were declared")
        if size % _BLOCK:
            yield b"\0" * (_BLOCK - size % _BLOCK)
    yield b"\0" * (2 * _BLOCK)
