"""What a skill upload may be (pure: no ORM, no storage): one top-level directory holding a
SKILL.md whose YAML frontmatter names and describes the skill, and the files it refers to.

The rules on `name` and `description` are Anthropic's skill format's (and the SDK's
BetaSkillVersion docstrings): `name` is a kebab-case slug of at most 64 characters (lowercase
letters, digits and single hyphens), naming neither "anthropic" nor "claude", without XML tags;
`description` is non-empty, at most 1,024 characters, without XML tags.
"""

import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath

import yaml

SKILL_FILE = "SKILL.md"
NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 1024
PATH_MAX_CHARS = 1024
FRONTMATTER_MAX_BYTES = 64 * 1024
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_RESERVED = ("anthropic", "claude")
_XML_TAG = re.compile(r"<[^>]*>")


class SkillRefused(ValueError):
    """The upload is not a skill this server accepts; the message names what and where."""


@dataclass(frozen=True)
class SkillManifest:
    top: str  # the one top-level directory
    name: str
    description: str


def check_paths(paths: list[str]) -> str:
    """Every path relative, inside one top-level directory, without `.`/`..`/empty parts,
    backslashes or control characters, unique, and `<top>/SKILL.md` among them. Returns the
    top-level directory."""
    if not paths:
        raise SkillRefused("files: at least one file, SKILL.md among them.")
    tops, seen = set(), set()
    for path in paths:
        _check_path(path)
        if path in seen:
            raise SkillRefused(f"files: {path[:200]!r} appears twice.")
        seen.add(path)
        tops.add(path.split("/", 1)[0])
    if len(tops) > 1:
        names = ", ".join(sorted(repr(top[:64]) for top in tops)[:5])
        raise SkillRefused(f"files: all files must be in one top-level directory; found {names}.")
    for path in paths:
        parts = path.split("/")
        above = next(("/".join(parts[:i]) for i in range(2, len(parts)) if "/".join(parts[:i]) in seen), None)
        if above is not None:
            raise SkillRefused(
                f"files: {path[:200]!r} is under {above[:200]!r}, which is a file: a path cannot be both a file"
                " and a directory."
            )
    top = tops.pop()
    if f"{top}/{SKILL_FILE}" not in seen:
        raise SkillRefused(f"files: {top}/{SKILL_FILE} is missing (the skill's directory must hold a SKILL.md).")
    return top


def _check_path(path: str) -> None:
    shown = repr(path[:200])
    if not isinstance(path, str) or not path:
        raise SkillRefused("files: every file needs a path (its filename) inside the skill's directory.")
    if len(path) > PATH_MAX_CHARS:
        raise SkillRefused(f"files: {shown}... is longer than {PATH_MAX_CHARS} characters.")
    if "\\" in path or any(ord(char) < 32 or ord(char) == 127 for char in path):
        raise SkillRefused(f"files: {shown} holds a backslash or a control character.")
    if path.startswith("/") or PurePosixPath(path).is_absolute():
        raise SkillRefused(f"files: {shown} is absolute; paths are relative to the upload.")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SkillRefused(f"files: {shown} has an empty, '.' or '..' component.")
    if len(parts) < 2:
        raise SkillRefused(f"files: {shown} is not inside a directory; upload the skill's directory.")


def parse_manifest(top: str, skill_md: bytes) -> SkillManifest:
    """The skill's name and description from SKILL.md's YAML frontmatter (between `---` lines at
    the very start), checked against the skill format's rules."""
    try:
        text = skill_md.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillRefused(f"{top}/{SKILL_FILE}: must be UTF-8 text.") from None
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillRefused(f"{top}/{SKILL_FILE}: must begin with YAML frontmatter between '---' lines.")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise SkillRefused(f"{top}/{SKILL_FILE}: the frontmatter has no closing '---' line.") from None
    block = "\n".join(lines[1:end])
    if len(block.encode()) > FRONTMATTER_MAX_BYTES:
        raise SkillRefused(f"{top}/{SKILL_FILE}: the frontmatter is over {FRONTMATTER_MAX_BYTES} bytes.")
    try:
        data = yaml.safe_load(block)
    except RecursionError:
        # PyYAML composes nested collections recursively: deep nesting exhausts the stack.
        raise SkillRefused(f"{top}/{SKILL_FILE}: the frontmatter is nested too deeply.") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        raise SkillRefused(f"{top}/{SKILL_FILE}: the frontmatter is not valid YAML{line}.") from None
    if not isinstance(data, dict):
        raise SkillRefused(f"{top}/{SKILL_FILE}: the frontmatter must be a mapping with name and description.")
    return SkillManifest(top=top, name=_name(top, data.get("name")), description=_description(top, data))


