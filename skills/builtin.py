"""The built-in document skills: `xlsx`, `docx`, `pptx` and `pdf`, written for Mango (skills/builtin/:
SKILL.md and scripts over openpyxl, python-docx, python-pptx, pypdf and reportlab, which the default
sandbox image carries). Served as the `anthropic` skills of those ids, to every workspace, read-only.

They are not rows: each is a Skill and a SkillVersion built in memory from its directory, never
saved, so the same selectors, serializers and mounts serve them. A version's id is the first 16
hex digits of the SHA-256 over its files (paths and bytes): it changes exactly when the files do,
and a session pins it like a custom skill's.
"""

import functools
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from processors.skills import SKILL_FILE, parse_manifest
from skills.models import Skill, SkillVersion

ROOT = Path(__file__).resolve().parent / "builtin"
IDS = ("docx", "pdf", "pptx", "xlsx")
DISPLAY_NAMES = {
    "docx": "Word documents",
    "pdf": "PDF files",
    "pptx": "PowerPoint decks",
    "xlsx": "Excel workbooks",
}
# When these skills first shipped (their created_at; a version's is its files' newest mtime would
# vary by checkout, so one date for all).
SHIPPED = datetime(2026, 12, 4, tzinfo=UTC)
READ_CHUNK = 64 * 1024


def is_builtin(skill_id: str) -> bool:
    return skill_id in IDS


@functools.cache
def builtin(skill_id: str) -> tuple[Skill, SkillVersion]:
    """The skill and its one version (unsaved model instances); KeyError for another id."""
    if skill_id not in IDS:
        raise KeyError(skill_id)
    directory = ROOT / skill_id
    paths = sorted(path for path in directory.rglob("*") if path.is_file() and "__pycache__" not in path.parts)
    digest = hashlib.sha256()
    files = []
    for path in paths:
        relative = path.relative_to(directory).as_posix()
        body = path.read_bytes()
        digest.update(relative.encode() + b"\0" + hashlib.sha256(body).digest())
        files.append({"path": relative, "size": len(body), "sha256": hashlib.sha256(body).hexdigest(), "builtin": True})
    manifest = parse_manifest(skill_id, (directory / SKILL_FILE).read_bytes())
    version_id = digest.hexdigest()[:16]
    skill = Skill(
        id=skill_id,
        display_name=DISPLAY_NAMES[skill_id],
        name=manifest.name,
        latest_version=version_id,
        created_at=SHIPPED,
        updated_at=SHIPPED,
    )
    version = SkillVersion(
        skill=skill,
        version=version_id,
        name=manifest.name,
        description=manifest.description,
        files=files,
        size_bytes=sum(entry["size"] for entry in files),
        ready=True,
        created_at=SHIPPED,
    )
    return skill, version


def builtin_skills() -> list[Skill]:
    return [builtin(skill_id)[0] for skill_id in IDS]


def builtin_file_stream(*, version: SkillVersion, entry: dict) -> Iterator[bytes]:
    """One file of a built-in skill's version, read from its directory."""
    path = ROOT / version.skill_id / entry["path"]
    with path.open("rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            yield chunk
