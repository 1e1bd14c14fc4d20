"""Memory stores in a session's sandbox: placed at /mnt/memory/<name> when the sandbox is
created, written back at every idle boundary before session.status_idle (DESIGN "Memory
stores"), the way outputs are published.

Placement streams each attached store's memories from PostgreSQL into one tar archive per store.
`read_only`: files 0444 and directories owned by RESOURCE_OWNER_UID, so the sandbox user can
read and change nothing (writes fail with EACCES inside). `read_write`: owned by the sandbox
user. What was placed becomes the attachment's baseline ({path: [memory id, sha256]}).

Write-back (sessions/services/memory_writeback.py) reads read_write stores back at each idle
boundary; what it could not save is one session.error naming each path. Nothing is lost.
"""

import logging

from django.conf import settings

import sandboxes as sandbox
from memory.selectors import memory_store_contents, memory_store_for_session
from processors.memory import (
    MEMORY_ROOT,
    memory_relative_path,
    mount_slug,
    path_ancestors,
)
from processors.resources import tar_stream_for_files
from sessions import events as ev
from sessions.events import EventType
from sessions.models import Session, SessionMemoryStore
from sessions.selectors import session_memory_stores
from sessions.services.events import session_event_append
from sessions.services.memory_writeback import WritebackReport, memory_writeback

logger = logging.getLogger(__name__)

READ_ONLY_MODE = 0o444
READ_WRITE_MODE = 0o644


# --- placement -------------------------------------------------------------------------------


def session_memory_place(*, session: Session, ref: str) -> int:
    """Fill the (new) sandbox `ref` with every attached store and record each baseline.
    Returns how many stores were placed."""
    placed = 0
    for attachment in session_memory_stores(session=session):
        store = memory_store_for_session(workspace_id=session.workspace_id, memory_store_id=attachment.memory_store_id)
        baseline: dict[str, list[str]] = {}
        slug = mount_slug(attachment.name)
        rows = memory_store_contents(store=store) if store is not None else ()

        def files(rows=rows, baseline=baseline, slug=slug):
            # In path order a directory's name comes before the paths under it: a memory under
            # a path that is a memory too (`/x/y` beside `/x`, which the API refuses but older
            # rows may hold) is not placed, and so not in the baseline, never deleted by write-back.
            for memory_id, path, sha, content in rows:
                if any(above in baseline for above in path_ancestors(path)):
                    logger.warning(
                        "a memory under another memory's path was not placed",
                        extra={"session_id": session.id, "memory_id": memory_id},
                    )
                    continue
                data = content.encode("utf-8")
                baseline[path] = [memory_id, sha]
                yield f"{slug}/{memory_relative_path(path)}", len(data), (data,)

        read_only = attachment.access == SessionMemoryStore.Access.READ_ONLY
        owner = sandbox.RESOURCE_OWNER_UID if read_only else settings.MANGO_SANDBOX_UID
        stream = tar_stream_for_files(
            files(),
            root=MEMORY_ROOT,
            mode=READ_ONLY_MODE if read_only else READ_WRITE_MODE,
            uid=owner,
            gid=owner,
            directories=[slug],
        )
        sandbox.put_archive(session_id=session.id, directory=MEMORY_ROOT, chunks=stream)
        SessionMemoryStore.objects.filter(pk=attachment.pk).update(baseline=baseline, placed_ref=ref)
        placed += 1
    return placed


def memory_writeback_at_idle(*, session: Session) -> WritebackReport | None:
    """The runner's idle-boundary hook, before session.status_idle: write back, then report
    what was not saved as one session.error naming each path. Runs on interrupts too (it reads
    no object store and is bounded by the mount's size); a session without a running Docker
    sandbox has nothing to write back."""
    if session.sandbox_state != Session.SandboxState.RUNNING or not session.tool_host.docker_sandbox:
        return None
    try:
        report = memory_writeback(session=session)
    except Exception as exc:
        logger.exception("memory write-back failed", extra={"session_id": session.id})
        _session_error(
            session=session,
            message=f"Changes under {MEMORY_ROOT} could not be saved ({type(exc).__name__}); what was saved"
            " stays saved, and the rest is tried again at the next idle.",
        )
        return None
    if report.problems:
        count = report.problems.total
        _session_error(
            session=session,
            message=f"{count} change{'' if count == 1 else 's'} under {MEMORY_ROOT} {'was' if count == 1 else 'were'}"
            f" not saved to memory: {report.problems.listed()}. The files stay in the sandbox; read the"
            " store's current version and merge your change in a later turn.",
        )
    return report


def _session_error(*, session: Session, message: str) -> None:
    session_event_append(session_id=session.id, type=EventType.SESSION_ERROR, payload=ev.session_error(message=message))
