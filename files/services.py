"""Writes for Files. Each service states its invariant; object-store calls never run inside a
database transaction, and every one of them is preceded by a committed StorageIntent so that a
crash at any point leaves something reconciliation can finish (files/reconcile.py)."""

import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.database import connection_live
from core.errors import NotFound, RequestTooLarge, ServiceUnavailable
from core.models import Workspace
from files import liveness, storage
from files.models import File, StorageIntent, file_id_time, new_file_id
from files.quotas import quota_enforce
from processors.filenames import filename_strip
from processors.outputs import plan_outputs

logger = logging.getLogger(__name__)

# Object-store part size and parallelism for streamed uploads (measured with
# bench/files_throughput.py). Memory per upload is bounded by (PARTS_IN_FLIGHT + 1) * PART_SIZE,
# and that of all uploads in a process together by UPLOAD_BUFFERS * PART_SIZE (_PartBuffers).
PART_SIZE = 5 * 1024 * 1024  # S3's smallest part but the last
PARTS_IN_FLIGHT = 4
UPLOAD_BUFFERS = 10
UPLOAD_BUFFER_WAIT_SECONDS = 5.0
# Workers (session outputs) are not web processes serving many uploads at once: more in flight.
WORKER_PARTS_IN_FLIGHT = 4
# A live upload refreshes its intent this often, so reconciliation's grace window is measured
# from the last sign of life, not from the start of a long upload.
HEARTBEAT_SECONDS = 30
# ObjectStager (many small objects, e.g. session outputs): PUTs in flight, and how many upload
# intents are committed per batch.
STAGER_CONCURRENCY = 8
STAGER_INTENT_BATCH = 64


class UploadReclaimed(ServiceUnavailable):
    message = "The upload took too long and was cleaned up; nothing was stored. Retry."
    code = "upload_reclaimed"


def _intent_close(intent_id: int, *, state: str, file_id: str | None = None) -> None:
    updates = {"state": state, "closed_at": timezone.now(), "updated_at": timezone.now()}
    if file_id:
        updates["file_id"] = file_id
    StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(**updates)


def _intent_error(intent_id: int, exc: BaseException) -> None:
    """Best effort (the error being recorded may be the database's own)."""
    try:
        StorageIntent.objects.filter(pk=intent_id).update(last_error=f"{type(exc).__name__}: {exc}"[:2000])
    except DatabaseError:
        pass


def _intent_disown(intent_id: int, exc: BaseException) -> None:
    """This process gives up on an open intent (the store was unreachable while finishing it):
    record why and hand it to liveness.GIVEN_UP, an owner no process holds, so reconciliation
    finishes it as soon as the store answers again (files.reconcile_given_up), without a grace."""
    try:
        StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(
            owner=liveness.GIVEN_UP, last_error=f"{type(exc).__name__}: {exc}"[:2000]
        )
    except DatabaseError:
        liveness.give_up_later(intent_id)


def _intent_heartbeat(intent_id: int, **fields) -> None:
    """Refresh a live upload's intent; fail if reconciliation has claimed it meanwhile."""
    connection_live()
    updated = StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN, attempts=0).update(
        updated_at=timezone.now(), **fields
    )
    if not updated:
        raise UploadReclaimed()


def _upload_discard(*, intent_id: int, key: str, upload_id: str | None) -> None:
    """Best effort: remove what a failed upload left in the store and close its intent. If the
    store is unreachable the intent stays open and reconciliation finishes the job."""
    try:
        if upload_id:
            storage.multipart_abort(key=key, upload_id=upload_id)
        storage.delete_object(key=key)
    except Exception as exc:  # noqa: BLE001 — cleanup must not mask the original error
        logger.warning("upload cleanup deferred to reconciliation", extra={"object_key": key})
        _intent_disown(intent_id, exc)
        return
    crash_point("upload_discard_before_close")
    try:
        _intent_close(intent_id, state=StorageIntent.State.ROLLED_BACK)
    except DatabaseError:
        liveness.give_up_later(intent_id)  # nothing left in the store: reconciliation closes it