def _name(top: str, name) -> str:
    where = f"{top}/{SKILL_FILE}: frontmatter name"
    if not isinstance(name, str) or not name:
        raise SkillRefused(f"{where} is required (a string).")
    if len(name) > NAME_MAX_CHARS:
        raise SkillRefused(f"{where} is over {NAME_MAX_CHARS} characters.")
    if _XML_TAG.search(name) or not _NAME.match(name):
        raise SkillRefused(f"{where} {name!r} must be lowercase letters, digits and single hyphens.")
    for word in _RESERVED:
        if word in name:
            raise SkillRefused(f"{where} {name!r} must not contain the reserved word {word!r}.")
    return name


def _description(top: str, data: dict) -> str:
    where = f"{top}/{SKILL_FILE}: frontmatter description"
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillRefused(f"{where} is required (a non-empty string).")
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise SkillRefused(f"{where} is over {DESCRIPTION_MAX_CHARS} characters.")
    if _XML_TAG.search(description):
        raise SkillRefused(f"{where} must not contain XML tags.")
    return description


def skills_prompt_section(skills: list[dict]) -> str:
    """The system prompt's skills section: each skill's name, description and path, so the model
    reads its SKILL.md when the task calls for it. `skills`: [{name, description, path}]."""
    if not skills:
        return ""
    lines = [
        "<skills>",
        "Skills are folders of instructions and files placed read-only in your sandbox. When a task"
        " matches a skill's description, read its SKILL.md first (with the read tool) and follow it.",
    ]
    for skill in skills:
        lines.append(f'<skill name="{skill["name"]}" path="{skill["path"]}/SKILL.md">{skill["description"]}</skill>')
    lines.append("</skills>")
    return "\n".join(lines)


# Zip creator hosts whose external_attr high bits are a Unix st_mode (as the SDK's own extractor reads them).
_ZIP_UNIX_HOSTS = (3, 19)


def zip_members(fileobj, *, max_files: int, max_file_bytes: int, max_bytes: int) -> list[tuple[str, bytes]]:
    """The regular files of a zip upload as (path, bytes), the limits applied to what is really
    read (a member that inflates past its declared size is caught too). A symlink, device or
    FIFO member is refused, as is a zip that does not open; directories are skipped."""
    try:
        archive = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise SkillRefused("files: the .zip upload is not a valid zip archive.") from None
    members, total = [], 0
    with archive:
        infos = archive.infolist()
        if len(infos) > max_files:
            raise SkillRefused(f"files: at most {max_files} files in a skill; the zip holds {len(infos)} entries.")
        for info in infos:
            mode = info.external_attr >> 16 if info.create_system in _ZIP_UNIX_HOSTS else 0
            if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
                raise SkillRefused(
                    f"files: {info.filename[:200]!r} in the zip is {kind}; only regular files are accepted."
                )
            if info.is_dir() or (mode and stat.S_ISDIR(mode)):
                continue
            try:
                with archive.open(info) as member:
                    data = member.read(max_file_bytes + 1)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError, ValueError):
                # A header that lies (a size, a name's length), a corrupt stream, an unsupported
                # method or an encrypted member: the archive is not one we can read.
                raise SkillRefused(
                    f"files: the .zip upload is not a valid zip archive ({info.filename[:200]!r} cannot be read)."
                ) from None
            if len(data) > max_file_bytes:
                raise SkillRefused(
                    f"files: {info.filename[:200]!r} is over {max_file_bytes} bytes (a skill file's limit)."
                )
            total += len(data)
            if total > max_bytes:
                raise SkillRefused(f"files: a skill holds at most {max_bytes} bytes.")
            members.append((info.filename, data))
    return members
