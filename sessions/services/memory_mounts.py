"""Memory stores in a session's sandbox: placed at /mnt/memory/<name> when the sandbox is
created, written back at every idle boundary before session.status_idle (DESIGN "Memory
stores"), the way outputs are published.

Placement streams each attached store's memories from PostgreSQL into one tar archive per store.
`read_only`: files 0444 and directories owned by RESOURCE_OWNER_UID, so the sandbox user can
read and change nothing (writes fail with EACCES inside). `read_write`: owned by the sandbox
user. What was placed becomes the attachment's baseline ({path: [memory id, sha256]}).

Write-back reads the store's directory once as a tar stream from dockerd and compares each
regular file with the baseline: an unchanged file makes no version; a new path is a create, a
changed one an update guarded by the baseline's sha256 (the content_sha256 precondition), a
path gone from the tree a delete guarded the same way, each with a `session_actor`. Each file is
one transaction: the version, the memory and the baseline's entry commit together, so a crash
loses no committed memory and shows no half-written version, and a retry after it finds the
baseline already moved on. A precondition that fails (another session or an API call changed
the memory since this sandbox was filled) is a conflict: nothing is written for that path, the
sandbox keeps the file, and one session.error names every such path. Nothing is lost.
"""

import hashlib
import logging
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction

from core.crashpoints import crash_point
from core.errors import ApiError
from core.streams import buffered_reader
from processors.memory import (
    CONTENT_MAX_BYTES,
    MEMORY_ROOT,
    Change,
    classify_memory_member,
    memory_relative_path,
    mount_slug,
)
from processors.resources import tar_stream_for_files
from sessions import events as ev
from sessions import sandbox
from sessions.events import EventType
from sessions.models import Memory, MemoryStore, Session, SessionMemoryStore
from sessions.selectors.memory import memory_store_contents, memory_store_for_session, session_memory_stores
from sessions.services.events import session_event_append
from sessions.services.memory import (
    MemoryPathConflict,
    memory_create_locked,
    memory_delete_locked,
    memory_update_locked,
    session_actor,
)

logger = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
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
            for memory_id, path, sha, content in rows:
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


# --- write-back ------------------------------------------------------------------------------


@dataclass
class WritebackReport:
    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    # One reason per path that was not written back (conflicts, refusals), naming the path.
    problems: list[str] = field(default_factory=list)


class _Conflict(Exception):
    pass


_BASELINE_SET = (
    f"UPDATE {SessionMemoryStore._meta.db_table} SET baseline = baseline || jsonb_build_object(%s::text, %s::jsonb)"
    " WHERE id = %s"
)
_BASELINE_DROP = f"UPDATE {SessionMemoryStore._meta.db_table} SET baseline = baseline - %s::text WHERE id = %s"


def _baseline_set(attachment_id: int, path: str, memory_id: str, sha: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_BASELINE_SET, [path, f'["{memory_id}", "{sha}"]', attachment_id])


def _baseline_drop(attachment_id: int, path: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_BASELINE_DROP, [path, attachment_id])


def _shown(path: str, attachment: SessionMemoryStore) -> str:
    return f"{attachment.mount_path}{path}"[:300].encode("unicode_escape").decode("ascii")


def memory_writeback_apply(
    *, attachment: SessionMemoryStore, store_id: str, change: Change, content: str | None, session_id: str
) -> str:
    """One write-back step in one transaction: the store row locked, the precondition (the
    baseline's sha256) checked, the version and memory written, the baseline entry moved.
    Returns what happened ("created", "modified", "deleted", "adopted": the store already holds
    these bytes, "gone": a deleted memory already absent). Raises _Conflict with the reason."""
    actor = session_actor(session_id)
    with transaction.atomic():
        outcome = _apply_locked(attachment=attachment, store_id=store_id, change=change, content=content, actor=actor)
        crash_point("memory_writeback_before_commit")
    crash_point("memory_writeback_after_commit")
    return outcome


def _apply_locked(*, attachment: SessionMemoryStore, store_id: str, change: Change, content: str | None, actor: dict):
    """memory_writeback_apply's body, inside its transaction."""
    store = MemoryStore.objects.select_for_update().filter(pk=store_id).first()
    if store is None:
        raise _Conflict("the memory store was deleted")
    if store.archived_at is not None:
        raise _Conflict("the memory store is archived")
    if change.operation == "created":
        existing = Memory.objects.filter(store=store, path=change.path).first()
        if existing is not None:
            if existing.content_sha256 != change.content_sha256:
                raise _Conflict("another writer created this path meanwhile; the store keeps its version")
            _baseline_set(attachment.pk, change.path, existing.id, existing.content_sha256)
            return "adopted"
        try:
            memory = memory_create_locked(store=store, path=change.path, content=content, actor=actor)
        except MemoryPathConflict:
            raise _Conflict("another writer holds this path") from None
        _baseline_set(attachment.pk, change.path, memory.id, memory.content_sha256)
        return "created"
    memory = Memory.objects.select_for_update().filter(store=store, id=change.memory_id).first()
    if change.operation == "deleted":
        if memory is None:
            _baseline_drop(attachment.pk, change.path)
            return "gone"
        if memory.content_sha256 != change.expected_sha256:
            raise _Conflict("changed in the store since this session read it; it was not deleted")
        memory_delete_locked(store=store, memory=memory, expected=change.expected_sha256, actor=actor)
        _baseline_drop(attachment.pk, change.path)
        return "deleted"
    if memory is None:
        raise _Conflict("deleted from the store since this session read it; your edit was not saved")
    if memory.content_sha256 != change.expected_sha256:
        if memory.content_sha256 == change.content_sha256:
            _baseline_set(attachment.pk, change.path, memory.id, memory.content_sha256)
            return "adopted"
        raise _Conflict("changed in the store since this session read it (content_sha256 precondition)")
    memory_update_locked(
        store=store, memory=memory, path=None, content=content, expected=change.expected_sha256, actor=actor
    )
    _baseline_set(attachment.pk, change.path, memory.id, memory.content_sha256)
    return "modified"


