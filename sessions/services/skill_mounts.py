"""A session's skills in its sandbox: the pinned versions' files, placed read-only under the
skills directory when the sandbox is made ready (sessions/runtime/sandbox_ready.py)."""

import sandboxes as sandbox
from processors.resources import SKILLS_DIR, tar_stream_for_files
from skills.models import SkillVersion
from skills.selectors import skill_file_stream, skill_versions_by_ref


def session_skills(*, session) -> list[tuple[SkillVersion, str]]:
    """The session's pinned skill versions that still exist, each with its path in the sandbox."""
    refs = session.agent_snapshot.get("skills") or []
    versions = skill_versions_by_ref(workspace_id=session.workspace_id, refs=refs)
    return [(version, f"{SKILLS_DIR}/{version.name}") for version in versions]


def session_skills_place(*, session) -> int:
    """Write the session's pinned skills into its (new) sandbox, read-only, at
    /mnt/skills/<name>/: every file mode 0444 and every directory owned by RESOURCE_OWNER_UID,
    so the sandbox user can read them and change nothing. Streamed from the store, one archive
    per skill. Returns how many skills were placed."""
    placed = 0
    for version, _path in session_skills(session=session):
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
