"""What a memory may be, where a store mounts, and what write-back changes (pure: no ORM, no
storage).

The rules are the SDK's (MemoryCreateParams, MemoryStoreCreateParams): a path starts with `/`,
has 1 to 20 segments, none empty, `.` or `..`; no control or format characters and not U+2028 or
U+2029; in Unicode Normalization Form C; at most 1,024 bytes of UTF-8. Content is UTF-8 text of
at most 100 kB (102,400 bytes). A store's directory under /mnt/memory/ is its name lowercased,
every run of characters other than ASCII letters and digits one hyphen.
"""

import re
import unicodedata
from dataclasses import dataclass

MEMORY_ROOT = "/mnt/memory"
PATH_MAX_BYTES = 1024
PATH_MAX_SEGMENTS = 20
CONTENT_MAX_BYTES = 102_400
STORE_NAME_MAX_CHARS = 255
STORE_DESCRIPTION_MAX_CHARS = 1024
INSTRUCTIONS_MAX_CHARS = 4096
# Memory stores one session mounts (each a directory under /mnt/memory/ and a prompt entry).
MAX_MEMORY_STORES_PER_SESSION = 8
_SLUG_GAP = re.compile(r"[^a-z0-9]+")
_SEPARATORS = ("\u2028", "\u2029")


class MemoryRefused(ValueError):
    """A path or content this server does not accept; the message says why."""


def _bad_character(text: str) -> str | None:
    for char in text:
        if char in _SEPARATORS or unicodedata.category(char) in ("Cc", "Cf"):
            return char
    return None


def check_path(path: str) -> str:
    """`path` if it is a valid memory path, else MemoryRefused naming the rule it breaks."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise MemoryRefused("must start with '/'.")
    if len(path.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        raise MemoryRefused(f"must be at most {PATH_MAX_BYTES} bytes.")
    char = _bad_character(path)
    if char is not None:
        raise MemoryRefused(f"must not contain the character U+{ord(char):04X}.")
    if unicodedata.normalize("NFC", path) != path:
        raise MemoryRefused("must be in Unicode Normalization Form C.")
    segments = path[1:].split("/")
    if len(segments) > PATH_MAX_SEGMENTS:
        raise MemoryRefused(f"has {len(segments)} segments; at most {PATH_MAX_SEGMENTS}.")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise MemoryRefused(f"segment {segment!r} is not allowed (empty, '.' and '..' are not).")
    return path


def path_ancestors(path: str) -> list[str]:
    """The directories above a valid memory path, outermost first: `/a/b/c` → `/a`, `/a/b`."""
    segments = path[1:].split("/")
    return ["/" + "/".join(segments[:i]) for i in range(1, len(segments))]


def path_clash(path: str, others) -> str | None:
    """The first of `others` that `path` cannot live beside in a directory tree: one of its
    directories (`/x` beside `/x/y`) or a path under it (`/x/y` beside `/x`). None if none."""
    above, below = set(path_ancestors(path)), path + "/"
    return next((other for other in others if other in above or other.startswith(below)), None)


def check_path_prefix(prefix: str) -> str:
    """A list's `path_prefix`: `/` or whole segments ending in `/`."""
    if not isinstance(prefix, str) or not prefix.startswith("/") or not prefix.endswith("/"):
        raise MemoryRefused("must start and end with '/'.")
    if prefix != "/":
        check_path(prefix[:-1])
    return prefix


def check_content(content: str) -> int:
    """The UTF-8 size of acceptable content, else MemoryRefused."""
    if not isinstance(content, str):
        raise MemoryRefused("must be a string.")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise MemoryRefused("must be valid UTF-8 text (no lone surrogates).") from None
    if size > CONTENT_MAX_BYTES:
        raise MemoryRefused(f"is {size} bytes; a memory holds at most {CONTENT_MAX_BYTES} bytes.")
    return size


