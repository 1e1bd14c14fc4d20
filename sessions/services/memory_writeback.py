"""Memory write-back: a session's read_write memory stores, read back from its sandbox at an idle
boundary (sessions/services/memory_mounts.py places them and calls this).

Write-back reads the store's directory once as a tar stream from dockerd and compares each
regular file with the baseline: an unchanged file makes no version; a new path is a create, a
changed one an update guarded by the baseline's sha256 (the content_sha256 precondition), a
path gone from the tree a delete guarded the same way, each with a `session_actor`. Files commit
in batches (MANGO_MEMORY_WRITEBACK_BATCH_FILES, at most BATCH_MAX_BYTES of content): a file's
version, its memory and its baseline entry always commit together, so a kill loses no committed
memory and shows no half-written version, and the resumed write-back finds the baseline moved on
exactly as far as the commits went. Each file is atomic; a batch costs a few statements and one
commit whatever its size (500 files: bench/memory_writeback.py).

A precondition that fails (another session or an API call changed the memory since this sandbox
was filled) is a conflict: nothing is written for that path, the sandbox keeps the file, and one
session.error names every such path. Nothing is lost.
"""

import hashlib
import json
import logging
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

import sandboxes as sandbox
from core.crashpoints import crash_point
from core.streams import buffered_reader
from memory.models import Memory, MemoryStore, MemoryVersion
from memory.services import (
    MEMORY_CONTENT_FIELDS,
    MemoryQuotaExceeded,
    memory_bytes_used_locked,
    memory_content_set,
    memory_paths_clashing,
    memory_quota_check,
    memory_store_bytes_add,
    memory_version_row,
    session_actor,
    version_cost,
)
from processors.memory import (
    CONTENT_MAX_BYTES,
    Change,
    classify_memory_member,
    path_clash,
)
from sessions import events as ev
from sessions.models import Session, SessionMemoryStore
from sessions.selectors import session_memory_stores

logger = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024


@dataclass
class WritebackReport:
    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    # One reason per path that was not written back (conflicts, refusals), naming the path.
    problems: ev.BoundedNames = field(default_factory=ev.BoundedNames)


class _Conflict(Exception):
    pass


# Write-back commits in batches: each file in a savepoint of its own (a conflict or refusal
# leaves the others), the batch's baseline entries in the same commit. A batch is applied only
# after its files were read from the archive: no Docker read happens inside a transaction.
BATCH_MAX_BYTES = 8 * 1024 * 1024

_BASELINE_APPLY = (
    f"UPDATE {SessionMemoryStore._meta.db_table} SET baseline = (baseline - %s::text[]) || %s::jsonb WHERE id = %s"
)


@dataclass
class _Batch:
    steps: list[tuple[Change, str | None]] = field(default_factory=list)
    size: int = 0


def _shown(path: str, attachment: SessionMemoryStore) -> str:
    return f"{attachment.mount_path}{path}"[:300].encode("unicode_escape").decode("ascii")


def memory_writeback_apply(
    *, attachment: SessionMemoryStore, steps: list[tuple[Change, str | None]], session_id: str, report: WritebackReport
) -> None:
    """One batch of write-back steps in one transaction, under the store's row lock (every
    writer of a store takes it): each file's precondition (the baseline's sha256) is checked
    against the locked rows, then the versions, memories and baseline entries of the files that
    pass are written together (a few statements per batch, whatever its size) and committed. A
    kill before the commit loses the batch whole, and the resumed write-back redoes it from the
    unchanged baseline; after it, nothing is redone. Conflicts and refusals are named in
    `report.problems` and leave the rest of the batch."""
    actor = session_actor(session_id)
    with transaction.atomic():
        store = MemoryStore.objects.select_for_update().filter(pk=attachment.memory_store_id).first()
        refusal = None if store is not None else "the memory store was deleted"
        if store is not None and store.archived_at is not None:
            refusal = "the memory store is archived"
        if refusal is not None:
            report.problems.extend(f"{_shown(change.path, attachment)}: {refusal}" for change, _ in steps)
            return
        plan = _Plan(store=store, actor=actor, now=timezone.now())
        plan.load(steps)
        for change, content in steps:
            try:
                plan.add(change, content)
            except _Conflict as exc:
                report.problems.append(f"{_shown(change.path, attachment)}: {exc}")
        plan.write(attachment_id=attachment.pk)
        crash_point("memory_writeback_before_commit")
    crash_point("memory_writeback_after_commit")
    listed = {"created": report.created, "modified": report.modified, "deleted": report.deleted}
    for outcome, path in plan.done:
        if outcome in listed:
            listed[outcome].append(_shown(path, attachment))


