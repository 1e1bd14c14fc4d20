"""Skills: versioned directory uploads (SKILL.md and its files) kept in the object store, one
object per file, metadata in PostgreSQL; placed read-only in sandboxes at /mnt/skills/<name>/.

An upload is checked whole before anything is stored (processors/skills.py: one top-level
directory, SKILL.md with valid frontmatter, safe paths, the limits). Then the version row commits
(not ready), each file is written as an object the version owns (files.services.owned_object_write:
intent-backed, so the orphan scan keeps it and a crash mid-write leaves nothing), and one
transaction makes it ready and the skill's latest. A failure deletes what was written; a crash
leaves a not-ready row that skills_unfinished_sweep finishes (nothing is left behind)."""

import io
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.errors import InvalidRequest, RequestTooLarge
from core.limits import workspace_rows_cap
from core.models import Workspace
from files.models import OwnedObject
from files.services import owned_object_write, owned_objects_delete
from processors.skills import SKILL_FILE, SkillRefused, check_paths, parse_manifest, zip_members
from skills.builtin import is_builtin
from skills.models import Skill, SkillVersion
from skills.selectors import skill_get, skill_version_get

logger = logging.getLogger(__name__)

OWNER = OwnedObject.OwnerKind.SKILL_VERSION
_READ_CHUNK_BYTES = 1024 * 1024


@dataclass
class UploadedFile:
    """One file of an upload: its path as sent (`<skill-dir>/...`), its bytes and size."""

    path: str
    body: BinaryIO
    size: int


class SkillTooLarge(RequestTooLarge):
    """A skill file, or the whole upload, over its limit (settings MANGO_SKILL_*_BYTES)."""


class SkillQuotaExceeded(InvalidRequest):
    """The workspace's skill versions would hold more than MANGO_WORKSPACE_SKILLS_MAX_BYTES."""

    code = "skill_quota_exceeded"


def _skill_quota_check_locked(*, workspace_id: str, adding: int) -> None:
    """With the workspace row locked (after the skill's, as every skill writer takes them): the
    bytes of all its skill versions (unfinished ones too) and `adding` within the quota, so two
    concurrent uploads cannot both pass the last free byte."""
    list(Workspace.objects.select_for_update().filter(pk=workspace_id).values_list("pk", flat=True))
    used = SkillVersion.objects.filter(skill__workspace_id=workspace_id).aggregate(total=Sum("size_bytes"))["total"]
    quota = settings.MANGO_WORKSPACE_SKILLS_MAX_BYTES
    if (used or 0) + adding > quota:
        raise SkillQuotaExceeded(
            f"The workspace's skills hold {used or 0} bytes; {adding} more would pass its quota of {quota} bytes"
            " (MANGO_WORKSPACE_SKILLS_MAX_BYTES). Nothing was stored. Delete skill versions to free space."
        )


def uploaded_archive_expand(files: list[UploadedFile]) -> list[UploadedFile]:
    """An upload of one `.zip` part is the skill's directory as a zip: its regular files (a
    symlink, device or FIFO member is a 400), held in memory within the skill limits."""
    if len(files) != 1 or not files[0].path.lower().endswith(".zip"):
        return files
    files[0].body.seek(0)
    try:
        members = zip_members(
            files[0].body,
            max_files=settings.MANGO_SKILL_MAX_FILES,
            max_file_bytes=settings.MANGO_SKILL_FILE_MAX_BYTES,
            max_bytes=settings.MANGO_SKILL_MAX_BYTES,
        )
    except SkillRefused as exc:
        raise InvalidRequest(str(exc)) from None
    return [UploadedFile(path=path, body=io.BytesIO(data), size=len(data)) for path, data in members]