def _create_visible_file(*, intent_id: int, workspace: Workspace, **fields) -> File:
    """In one transaction: create the ready File and close its upload intent. Refuses when
    reconciliation has claimed the intent (it is deleting the object)."""
    crash_point("upload_before_commit")
    connection_live()  # the body may have streamed through a database restart
    with transaction.atomic():
        intent = StorageIntent.objects.select_for_update().get(pk=intent_id)
        if intent.state != StorageIntent.State.OPEN or intent.attempts:
            raise UploadReclaimed()
        file_id = new_file_id()
        file = File.objects.create(
            id=file_id,
            workspace=workspace,
            created_at=file_id_time(file_id),
            object_key=intent.object_key,
            state=File.State.READY,
            **fields,
        )
        intent.state = StorageIntent.State.COMMITTED
        intent.file_id = file_id
        intent.closed_at = timezone.now()
        intent.save(update_fields=["state", "file_id", "closed_at", "updated_at"])
        quota_enforce(workspace_id=workspace.id)
    crash_point("upload_after_commit")
    return file


class _PartBuffers:
    """Part buffers shared by every upload of the process. They are allocated once and reused:
    a fresh buffer per part costs a page fault per 4 KiB on top of the copy. At most `limit`
    exist at a time, which bounds the memory of all concurrent uploads together (an upload
    keeps the ones it took until it ends; see _PartUploader.buffer). An upload that waits
    longer than `wait_seconds` for its first buffer gets one of its own instead (the bound is
    then per upload, as without the pool), so slow clients cannot stall everyone else."""

    def __init__(self, *, size: int, limit: int, wait_seconds: float):
        self.size = size
        self.wait_seconds = wait_seconds
        self._free: list[bytearray] = []
        self._slots = threading.Semaphore(limit)
        self._lock = threading.Lock()

    def take(self, *, wait: bool) -> bytearray | None:
        """A buffer; without `wait`, None when none is free right now."""
        if not self._slots.acquire(blocking=wait, timeout=self.wait_seconds if wait else None):
            return _OwnBuffer(self.size) if wait else None
        with self._lock:
            if self._free:
                return self._free.pop()
        return bytearray(self.size)

    def give(self, buffer: bytearray) -> None:
        if type(buffer) is _OwnBuffer:
            return
        if len(buffer) == self.size:  # else cut to a last part's size: let it go
            with self._lock:
                self._free.append(buffer)
        self._slots.release()


class _OwnBuffer(bytearray):
    """A part buffer allocated outside the shared pool (freed when dropped)."""


_part_buffers = _PartBuffers(size=PART_SIZE, limit=UPLOAD_BUFFERS, wait_seconds=UPLOAD_BUFFER_WAIT_SECONDS)

# The threads that send parts to the store, shared by every upload of the process (each upload
# keeps at most its parts_in_flight there): a pool per upload started its threads anew for
# every upload, and each start waits for the new thread to be scheduled, which on a busy
# machine held the upload up for tens of milliseconds (bench/files_throughput.py, py-spy).
# Threads are started on demand and stay. A forked child (a prefork Celery worker, the crash
# campaign) gets a pool of its own: it inherits the parent's pool object but not its threads.
PART_THREADS = 64
_part_threads: ThreadPoolExecutor


def _new_part_threads() -> None:
    global _part_threads
    _part_threads = ThreadPoolExecutor(max_workers=PART_THREADS, thread_name_prefix="file-part")


_new_part_threads()
os.register_at_fork(after_in_child=_new_part_threads)