class _Plan:
    """One batch's writes, decided against the rows locked for it, then written in bulk."""

    def __init__(self, *, store: MemoryStore, actor: dict, now):
        self.store, self.actor, self.now = store, actor, now
        self.limit = settings.MANGO_MEMORY_STORE_MAX_MEMORIES
        self.versions: list = []
        self.created: list[Memory] = []
        self.modified: list[Memory] = []
        self.deleted: list[str] = []
        self.entries: dict[str, list[str]] = {}
        self.drops: list[str] = []
        self.stored = 0
        self.done: list[tuple[str, str]] = []

    def load(self, steps: list[tuple[Change, str | None]]) -> None:
        """The memories the batch touches, locked: by path for creates, by id for the rest."""
        paths = [change.path for change, _ in steps if change.operation == "created"]
        ids = [change.memory_id for change, _ in steps if change.operation != "created"]
        self.by_path = {m.path: m for m in Memory.objects.filter(store=self.store, path__in=paths)}
        self.by_id = {m.id: m for m in Memory.objects.select_for_update().filter(store=self.store, id__in=ids)}
        self.clashing = memory_paths_clashing(store=self.store, paths=paths)
        self.count = Memory.objects.filter(store=self.store).count()
        self.used = memory_bytes_used_locked(workspace_id=self.store.workspace_id)

    def _version(self, memory_id: str, operation: str, path: str, content: str | None):
        """The version planned and counted (every version counts toward the workspace's memory
        quota; one past it is a _Conflict, but a delete is never refused)."""
        version = memory_version_row(
            store=self.store,
            memory_id=memory_id,
            operation=operation,
            path=path,
            content=content,
            actor=self.actor,
            now=self.now,
        )
        cost = version_cost(version)
        if operation != "deleted":
            try:
                memory_quota_check(used=self.used, adding=cost)
            except MemoryQuotaExceeded as exc:
                raise _Conflict(exc.message) from None
        self.used += cost
        self.stored += cost
        self.versions.append(version)
        return version

    def _keep(self, outcome: str, change: Change, memory: Memory | None) -> None:
        if memory is None:
            self.drops.append(change.path)
            self.entries.pop(change.path, None)
        else:
            self.entries[change.path] = [memory.id, memory.content_sha256]
        self.done.append((outcome, change.path))

    def add(self, change: Change, content: str | None) -> None:
        """Plan one file's step, or raise _Conflict with the reason nothing is written for it."""
        if change.operation == "created":
            existing = self.by_path.get(change.path)
            if existing is not None:
                if existing.content_sha256 != change.content_sha256:
                    raise _Conflict("another writer created this path meanwhile; the store keeps its version")
                return self._keep("adopted", change, existing)
            clash = path_clash(change.path, self.clashing)
            if clash is not None:
                raise _Conflict(f"the store holds {clash[:200]!r}; a path cannot be both a file and a directory")
            if self.count >= self.limit:
                raise _Conflict(f"the memory store holds its limit of {self.limit} memories")
            memory = Memory(store=self.store, created_at=self.now)
            memory_content_set(memory, self._version(memory.id, "created", change.path, content), now=self.now)
            self.created.append(memory)
            self.by_path[change.path] = memory
            self.count += 1
            return self._keep("created", change, memory)
        memory = self.by_id.get(change.memory_id)
        if change.operation == "deleted":
            if memory is None:
                return self._keep("gone", change, None)
            if memory.content_sha256 != change.expected_sha256:
                raise _Conflict("changed in the store since this session read it; it was not deleted")
            self._version(memory.id, "deleted", memory.path, None)
            self.deleted.append(memory.id)
            self.count -= 1
            return self._keep("deleted", change, None)
        if memory is None:
            raise _Conflict("deleted from the store since this session read it; your edit was not saved")
        if memory.content_sha256 != change.expected_sha256:
            if memory.content_sha256 == change.content_sha256:
                return self._keep("adopted", change, memory)
            raise _Conflict("changed in the store since this session read it (content_sha256 precondition)")
        memory_content_set(memory, self._version(memory.id, "modified", memory.path, content), now=self.now)
        self.modified.append(memory)
        return self._keep("modified", change, memory)

    def write(self, *, attachment_id: int) -> None:
        MemoryVersion.objects.bulk_create(self.versions)
        memory_store_bytes_add(store=self.store, adding=self.stored)
        Memory.objects.bulk_create(self.created)
        if self.modified:
            Memory.objects.bulk_update(self.modified, fields=MEMORY_CONTENT_FIELDS)
        if self.deleted:
            Memory.objects.filter(store=self.store, id__in=self.deleted).delete()
        with connection.cursor() as cursor:
            cursor.execute(_BASELINE_APPLY, [self.drops, json.dumps(self.entries), attachment_id])


def _open_archive(chunks: Iterable[bytes]) -> tarfile.TarFile:
    return tarfile.open(fileobj=buffered_reader(chunks, READ_CHUNK), mode="r|")


def _store_writeback(*, session: Session, attachment: SessionMemoryStore, report: WritebackReport) -> None:
    baseline = {path: tuple(entry) for path, entry in (attachment.baseline or {}).items()}
    present: set[str] = set()
    slug = attachment.mount_path.rsplit("/", 1)[-1]
    batch = _Batch()
    limit = settings.MANGO_MEMORY_WRITEBACK_BATCH_FILES

    def flush() -> None:
        if batch.steps:
            memory_writeback_apply(attachment=attachment, steps=batch.steps, session_id=session.id, report=report)
        batch.steps, batch.size = [], 0

    def step(change: Change, content: str | None) -> None:
        batch.steps.append((change, content))
        batch.size += len(content or "")
        if len(batch.steps) >= limit or batch.size >= BATCH_MAX_BYTES:
            flush()

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
    flush()


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
            report.problems.total,
            extra={"session_id": session.id},
        )
    return report