def _check_upload(files: list[UploadedFile]) -> tuple[str, str, str]:
    """(top directory, name, description) of an acceptable upload, or a 400 naming the problem."""
    if len(files) > settings.MANGO_SKILL_MAX_FILES:
        raise InvalidRequest(f"files: at most {settings.MANGO_SKILL_MAX_FILES} files in a skill.")
    total = 0
    for item in files:
        if item.size > settings.MANGO_SKILL_FILE_MAX_BYTES:
            limit = settings.MANGO_SKILL_FILE_MAX_BYTES
            raise SkillTooLarge(f"files: {item.path[:200]!r} is over {limit} bytes (a skill file's limit).")
        total += item.size
    if total > settings.MANGO_SKILL_MAX_BYTES:
        raise SkillTooLarge(f"files: {total} bytes in all; a skill holds at most {settings.MANGO_SKILL_MAX_BYTES}.")
    try:
        top = check_paths([item.path for item in files])
        skill_md = next(item for item in files if item.path == f"{top}/{SKILL_FILE}")
        skill_md.body.seek(0)
        manifest = parse_manifest(top, skill_md.body.read())
    except SkillRefused as exc:
        raise InvalidRequest(str(exc)) from None
    return top, manifest.name, manifest.description


def _next_version(previous: str | None) -> str:
    """Microseconds since the epoch, strictly after `previous` (versions sort as they were made)."""
    now = time.time_ns() // 1000
    return str(max(now, int(previous) + 1) if previous else now)


def _refuse_builtin(skill_id: str) -> None:
    if is_builtin(skill_id):
        raise InvalidRequest(f"{skill_id!r} is a built-in skill of this server: it cannot be changed or deleted.")


def skill_create(*, workspace, files: list[UploadedFile], display_name: str | None) -> Skill:
    """A new skill with its first version; `display_name` defaults to the frontmatter name."""
    top, name, description = _check_upload(files)
    now = timezone.now()
    with transaction.atomic():
        workspace_rows_cap(
            workspace=workspace, rows=Skill.objects.filter(workspace=workspace),
            limit=settings.MANGO_WORKSPACE_MAX_SKILLS, what="skills", setting="MANGO_WORKSPACE_MAX_SKILLS",
        )  # fmt: skip
        skill = Skill.objects.create(
            workspace=workspace, display_name=display_name or name, name=name, created_at=now, updated_at=now
        )
        version = _version_begin(skill=skill, files=files, top=top, name=name, description=description)
    _version_store(workspace=workspace, version=version, files=files, drop_skill=True)
    skill.refresh_from_db()
    return skill


def skill_version_create(*, workspace, skill_id: str, files: list[UploadedFile]) -> SkillVersion:
    """A new version of a skill; its frontmatter must name the skill as before."""
    _refuse_builtin(skill_id)
    top, name, description = _check_upload(files)
    with transaction.atomic():
        skill = skill_get(workspace=workspace, skill_id=skill_id, for_update=True)
        if name != skill.name:
            raise InvalidRequest(f"{top}/{SKILL_FILE}: frontmatter name {name!r} must stay {skill.name!r}.")
        if skill.versions.count() >= settings.MANGO_SKILL_MAX_VERSIONS:
            raise InvalidRequest(f"A skill holds at most {settings.MANGO_SKILL_MAX_VERSIONS} versions.")
        version = _version_begin(skill=skill, files=files, top=top, name=name, description=description)
    return _version_store(workspace=workspace, version=version, files=files, drop_skill=False)


def _version_begin(*, skill: Skill, files: list[UploadedFile], top: str, name: str, description: str) -> SkillVersion:
    """Inside the caller's transaction (skill row locked or new): the not-ready row, before any
    object exists (the objects it will own are found by its id)."""
    _skill_quota_check_locked(workspace_id=skill.workspace_id, adding=sum(item.size for item in files))
    previous = skill.versions.order_by("-version").values_list("version", flat=True).first()
    planned = [{"path": item.path[len(top) + 1 :], "size": item.size} for item in files]
    return SkillVersion.objects.create(
        skill=skill,
        version=_next_version(previous),
        name=name,
        description=description,
        files=planned,
        size_bytes=sum(item.size for item in files),
        created_at=timezone.now(),
    )