class _PartUploader:
    """Streams bytes into one object: a single PUT if everything fits in one part, else a
    multipart upload with up to `parts_in_flight` parts in flight.

    Parts are filled in buffers from _part_buffers (buffer()). The uploader keeps the buffers
    it took until close(): a sent part's buffer is reused for a later part, and a new one is
    taken from the pool only while one is free, so a busy pool slows an upload down (fewer parts
    in flight) rather than stopping it."""

    def __init__(self, *, intent_id: int, key: str, content_type: str, parts_in_flight: int = PARTS_IN_FLIGHT):
        self.intent_id = intent_id
        self.parts_in_flight = parts_in_flight
        self.key = key
        self.content_type = content_type
        self.upload_id: str | None = None
        self.s3 = storage.client()
        self._parts: dict[int, dict] = {}
        self._pending: dict[Future, bytearray] = {}
        self._spare: list[bytearray] = []
        self._taken: list[bytearray] = []
        self._next_part = 1
        self._last_heartbeat = time.monotonic()

    def _start(self) -> None:
        self.upload_id = storage.multipart_start(key=self.key, content_type=self.content_type, s3=self.s3)
        crash_point("upload_multipart_started")
        _intent_heartbeat(self.intent_id, upload_id=self.upload_id)
        self._last_heartbeat = time.monotonic()

    def buffer(self) -> bytearray:
        """An empty part buffer: a spare one, else a new one from the pool if one is free (or
        if this upload has none yet: then waiting for it), else the next one the store is done
        with. The caller hands it back through add_part() or finish()."""
        if not self._spare and len(self._taken) <= self.parts_in_flight:
            buffer = _part_buffers.take(wait=not self._taken)
            if buffer is not None:
                self._taken.append(buffer)
                return buffer
        while not self._spare:
            done, _ = wait(self._pending, return_when=FIRST_COMPLETED)
            self._collect(done)
        return self._spare.pop()

    def _collect(self, done) -> None:
        for future in done:
            self._spare.append(self._pending.pop(future))
            number, part = future.result()
            self._parts[number] = part

    def _upload(self, number: int, buffer: bytearray) -> tuple[int, dict]:
        part = storage.multipart_upload_part(
            key=self.key, upload_id=self.upload_id, part_number=number, body=buffer, s3=self.s3
        )
        crash_point("upload_part_stored")
        return number, part

    def add_part(self, buffer: bytearray) -> None:
        """Send the buffer as the next part."""
        if self.upload_id is None:
            self._start()
        while len(self._pending) >= self.parts_in_flight:
            done, _ = wait(self._pending, return_when=FIRST_COMPLETED)
            self._collect(done)
        self._pending[_part_threads.submit(self._upload, self._next_part, buffer)] = buffer
        self._next_part += 1

    def keep_alive(self) -> None:
        """Called as bytes arrive: refresh the intent now and then, so that a slow but live
        upload stays out of reconciliation's reach."""
        if time.monotonic() - self._last_heartbeat > HEARTBEAT_SECONDS:
            _intent_heartbeat(self.intent_id)
            self._last_heartbeat = time.monotonic()

    def finish(self, buffer: bytearray, length: int) -> None:
        """The last bytes (buffer[:length], possibly none); then complete the object. The
        buffer is cut to `length` in place (no copy; the pool lets a cut buffer go), so that
        botocore sends it as it is."""
        try:
            del buffer[length:]
        except BufferError:  # still viewed somewhere: send a copy
            buffer = bytearray(memoryview(buffer)[:length])
        if self.upload_id is None:
            storage.put_object(key=self.key, body=buffer, content_type=self.content_type, s3=self.s3)
            crash_point("upload_object_stored")
            return
        if length:
            self.add_part(buffer)
        done, _ = wait(self._pending)
        self._collect(done)
        parts = [self._parts[number] for number in range(1, self._next_part)]
        storage.multipart_complete(key=self.key, upload_id=self.upload_id, parts=parts, s3=self.s3)
        crash_point("upload_object_stored")

    def close(self) -> None:
        """Stop sending parts (a pending part is cancelled or waited for) and give every buffer
        taken back to the pool. Idempotent; called however the upload ends."""
        for future in self._pending:
            future.cancel()
        wait(self._pending)
        buffers, self._taken, self._spare, self._pending = self._taken, [], [], {}
        for buffer in buffers:
            _part_buffers.give(buffer)


# A read from a readinto source asks for at most this much at once, so that the bytes are
# hashed while they are still in the CPU cache.
READ_INTO_BYTES = 1024 * 1024


def _stream_into(uploader: _PartUploader, chunks, *, max_bytes: int) -> tuple[int, str]:
    """Fill part buffers from `chunks` and hand each full one to the uploader, hashing and
    counting as the bytes arrive. `chunks` is an iterable of bytes, or a reader with
    readinto(buffer, start, end) -> count (0 at the end), which puts the bytes straight into
    the part buffer (no intermediate copy). The caller closes the uploader."""
    digest = hashlib.sha256()
    size = 0
    buffer = uploader.buffer()
    filled = 0
    if hasattr(chunks, "readinto"):
        view = memoryview(buffer)
        while True:
            if filled == len(buffer):
                uploader.add_part(buffer)
                view.release()
                buffer, filled = uploader.buffer(), 0
                view = memoryview(buffer)
            count = chunks.readinto(buffer, filled, min(filled + READ_INTO_BYTES, len(buffer)))
            if not count:
                break
            size += count
            if size > max_bytes:
                raise RequestTooLarge(f"File is larger than the {max_bytes}-byte limit.")
            digest.update(view[filled : filled + count])
            filled += count
            uploader.keep_alive()
        view.release()
    else:
        for chunk in chunks:
            if not chunk:
                continue
            size += len(chunk)
            if size > max_bytes:
                raise RequestTooLarge(f"File is larger than the {max_bytes}-byte limit.")
            digest.update(chunk)
            uploader.keep_alive()
            source = memoryview(chunk)
            while source:
                take = min(len(source), len(buffer) - filled)
                buffer[filled : filled + take] = source[:take]
                filled += take
                source = source[take:]
                if filled == len(buffer):
                    uploader.add_part(buffer)
                    buffer, filled = uploader.buffer(), 0
    uploader.finish(buffer, filled)
    return size, digest.hexdigest()


