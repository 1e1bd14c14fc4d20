"""The transfer engine: streams bytes into the object store with bounded memory. Part buffers
shared by the process (_PartBuffers), the threads that send parts (_part_threads), one object's
upload (PartUploader: a single PUT, or a multipart upload with parts in flight), and the stager of
many objects at once (ObjectStager). Every object is written under a committed, open upload
intent (files/intents.py); nothing here makes a File visible (files/services.py does)."""

import hashlib
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from core.crashpoints import crash_point
from core.errors import RequestTooLarge
from core.models import Workspace
from files import liveness, storage
from files.intents import UploadReclaimed, intent_error, intent_heartbeat, upload_discard
from files.models import StorageIntent

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


class _PartBuffers:
    """Part buffers shared by every upload of the process. They are allocated once and reused:
    a fresh buffer per part costs a page fault per 4 KiB on top of the copy. At most `limit`
    exist at a time, which bounds the memory of all concurrent uploads together (an upload
    keeps the ones it took until it ends; see PartUploader.buffer). An upload that waits
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


class PartUploader:
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
        self._parts: dict[int, dict] = {}
        self._pending: dict[Future, bytearray] = {}
        self._spare: list[bytearray] = []
        self._taken: list[bytearray] = []
        self._next_part = 1
        self._last_heartbeat = time.monotonic()

    def _start(self) -> None:
        self.upload_id = storage.multipart_start(key=self.key, content_type=self.content_type)
        crash_point("upload_multipart_started")
        intent_heartbeat(self.intent_id, upload_id=self.upload_id)
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
        part = storage.multipart_upload_part(key=self.key, upload_id=self.upload_id, part_number=number, body=buffer)
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
            intent_heartbeat(self.intent_id)
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
            storage.put_object(key=self.key, body=buffer, content_type=self.content_type)
            crash_point("upload_object_stored")
            return
        if length:
            self.add_part(buffer)
        done, _ = wait(self._pending)
        self._collect(done)
        parts = [self._parts[number] for number in range(1, self._next_part)]
        storage.multipart_complete(key=self.key, upload_id=self.upload_id, parts=parts)
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


def stream_into(uploader: PartUploader, chunks, *, max_bytes: int) -> tuple[int, str]:
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


def stage_stream(
    *,
    intent_id: int,
    key: str,
    chunks: Iterable[bytes],
    mime_type: str,
    max_bytes: int,
    parts_in_flight: int = PARTS_IN_FLIGHT,
) -> StagedObject:
    uploader = PartUploader(intent_id=intent_id, key=key, content_type=mime_type, parts_in_flight=parts_in_flight)
    try:
        try:
            size, sha256 = stream_into(uploader, chunks, max_bytes=max_bytes)
        finally:
            uploader.close()
    except BaseException as exc:
        intent_error(intent_id, exc)
        upload_discard(intent_id=intent_id, key=key, upload_id=uploader.upload_id)
        if isinstance(exc, storage.StorageObjectMissing):
            # Our multipart upload vanished: reconciliation claimed the (stalled) upload.
            raise UploadReclaimed() from exc
        raise
    return StagedObject(intent_id=intent_id, object_key=key, size_bytes=size, sha256=sha256)


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
        storage.put_object(key=key, body=body, content_type=mime_type)
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
                stage_stream(
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
        upload_discard(intent_id=intent_id, key=key, upload_id=None)

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
                upload_discard(intent_id=intent_id, key=key, upload_id=None)
            self._used, self._futures = {}, {}

    def __enter__(self) -> "ObjectStager":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(discard=exc_type is not None)