def _version_store(*, workspace, version: SkillVersion, files: list[UploadedFile], drop_skill: bool) -> SkillVersion:
    """Write the version's objects, then make it ready and its skill's latest in one commit."""
    try:
        for entry, item in zip(version.files, files, strict=True):
            item.body.seek(0)
            owned = owned_object_write(
                workspace=workspace,
                owner_kind=OWNER,
                owner_id=str(version.pk),
                chunks=iter(lambda body=item.body: body.read(_READ_CHUNK_BYTES), b""),
                max_bytes=settings.MANGO_SKILL_FILE_MAX_BYTES,
            )
            entry["key"], entry["sha256"] = owned.object_key, owned.sha256
            if owned.size_bytes != item.size:
                raise InvalidRequest(f"files: {item.path[:200]!r} changed size while it was read.")
        with transaction.atomic():
            skill = Skill.objects.select_for_update().get(pk=version.skill_id)
            version.ready = True
            version.save(update_fields=["files", "ready"])
            skill.latest_version = version.version
            skill.updated_at = timezone.now()
            skill.save(update_fields=["latest_version", "updated_at"])
    except BaseException:
        _version_discard(version=version, drop_skill=drop_skill)
        raise
    return version


def _version_discard(*, version: SkillVersion, drop_skill: bool) -> None:
    """Delete a version's objects (those written) and its row; with drop_skill, a skill left
    without a version too. Best effort: what fails here the sweep finishes."""
    try:
        with transaction.atomic():
            owned_objects_delete(owner_kind=OWNER, owner_ids=[str(version.pk)])
            SkillVersion.objects.filter(pk=version.pk).delete()
            if drop_skill:
                Skill.objects.filter(pk=version.skill_id, latest_version="").delete()
    except Exception:
        logger.exception(
            "could not discard a skill upload; the sweep finishes it", extra={"skill_id": version.skill_id}
        )


def skill_version_delete(*, workspace, skill_id: str, version: str) -> str:
    """Delete one version (its objects after the commit). A skill keeps at least one version:
    deleting the last one is refused (delete the skill). Returns the deleted version's id."""
    _refuse_builtin(skill_id)
    with transaction.atomic():
        skill = skill_get(workspace=workspace, skill_id=skill_id, for_update=True)
        row = skill_version_get(skill=skill, version=version)
        remaining = skill.versions.filter(ready=True).exclude(pk=row.pk).order_by("-version").first()
        if remaining is None:
            raise InvalidRequest(f"Version {row.version} is the skill's only version; delete the skill instead.")
        owned_objects_delete(owner_kind=OWNER, owner_ids=[str(row.pk)])
        row.delete()
        skill.latest_version = remaining.version
        skill.updated_at = timezone.now()
        skill.save(update_fields=["latest_version", "updated_at"])
    return row.version


def skill_delete(*, workspace, skill_id: str) -> None:
    """Delete the skill and every version (objects after the commit). Sessions already started
    keep nothing of it: their sandboxes hold their own copy of the files."""
    _refuse_builtin(skill_id)
    with transaction.atomic():
        skill = skill_get(workspace=workspace, skill_id=skill_id, for_update=True)
        versions = [str(pk) for pk in skill.versions.values_list("pk", flat=True)]
        owned_objects_delete(owner_kind=OWNER, owner_ids=versions)
        skill.delete()


def skills_unfinished_sweep(*, older_than_seconds: float) -> int:
    """Finish uploads a crash interrupted: not-ready versions older than `older_than_seconds`
    lose their objects and rows, and skills left without any version go. Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    stale = list(SkillVersion.objects.filter(ready=False, created_at__lt=cutoff)[:500])
    for version in stale:
        _version_discard(version=version, drop_skill=True)
    return len(stale)
