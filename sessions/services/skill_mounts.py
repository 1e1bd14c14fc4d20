"""A session's skills in its sandbox: the pinned versions' files, placed read-only under the
skills directory when the sandbox is made ready (sessions/runtime/sandbox_ready.py). A
multiagent session's one sandbox also holds its roster agents' skills (their threads run there)."""

import sandboxes as sandbox
from agents.multiagent import roster_entries
from processors.resources import SKILLS_DIR, tar_stream_for_files
from skills.models import SkillVersion
from skills.selectors import skill_file_stream, skill_versions_by_ref


def session_skills(*, session) -> list[tuple[SkillVersion, str]]:
    """The session's pinned skill versions that still exist, each with its path in the sandbox."""
    refs = session.agent_snapshot.get("skills") or []
    versions = skill_versions_by_ref(workspace_id=session.workspace_id, refs=refs)
    return [(version, f"{SKILLS_DIR}/{version.name}") for version in versions]


def sandbox_skills(*, session) -> list[SkillVersion]:
    """The skills the sandbox of `session` (a primary) holds: its agent's, then each roster
    agent's, once per name (an earlier one keeps its directory, as the SDK's
    download_session_skills does on a self-hosted worker)."""
    snapshot = session.agent_snapshot
    refs = list(snapshot.get("skills") or [])
    for _field, entry in roster_entries(snapshot.get("multiagent")):
        refs += [ref for ref in entry.get("skills") or [] if ref not in refs]
    placed: dict[str, SkillVersion] = {}
    for version in skill_versions_by_ref(workspace_id=session.workspace_id, refs=refs):
        placed.setdefault(version.name, version)
    return list(placed.values())


def session_skills_place(*, session) -> int:
    """Write the session's pinned skills into its (new) sandbox, read-only, at
    /mnt/skills/<name>/: every file mode 0444 and every directory owned by RESOURCE_OWNER_UID,
    so the sandbox user can read them and change nothing. Streamed from the store, one archive
    per skill. Returns how many skills were placed."""
    placed = 0
    for version in sandbox_skills(session=session):
        files = (
            (
                f"{version.name}/{entry['path']}",
                entry["size"],
                skill_file_stream(version=version, entry=entry),
            )
            for entry in version.files
        )
        owner = sandbox.RESOURCE_OWNER_UID
        stream = tar_stream_for_files(files, root=SKILLS_DIR, uid=owner, gid=owner)
        sandbox.put_archive(session_id=session.id, directory=SKILLS_DIR, chunks=stream)
        placed += 1
    return placed