@dataclass(frozen=True)
class StagedObject:
    """A complete object in the store that no File points to yet: its upload intent is still
    open, so if nothing commits it, reconciliation removes it."""

    intent_id: int
    object_key: str
    size_bytes: int
    sha256: str


def _stage_stream(
    *,
    intent_id: int,
    key: str,
    chunks: Iterable[bytes],
    mime_type: str,
    max_bytes: int,
    parts_in_flight: int = PARTS_IN_FLIGHT,
) -> StagedObject:
    uploader = _PartUploader(intent_id=intent_id, key=key, content_type=mime_type, parts_in_flight=parts_in_flight)
    try:
        try:
            size, sha256 = _stream_into(uploader, chunks, max_bytes=max_bytes)
        finally:
            uploader.close()
    except BaseException as exc:
        _intent_error(intent_id, exc)
        _upload_discard(intent_id=intent_id, key=key, upload_id=uploader.upload_id)
        if isinstance(exc, storage.StorageObjectMissing):
            # Our multipart upload vanished: reconciliation claimed the (stalled) upload.
            raise UploadReclaimed() from exc
        raise
    return StagedObject(intent_id=intent_id, object_key=key, size_bytes=size, sha256=sha256)


def object_stage_stream(
    *, workspace: Workspace, chunks: Iterable[bytes], mime_type: str, max_bytes: int | None = None
) -> StagedObject:
    """Stream `chunks` into a new object under a committed, still-open upload intent; make
    nothing visible. Memory stays bounded whatever the size; more than `max_bytes` (default
    MANGO_FILE_MAX_BYTES) raises RequestTooLarge. Any failure (including one raised by
    `chunks`) discards the partial object; if the store cannot be reached to do so, the open
    intent is left for reconciliation."""
    storage.require_configured()
    max_bytes = settings.MANGO_FILE_MAX_BYTES if max_bytes is None else max_bytes
    key = storage.new_object_key(workspace_id=workspace.id)
    intent = StorageIntent.objects.create(
        kind=StorageIntent.Kind.UPLOAD, workspace=workspace, object_key=key, owner=liveness.owner_id()
    )
    crash_point("upload_intent_opened")
    return _stage_stream(intent_id=intent.pk, key=key, chunks=chunks, mime_type=mime_type, max_bytes=max_bytes)


def object_stage_discard(staged: StagedObject) -> None:
    """Give up a staged object: delete it and roll back its intent (or leave that to
    reconciliation if the store is unreachable)."""
    _upload_discard(intent_id=staged.intent_id, key=staged.object_key, upload_id=None)