def check_store_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= STORE_NAME_MAX_CHARS:
        raise MemoryRefused(f"must be 1 to {STORE_NAME_MAX_CHARS} characters.")
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise MemoryRefused("must not contain control characters.")
    return name


def mount_slug(name: str) -> str:
    """The store's directory name under /mnt/memory/ (never empty)."""
    return _SLUG_GAP.sub("-", name.lower()).strip("-") or "memory"


def mount_path(name: str) -> str:
    return f"{MEMORY_ROOT}/{mount_slug(name)}"


def memory_relative_path(path: str) -> str:
    """A memory's path inside its store's directory (the leading `/` dropped)."""
    return path[1:]


@dataclass(frozen=True)
class Change:
    """One write-back step: `operation` is created, modified or deleted; `memory_id` and
    `expected_sha256` name the stored memory it replaces (None for a create)."""

    operation: str
    path: str
    memory_id: str | None
    expected_sha256: str | None
    content_sha256: str | None


def writeback_changes(*, baseline: dict[str, tuple[str, str]], tree: dict[str, str]) -> list[Change]:
    """What write-back does to turn the store's state when the sandbox was filled (`baseline`:
    path -> (memory id, sha256)) into the sandbox's tree (`tree`: path -> sha256). Unchanged
    paths make no change; the order is by path, deletions last."""
    changes = []
    for path in sorted(tree):
        sha = tree[path]
        known = baseline.get(path)
        if known is None:
            changes.append(Change("created", path, None, None, sha))
        elif known[1] != sha:
            changes.append(Change("modified", path, known[0], known[1], sha))
    for path in sorted(set(baseline) - set(tree)):
        memory_id, sha = baseline[path]
        changes.append(Change("deleted", path, memory_id, sha, None))
    return changes


def memory_prompt_section(stores: list[dict]) -> str:
    """The system prompt's memory section: each attached store's name, mount path, access,
    description and instructions. `stores`: [{name, mount_path, access, description,
    instructions}]."""
    if not stores:
        return ""
    lines = [
        "<memory>",
        "Memory stores are directories of text files that persist across sessions. Read them before"
        " you start; in a read_write store, keep what later sessions should know up to date (create,"
        " edit or delete files). Changes are saved when you finish your turn. A read_only store cannot"
        " be changed.",
    ]
    for store in stores:
        lines.append(f'<memory_store name="{store["name"]}" path="{store["mount_path"]}" access="{store["access"]}">')
        if store.get("description"):
            lines.append(f"<description>{store['description']}</description>")
        if store.get("instructions"):
            lines.append(f"<instructions>{store['instructions']}</instructions>")
        lines.append("</memory_store>")
    lines.append("</memory>")
    return "\n".join(lines)


def classify_memory_member(tarinfo, *, root: str) -> tuple[str, str | None]:
    """A member of the tar archive of a store's directory (`root`: the directory's name):
    ("dir", None); ("file", memory path) for a regular file that may be a memory; or
    ("invalid", reason) naming the path as the agent sees it: links, devices and other special
    files, paths the memory rules refuse, files over the content limit."""
    name = tarinfo.name.removesuffix("/") if tarinfo.isdir() else tarinfo.name
    shown = f"{MEMORY_ROOT}/{name}"[:300].encode("unicode_escape").decode("ascii")
    if name != root and not name.startswith(root + "/"):
        return "invalid", f"{shown}: outside the store's directory"
    if tarinfo.isdir():
        return "dir", None
    if not tarinfo.isreg():
        return "invalid", f"{shown}: only regular files are saved (links and special files are not)"
    path = name[len(root) :]
    if not path:
        return "invalid", f"{shown}: the store's directory must be a directory"
    try:
        check_path(path)
    except MemoryRefused as exc:
        return "invalid", f"{shown}: the path {exc}"
    if tarinfo.size > CONTENT_MAX_BYTES:
        return "invalid", f"{shown}: {tarinfo.size:,} bytes; a memory holds at most {CONTENT_MAX_BYTES:,} bytes"
    return "file", path