def _open_archive(chunks: Iterable[bytes]) -> tarfile.TarFile:
    return tarfile.open(fileobj=buffered_reader(chunks, READ_CHUNK), mode="r|")


def _store_writeback(*, session: Session, attachment: SessionMemoryStore, report: WritebackReport) -> None:
    baseline = {path: tuple(entry) for path, entry in (attachment.baseline or {}).items()}
    present: set[str] = set()
    slug = attachment.mount_path.rsplit("/", 1)[-1]

    def step(change: Change, content: str | None) -> None:
        try:
            outcome = memory_writeback_apply(
                attachment=attachment,
                store_id=attachment.memory_store_id,
                change=change,
                content=content,
                session_id=session.id,
            )
        except _Conflict as exc:
            report.problems.append(f"{_shown(change.path, attachment)}: {exc}")
            return
        except ApiError as exc:  # a limit or a refusal of the services (memories per store): named
            report.problems.append(f"{_shown(change.path, attachment)}: {exc.message}")
            return
        listed = {"created": report.created, "modified": report.modified, "deleted": report.deleted}.get(outcome)
        if listed is not None:
            listed.append(_shown(change.path, attachment))

    try:
        chunks, _ = sandbox.get_archive(session_id=session.id, path=attachment.mount_path)
    except sandbox.SandboxError:
        chunks = None  # the directory itself was removed: every memory in it was deleted
    if chunks is not None:
        with _open_archive(chunks) as archive:
            for member in archive:
                kind, value = classify_memory_member(member, root=slug)
                if kind == "dir":
                    continue
                if kind == "invalid":
                    report.problems.append(value)
                    # A file kept but refused is not a deletion of the memory at that path.
                    if member.name.startswith(slug + "/"):
                        present.add(member.name[len(slug) :])
                    continue
                path = value
                present.add(path)
                data = archive.extractfile(member).read(CONTENT_MAX_BYTES + 1)
                sha = hashlib.sha256(data).hexdigest()
                known = baseline.get(path)
                if known is not None and known[1] == sha:
                    report.unchanged += 1
                    continue
                try:
                    content = data.decode("utf-8")
                except UnicodeDecodeError:
                    report.problems.append(f"{_shown(path, attachment)}: not UTF-8 text; memories are text")
                    continue
                if known is None:
                    step(Change("created", path, None, None, sha), content)
                else:
                    step(Change("modified", path, known[0], known[1], sha), content)
    for path in sorted(set(baseline) - present):
        memory_id, sha = baseline[path]
        step(Change("deleted", path, memory_id, sha, None), None)


def memory_writeback(*, session: Session) -> WritebackReport:
    """Write back every read_write store placed in the session's current sandbox."""
    report = WritebackReport()
    for attachment in session_memory_stores(session=session):
        if attachment.access != SessionMemoryStore.Access.READ_WRITE or attachment.placed_ref != session.sandbox_ref:
            continue
        _store_writeback(session=session, attachment=attachment, report=report)
    if report.created or report.modified or report.deleted or report.problems:
        logger.info(
            "memory written back: %d created, %d modified, %d deleted, %d unchanged, %d not saved",
            len(report.created),
            len(report.modified),
            len(report.deleted),
            report.unchanged,
            len(report.problems),
            extra={"session_id": session.id},
        )
    return report


def memory_writeback_at_idle(*, session: Session) -> WritebackReport | None:
    """The runner's idle-boundary hook, before session.status_idle: write back, then report
    what was not saved as one session.error naming each path. Runs on interrupts too (it reads
    no object store and is bounded by the mount's size); a session without a running Docker
    sandbox has nothing to write back."""
    if session.sandbox_state != Session.SandboxState.RUNNING or settings.MANGO_SANDBOX != "docker":
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
        count = len(report.problems)
        _session_error(
            session=session,
            message=f"{count} change{'' if count == 1 else 's'} under {MEMORY_ROOT} {'was' if count == 1 else 'were'}"
            f" not saved to memory: {'; '.join(report.problems)}. The files stay in the sandbox; read the"
            " store's current version and merge your change in a later turn.",
        )
    return report


def _session_error(*, session: Session, message: str) -> None:
    session_event_append(session_id=session.id, type=EventType.SESSION_ERROR, payload=ev.session_error(message=message))