class ObjectStager:
    """Stages many objects of one workspace (a session's outputs) fast and in bounded memory.

    Upload intents are committed in batches of STAGER_INTENT_BATCH *before* their objects are
    written (unused ones are rolled back at close). An object of at most one part is read into
    memory and PUT by a pool of STAGER_CONCURRENCY threads, so memory stays below that many
    parts; a larger one streams through the multipart path. `results()` waits for all.
    `close(discard=True)` removes every object staged so far (use it on failure)."""

    def __init__(self, *, workspace: Workspace, max_bytes: int | None = None):
        storage.require_configured()
        self.workspace = workspace
        self.max_bytes = settings.MANGO_FILE_MAX_BYTES if max_bytes is None else max_bytes
        self.s3 = storage.client()
        self._reserved: list[tuple[int, str]] = []
        self._used: dict[str, tuple[int, str]] = {}
        self._futures: dict[str, Future] = {}
        self._pending: set[Future] = set()
        self._pool = ThreadPoolExecutor(max_workers=STAGER_CONCURRENCY, thread_name_prefix="file-stage")

    def _reserve(self) -> tuple[int, str]:
        if not self._reserved:
            # Batches grow with use (8, 16, … STAGER_INTENT_BATCH): few spare rows for a few files.
            batch = min(STAGER_INTENT_BATCH, max(8, len(self._used)))
            owner = liveness.owner_id()
            intents = StorageIntent.objects.bulk_create(
                StorageIntent(
                    kind=StorageIntent.Kind.UPLOAD,
                    workspace=self.workspace,
                    object_key=storage.new_object_key(workspace_id=self.workspace.id),
                    owner=owner,
                )
                for _ in range(batch)
            )
            crash_point("stager_intents_opened")
            self._reserved = [(intent.pk, intent.object_key) for intent in reversed(intents)]
        return self._reserved.pop()

    def _put(self, intent_id: int, key: str, body: bytes, mime_type: str) -> StagedObject:
        storage.put_object(key=key, body=body, content_type=mime_type, s3=self.s3)
        crash_point("stager_object_stored")
        return StagedObject(
            intent_id=intent_id, object_key=key, size_bytes=len(body), sha256=hashlib.sha256(body).hexdigest()
        )

    def stage(self, tag: str, *, chunks: Iterable[bytes], mime_type: str, size: int) -> None:
        """Stage the object for `tag`; `size` is the announced size (a tar header's)."""
        intent_id, key = self._reserve()
        self._used[tag] = (intent_id, key)
        if size > PART_SIZE:
            future = Future()
            future.set_result(
                _stage_stream(
                    intent_id=intent_id,
                    key=key,
                    chunks=chunks,
                    mime_type=mime_type,
                    max_bytes=self.max_bytes,
                    parts_in_flight=WORKER_PARTS_IN_FLIGHT,
                )
            )
            self._futures[tag] = future
            return
        body = b"".join(chunks)
        if len(body) > self.max_bytes:
            raise RequestTooLarge(f"File is larger than the {self.max_bytes}-byte limit.")
        while len(self._pending) >= STAGER_CONCURRENCY:
            _, self._pending = wait(self._pending, return_when=FIRST_COMPLETED)
        future = self._pool.submit(self._put, intent_id, key, body, mime_type)
        self._pending.add(future)
        self._futures[tag] = future

    def discard(self, tag: str) -> None:
        """Drop one staged object (it must not be published after all)."""
        future = self._futures.pop(tag)
        wait([future])
        intent_id, key = self._used.pop(tag)
        _upload_discard(intent_id=intent_id, key=key, upload_id=None)

    def results(self) -> dict[str, StagedObject]:
        """Wait for every upload; raise the first failure."""
        wait(list(self._futures.values()))
        return {tag: future.result() for tag, future in self._futures.items()}

    def close(self, *, discard: bool = False) -> None:
        wait(list(self._futures.values()))
        self._pool.shutdown(wait=True)
        if self._reserved:
            now = timezone.now()
            StorageIntent.objects.filter(
                pk__in=[intent_id for intent_id, _ in self._reserved], state=StorageIntent.State.OPEN
            ).update(state=StorageIntent.State.ROLLED_BACK, closed_at=now, updated_at=now)
            self._reserved = []
        if discard:
            for intent_id, key in self._used.values():
                _upload_discard(intent_id=intent_id, key=key, upload_id=None)
            self._used, self._futures = {}, {}

    def __enter__(self) -> "ObjectStager":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(discard=exc_type is not None)


def file_upload_stream(
    *,
    workspace: Workspace,
    chunks: Iterable[bytes],
    filename: str,
    mime_type: str,
    scope_session_id: str | None = None,
    downloadable: bool = False,
    origin: str = File.Origin.UPLOAD,
    output_path: str | None = None,
    max_bytes: int | None = None,
    expires_at: datetime | None = None,
) -> File:
    """Stream `chunks` into a new object and return the new, visible File.

    Invariant: the File row becomes visible only after the object write completes, and in the
    same transaction that closes the upload intent (committed before the first byte is sent to
    the store). Bounded memory and the size limit as in object_stage_stream; a failure leaves no
    object and no row.
    """
    staged = object_stage_stream(workspace=workspace, chunks=chunks, mime_type=mime_type, max_bytes=max_bytes)
    try:
        return _create_visible_file(
            intent_id=staged.intent_id,
            workspace=workspace,
            filename=filename,
            mime_type=mime_type,
            size_bytes=staged.size_bytes,
            sha256=staged.sha256,
            downloadable=downloadable,
            scope_session_id=scope_session_id,
            origin=origin,
            output_path=output_path,
            expires_at=expires_at,
        )
    except BaseException:
        # The row was not committed: the object must not outlive it. (When reconciliation
        # reclaimed the intent it deletes the object too, but ours may have landed after that.)
        object_stage_discard(staged)
        raise


