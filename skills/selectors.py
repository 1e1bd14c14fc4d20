"""Reads of skills and their versions, scoped to the caller's workspace (a foreign id is the
same 404 as a missing one). Only finished uploads are visible: a skill once its first version is
ready, a version once ready."""

from collections.abc import Iterator

from core.errors import NotFound
from core.lookups import one_or_not_found
from core.pagination import keyset_page
from files.models import OwnedObject
from files.selectors import owned_object_stream
from skills.builtin import IDS, builtin, builtin_file_stream, builtin_skills, is_builtin
from skills.models import Skill, SkillVersion

SOURCES = ("custom", "anthropic")


def skill_get(*, workspace, skill_id: str, for_update: bool = False) -> Skill:
    """A skill of the workspace, or a built-in one (skills.builtin: every workspace sees them)."""
    if is_builtin(skill_id):
        return builtin(skill_id)[0]
    return one_or_not_found(
        Skill.objects.filter(workspace=workspace, id=skill_id).exclude(latest_version=""),
        for_update=for_update,
        missing=NotFound(f"Skill {skill_id!r} not found."),
    )


def skill_list(*, workspace, limit: int, page: str | None, source: str | None):
    """Newest first. `source=anthropic` lists the built-in skills (one page: there are four);
    without `source`, the workspace's own (custom) skills."""
    if source == "anthropic":
        return builtin_skills()[:limit], None
    queryset = Skill.objects.filter(workspace=workspace).exclude(latest_version="")
    if source not in (None, "custom"):
        queryset = queryset.none()
    rows, next_page, _ = keyset_page(queryset, key="id", descending=True, limit=limit, page=page, purpose="skills")
    return rows, next_page


def skill_version_get(*, skill: Skill, version: str) -> SkillVersion:
    """A ready version of `skill` by id; `latest` is the newest."""
    if skill.workspace_id is None and is_builtin(skill.id):
        row = builtin(skill.id)[1]
        if version in ("latest", row.version):
            return row
        raise NotFound(f"Version {version!r} of skill {skill.id!r} not found.")
    wanted = skill.latest_version if version == "latest" else version
    row = SkillVersion.objects.filter(skill=skill, version=wanted, ready=True).first()
    if row is None:
        raise NotFound(f"Version {version!r} of skill {skill.id!r} not found.")
    return row


def skill_file_stream(*, version: SkillVersion, entry: dict) -> Iterator[bytes]:
    """One of the version's files (an entry of `version.files`), streamed from the object the
    version owns; a lost object is files' StoredObjectMissing (a 404, never a 500). A built-in
    skill's file comes from its directory."""
    if entry.get("builtin"):
        return builtin_file_stream(version=version, entry=entry)
    return owned_object_stream(
        owner_kind=OwnedObject.OwnerKind.SKILL_VERSION, owner_id=str(version.pk), object_key=entry["key"]
    )


def skill_version_list(*, skill: Skill, limit: int, page: str | None):
    if skill.workspace_id is None and is_builtin(skill.id):
        return [builtin(skill.id)[1]], None
    queryset = SkillVersion.objects.filter(skill=skill, ready=True)
    rows, next_page, _ = keyset_page(
        queryset, key="version", descending=True, limit=limit, page=page, purpose="skill_versions"
    )
    return rows, next_page


def skill_versions_resolve(*, workspace, refs: list[dict]) -> list[tuple[dict, SkillVersion]]:
    """Each skill reference ({type, skill_id, version?}) with the version it names (the latest
    when none, or `latest`); a missing skill or version is a 404 naming it. An `anthropic`
    reference names a built-in skill (skills.builtin), a `custom` one the workspace's."""
    resolved = []
    for ref in refs:
        if ref.get("type") == "anthropic" and not is_builtin(ref["skill_id"]):
            raise NotFound(
                f"Skill {ref['skill_id']!r} is not one of this server's Anthropic skills ({', '.join(IDS)})."
            )
        if ref.get("type") != "anthropic" and is_builtin(ref["skill_id"]):
            raise NotFound(f"Skill {ref['skill_id']!r} is an Anthropic skill: name it with type 'anthropic'.")
        skill = skill_get(workspace=workspace, skill_id=ref["skill_id"])
        resolved.append((ref, skill_version_get(skill=skill, version=ref.get("version") or "latest")))
    return resolved


def skill_versions_by_ref(*, workspace_id: str, refs: list[dict]) -> list[SkillVersion]:
    """The runner's read of a session's pinned skills ({type, skill_id, version}): the versions
    that still exist, in the agent's order. A built-in skill is placed as this server has it (a
    pin made before an upgrade changed its files gets the new files: there is no other copy)."""
    wanted = [(ref["skill_id"], ref["version"]) for ref in refs if ref.get("type") == "custom"]
    found = {}
    if wanted:
        rows = SkillVersion.objects.filter(
            skill__workspace_id=workspace_id, skill_id__in=[skill for skill, _ in wanted], ready=True
        ).select_related("skill")
        found = {(row.skill_id, row.version): row for row in rows}
    placed = []
    for ref in refs:
        if ref.get("type") == "anthropic" and is_builtin(ref["skill_id"]):
            placed.append(builtin(ref["skill_id"])[1])
        elif (row := found.get((ref["skill_id"], ref.get("version")))) is not None:
            placed.append(row)
    return placed
