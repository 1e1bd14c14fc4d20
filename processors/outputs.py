"""Session outputs: which members of the outputs archive become Files, and what changes
(DESIGN flow 6). Pure; the worker reads Docker's `get_archive("/mnt/session/outputs")`, whose
members are named relative to the archive root: `outputs`, `outputs/report.md`, `outputs/sub/`…"""

import tarfile
from collections.abc import Mapping
from typing import Literal, NamedTuple

from processors.filenames import filename_shown, path_problem

OUTPUTS_DIR = "/mnt/session/outputs"
ARCHIVE_ROOT = "outputs"
MAX_OUTPUT_FILES = 500
MAX_OUTPUT_FILE_BYTES = 500_000_000  # the Files API's 500 MB upload limit (MANGO_FILE_MAX_BYTES)

MemberKind = Literal["file", "dir", "invalid"]


def _shown(name: str, root: str) -> str:
    """A member name as the agent knows it: /mnt/session/outputs/…"""
    if name == root or name.startswith(root + "/"):
        return OUTPUTS_DIR + name[len(root) :]
    return name


def classify_output_member(
    tarinfo: tarfile.TarInfo, *, root: str = ARCHIVE_ROOT, max_bytes: int = MAX_OUTPUT_FILE_BYTES
) -> tuple[MemberKind, str | None]:
    """("file", relative_path) for a regular file to publish; ("dir", None) for a directory
    (traversed, never a File); ("invalid", reason) for anything else: symbolic and hard links,
    devices, FIFOs and other special entries, absolute or traversing names, names outside the
    archive root, and files over `max_bytes`. The reason names the path as seen in the sandbox."""
    name = tarinfo.name
    # Messages carry the name escaped: a CR/LF or a bidirectional override in it must not
    # reach the session.error text as such.
    shown = filename_shown(_shown(name, root))

    def invalid(why: str) -> tuple[MemberKind, str]:
        return "invalid", f"{shown}: {why}"

    if tarinfo.issym():
        return invalid("symbolic links are not published")
    if tarinfo.islnk():
        return invalid("hard links are not published")
    if tarinfo.ischr() or tarinfo.isblk():
        return invalid("device files are not published")
    if tarinfo.isfifo():
        return invalid("FIFOs are not published")
    if not (tarinfo.isreg() or tarinfo.isdir()):
        return invalid("only regular files and directories are published")

    if not name or "\x00" in name or "\\" in name:
        return invalid("invalid file name")
    problem = path_problem(name)
    if problem:
        return invalid(f"the path {problem}; it is not published")
    if name.startswith("/"):
        return invalid("absolute paths are not allowed")
    trimmed = name.removesuffix("/") if tarinfo.isdir() else name
    parts = trimmed.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return invalid("path traversal or a non-normalized path is not allowed")
    if parts[0] != root:
        return invalid(f"entry is outside {OUTPUTS_DIR}")
    relative = "/".join(parts[1:])

    if tarinfo.isdir():
        return "dir", None
    if not relative:
        return invalid(f"{OUTPUTS_DIR} itself must be a directory")
    if tarinfo.size > max_bytes:
        return invalid(f"file is {tarinfo.size:,} bytes; the limit is {max_bytes:,} bytes")
    return "file", relative


def check_output_count(count: int, *, limit: int = MAX_OUTPUT_FILES) -> str | None:
    """None when `count` output files may be published; otherwise the reason they may not."""
    if count > limit:
        return f"{OUTPUTS_DIR} holds {count:,} files; at most {limit:,} can be published"
    return None


class OutputPlan(NamedTuple):
    """Sorted relative paths. unchanged: same bytes, keep the visible File (no upload);
    changed: new bytes, replace atomically; added: new File; removed: hide and clean up."""

    unchanged: list[str]
    changed: list[str]
    added: list[str]
    removed: list[str]


def plan_outputs(current: Mapping[str, str], tree: Mapping[str, str]) -> OutputPlan:
    """Compare the published set (`current`: relative path → sha256) with the tree just read
    (`tree`: relative path → sha256) so that, applied, the visible set equals the tree."""
    unchanged, changed, added = [], [], []
    for path in sorted(tree):
        if path not in current:
            added.append(path)
        elif current[path].lower() == tree[path].lower():
            unchanged.append(path)
        else:
            changed.append(path)
    removed = sorted(path for path in current if path not in tree)
    return OutputPlan(unchanged, changed, added, removed)