def file_copy(*, source: File, scope_session_id: str, origin: str = File.Origin.RESOURCE_COPY) -> File:
    """An independent, downloadable, session-scoped copy of `source` (a new id and a new object,
    copied inside the store: no bytes pass through this process). Same intent discipline as
    file_upload_stream: the copy is visible only once its object exists."""
    storage.require_configured()
    if source.state != File.State.READY:
        raise NotFound(f"No file with id {source.id!r}.")
    key = storage.new_object_key(workspace_id=source.workspace_id)
    intent = StorageIntent.objects.create(
        kind=StorageIntent.Kind.UPLOAD, workspace_id=source.workspace_id, object_key=key, owner=liveness.owner_id()
    )
    crash_point("copy_intent_opened")
    try:
        storage.copy_object(source_key=source.object_key, key=key, content_type=source.mime_type)
        crash_point("copy_object_stored")
    except storage.StorageObjectMissing:
        _upload_discard(intent_id=intent.pk, key=key, upload_id=None)
        raise NotFound(f"No file with id {source.id!r}.")
    except BaseException as exc:
        _intent_error(intent.pk, exc)
        _upload_discard(intent_id=intent.pk, key=key, upload_id=None)
        raise
    try:
        return _create_visible_file(
            intent_id=intent.pk,
            workspace=source.workspace,
            # Rows stored before names were cleaned may still carry unsafe characters.
            filename=filename_strip(source.filename),
            mime_type=source.mime_type,
            size_bytes=source.size_bytes,
            sha256=source.sha256,
            downloadable=True,
            scope_session_id=scope_session_id,
            origin=origin,
            output_path=None,
            expires_at=None,
        )
    except BaseException:
        _upload_discard(intent_id=intent.pk, key=key, upload_id=None)
        raise


def _delete_finish(intent: StorageIntent) -> bool:
    """Delete the object, then (in one transaction) the row and the intent. False, with the
    intent left open, if the store is unreachable."""
    try:
        storage.delete_object(key=intent.object_key)
    except Exception as exc:  # noqa: BLE001 — the file is already hidden; reconciliation retries
        logger.warning("file delete deferred to reconciliation", extra={"file_id": intent.file_id})
        _intent_disown(intent.pk, exc)
        return False
    crash_point("delete_object_deleted")
    try:
        with transaction.atomic():
            File.objects.filter(pk=intent.file_id, state=File.State.DELETING).delete()
            _intent_close(intent.pk, state=StorageIntent.State.COMMITTED)
    except DatabaseError:
        liveness.give_up_later(intent.pk)  # the File stays hidden; reconciliation removes the row
        raise
    return True


def _hide_for_delete(files) -> list[StorageIntent]:
    """Within the caller's transaction: mark the (locked, ready) files `deleting` and record
    one delete intent each."""
    intents = []
    owner = liveness.owner_id() if files else None
    for file in files:
        file.state = File.State.DELETING
        file.save(update_fields=["state"])
        intents.append(
            StorageIntent(
                kind=StorageIntent.Kind.DELETE,
                workspace_id=file.workspace_id,
                object_key=file.object_key,
                file_id=file.id,
                owner=owner,
            )
        )
    return StorageIntent.objects.bulk_create(intents)


def file_delete(*, file: File) -> None:
    """Delete a File. Invariant: it disappears from every route at once (it is marked
    `deleting` in the same transaction that records the delete intent), then its object is
    deleted, then its row. If the store is unreachable the File stays hidden and reconciliation
    finishes the delete. Raises NotFound if the File is no longer ready (a concurrent delete)."""
    with transaction.atomic():
        locked = list(File.objects.select_for_update().filter(pk=file.pk, state=File.State.READY))
        if not locked:
            raise NotFound(f"No file with id {file.id!r}.")
        (intent,) = _hide_for_delete(locked)
    file.state = File.State.DELETING
    crash_point("delete_after_hide")
    _delete_finish(intent)


def session_files_delete(*, workspace: Workspace, session_id: str) -> int:
    """Delete every File scoped to a session (used when the session is deleted): all are hidden
    in one transaction, then their objects and rows are removed one by one. Returns how many
    were hidden."""
    with transaction.atomic():
        # No SKIP LOCKED: every one of the session's Files must go, even one locked briefly.
        files = list(
            File.objects.select_for_update().filter(
                workspace=workspace, scope_session_id=session_id, state=File.State.READY
            )
        )
        intents = _hide_for_delete(files)
    crash_point("session_files_after_hide")
    for intent in intents:
        _delete_finish(intent)
    return len(intents)


def files_expire(*, now: datetime | None = None, batch_size: int = 500) -> int:
    """Delete expired Files through the normal delete path. Returns how many were deleted."""
    now = now or timezone.now()
    with transaction.atomic():
        files = list(
            File.objects.select_for_update(skip_locked=True).filter(
                state=File.State.READY, expires_at__isnull=False, expires_at__lte=now
            )[:batch_size]
        )
        intents = _hide_for_delete(files)
    crash_point("expire_after_hide")
    for intent in intents:
        _delete_finish(intent)
    return len(intents)


@dataclass
class OutputsApplied:
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def session_outputs_apply(
    *, workspace: Workspace, session_id: str, staged: dict[str, tuple[StagedObject, str]], keep: set[str]
) -> OutputsApplied:
    """Make a session's visible output Files exactly `keep` (relative paths), in one
    transaction: each staged path (path -> (object, mime type)) becomes a new downloadable,
    session-scoped File, the File it replaces (if any) is hidden in the same commit, and every
    output File whose path is not in `keep` is hidden. So one path never shows two Files and
    never none. The hidden Files' objects and rows are then removed through delete intents.
    Raises UploadReclaimed (nothing changed) if reconciliation claimed a staged object."""
    # Over 60 lines on purpose: one transaction, from the row locks to the commit, read in order.
    crash_point("outputs_before_apply")
    applied = OutputsApplied()
    with transaction.atomic():
        current = {
            file.output_path: file
            for file in File.objects.select_for_update().filter(
                workspace=workspace,
                scope_session_id=session_id,
                origin=File.Origin.SESSION_OUTPUT,
                state=File.State.READY,
            )
        }
        intents = StorageIntent.objects.select_for_update().in_bulk([obj.intent_id for obj, _ in staged.values()])
        if any(
            intents.get(obj.intent_id) is None
            or intents[obj.intent_id].state != StorageIntent.State.OPEN
            or intents[obj.intent_id].attempts
            for obj, _ in staged.values()
        ):
            raise UploadReclaimed()
        tree = {path: current[path].sha256 for path in keep if path in current and path not in staged}
        tree.update({path: obj.sha256 for path, (obj, _) in staged.items()})
        plan = plan_outputs({path: file.sha256 for path, file in current.items()}, tree)
        # A staged path replaces its File even if the bytes match: they were uploaded already.
        applied.replaced = sorted([*plan.changed, *(path for path in plan.unchanged if path in staged)])
        applied.added, applied.removed = plan.added, plan.removed
        applied.unchanged = [path for path in plan.unchanged if path not in staged]
        delete_intents = _hide_for_delete([current[path] for path in (*applied.replaced, *applied.removed)])
        now = timezone.now()
        files, closed = [], []
        for path in sorted(staged):
            obj, mime_type = staged[path]
            file_id = new_file_id()
            files.append(
                File(
                    id=file_id,
                    workspace=workspace,
                    created_at=file_id_time(file_id),
                    object_key=obj.object_key,
                    state=File.State.READY,
                    filename=path,
                    mime_type=mime_type,
                    size_bytes=obj.size_bytes,
                    sha256=obj.sha256,
                    downloadable=True,
                    scope_session_id=session_id,
                    origin=File.Origin.SESSION_OUTPUT,
                    output_path=path,
                )
            )
            intent = intents[obj.intent_id]
            intent.state, intent.file_id, intent.closed_at, intent.updated_at = (
                StorageIntent.State.COMMITTED,
                file_id,
                now,
                now,
            )
            closed.append(intent)
        File.objects.bulk_create(files)
        StorageIntent.objects.bulk_update(closed, ["state", "file_id", "closed_at", "updated_at"])
        quota_enforce(workspace_id=workspace.id)
    crash_point("outputs_after_swap")
    for intent in delete_intents:
        _delete_finish(intent)
    return applied
