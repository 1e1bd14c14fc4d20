"""A sleeping sandbox's state in the object store: its checkpoint (issue 38).

A checkpoint is the tar streams dockerd archives /workspace and /mnt/session/outputs into (modes,
owners, symlinks, mtimes kept), cut at member boundaries (sandboxes/tarchunks.py) into chunks
held once per session by content (SandboxChunk, keyed by SHA-256): a chunk the session already
holds is not uploaded again, so a checkpoint after a small change uploads about that change. The
bytes go through the files app's owned objects (files.services.owned_object_write: intent
first, object, then the row in the transaction that closes the intent; owner kind
`sandbox_chunk`, owner id the chunk row's id), never files.storage.

The intent protocol, so that a crash at any point leaves the live sandbox or a complete
checkpoint, and no object nobody owns:

1. ``checkpoint_begin``: a PENDING SandboxCheckpoint (what this attempt is), left-overs of an
   earlier attempt collected first (the caller holds the session's lease: no other attempt runs).
2. ``chunk_store`` per new chunk: a PENDING SandboxChunk row first, then its object, then the
   row READY. A crash between leaves a PENDING row whose object, if any, it owns: collected.
3. ``checkpoint_commit``: in one transaction with the session's row locked, the checkpoint
   becomes COMMITTED with its manifest (the chunk ids of each stream, in order), the previous one
   goes, chunks no committed checkpoint names go (their objects after the commit, by the files
   app's delete intents), the workspace's storage quota is checked (a checkpoint counts in it),
   and the session's sandbox becomes SLEEPING.
4. Only then is the sandbox removed (sessions.runtime.sleep); until then it is live. A wake
   restores the committed checkpoint; it stays committed (the next checkpoint's base).

A session's checkpoint and chunks are deleted with the session (``checkpoints_delete``, in the
delete's transaction).
"""

import hashlib
import logging
from collections.abc import Iterator
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists
from django.utils import timezone

from core.crashpoints import crash_point
from core.models import Workspace
from files.quotas import StorageQuotaExceeded, quota_enforce
from files.selectors import owned_object_stream
from files.services import owned_object_write, owned_objects_delete
from sessions.models import SandboxCheckpoint, SandboxChunk, Session
from sessions.selectors.sandboxes import threads_active

logger = logging.getLogger(__name__)

OWNER_KIND = "sandbox_chunk"  # files.models.OwnedObject.OwnerKind.SANDBOX_CHUNK
STREAMS = ("workspace", "outputs")


class CheckpointAbandoned(Exception):
    """The checkpoint cannot commit (the session was deleted or woken, or its workspace is over
    its storage quota): nothing was committed and the sandbox stays live."""


def checkpoint_committed(*, session_id: str) -> SandboxCheckpoint | None:
    return SandboxCheckpoint.objects.filter(session_id=session_id, state=SandboxCheckpoint.State.COMMITTED).first()


def checkpoint_begin(*, session: Session) -> SandboxCheckpoint:
    """Record an attempt (the caller holds the session's lease). What an earlier attempt left
    (a PENDING checkpoint, PENDING chunks) is collected first."""
    with transaction.atomic():
        SandboxCheckpoint.objects.filter(session_id=session.id, state=SandboxCheckpoint.State.PENDING).delete()
        _chunks_collect(session_id=session.id, pending_only=True)
        return SandboxCheckpoint.objects.create(
            session_id=session.id, workspace_id=session.workspace_id, sandbox_ref=session.sandbox_ref or ""
        )


def chunks_known(*, session_id: str) -> dict[str, int]:
    """{sha256: chunk id} of the session's stored chunks."""
    return dict(
        SandboxChunk.objects.filter(session_id=session_id, state=SandboxChunk.State.READY).values_list("sha256", "id")
    )


def chunk_store(*, session: Session, data: bytes) -> int:
    """Store one chunk the session does not hold yet; returns its id. The row comes first, so the
    object always has an owner (module docstring, step 2)."""
    digest = hashlib.sha256(data).hexdigest()
    chunk, _created = SandboxChunk.objects.get_or_create(
        session_id=session.id, sha256=digest, defaults={"size_bytes": len(data)}
    )
    if chunk.state == SandboxChunk.State.READY:
        return chunk.id
    crash_point("sandbox_chunk_before_write")
    owned = owned_object_write(
        workspace=Workspace(id=session.workspace_id),
        owner_kind=OWNER_KIND,
        owner_id=str(chunk.id),
        chunks=[data],
        max_bytes=len(data),
    )
    SandboxChunk.objects.filter(pk=chunk.id).update(state=SandboxChunk.State.READY, object_key=owned.object_key)
    crash_point("sandbox_chunk_stored")
    return chunk.id


def checkpoint_commit(*, checkpoint: SandboxCheckpoint, manifest: dict[str, list[int]], logical_bytes: int) -> None:
    """Step 3 of the module docstring. Raises CheckpointAbandoned (nothing committed) when the
    session was deleted or is no longer this checkpoint's, or its workspace is over quota."""
    crash_point("sandbox_checkpoint_before_commit")
    try:
        with transaction.atomic():
            session = Session.objects.select_for_update().get(pk=checkpoint.session_id)
            current = SandboxCheckpoint.objects.select_for_update().filter(
                pk=checkpoint.pk, state=SandboxCheckpoint.State.PENDING
            )
            if session.deleted_at is not None or not current.exists():
                raise CheckpointAbandoned("the session was deleted meanwhile")
            if session.sandbox_state != Session.SandboxState.RUNNING:
                raise CheckpointAbandoned(f"the sandbox is {session.sandbox_state}")
            if session.sandbox_ref != checkpoint.sandbox_ref:
                raise CheckpointAbandoned("the session's sandbox was made again meanwhile")
            threads = Session.objects.filter(pk=session.pk).filter(Exists(threads_active(since=checkpoint.started_at)))
            if threads.exists():
                raise CheckpointAbandoned("a thread of the session used its sandbox meanwhile")
            ids = [chunk_id for stream in STREAMS for chunk_id in manifest.get(stream, [])]
            stored = SandboxChunk.objects.filter(pk__in=set(ids), state=SandboxChunk.State.READY)
            sizes = dict(stored.values_list("id", "size_bytes"))
            if set(ids) - set(sizes):
                raise CheckpointAbandoned("a chunk of the checkpoint is missing")
            SandboxCheckpoint.objects.filter(session_id=session.id, state=SandboxCheckpoint.State.COMMITTED).delete()
            now = timezone.now()
            current.update(
                state=SandboxCheckpoint.State.COMMITTED,
                manifest=manifest,
                logical_bytes=logical_bytes,
                stored_bytes=sum(sizes.values()),
                committed_at=now,
            )
            _chunks_collect(session_id=session.id, keep=set(ids))
            quota_enforce(workspace_id=session.workspace_id)
            Session.objects.filter(pk=session.id).update(sandbox_state=Session.SandboxState.SLEEPING, sandbox_ref=None)
    except CheckpointAbandoned:
        checkpoint_abandon(checkpoint=checkpoint)
        raise
    except StorageQuotaExceeded as exc:
        checkpoint_abandon(checkpoint=checkpoint)
        raise CheckpointAbandoned(exc.message) from exc
    crash_point("sandbox_checkpoint_committed")


def checkpoint_abandon(*, checkpoint: SandboxCheckpoint) -> None:
    """An attempt that will not commit: its row goes, and the chunks only it stored."""
    with transaction.atomic():
        SandboxCheckpoint.objects.filter(pk=checkpoint.pk, state=SandboxCheckpoint.State.PENDING).delete()
        committed = checkpoint_committed(session_id=checkpoint.session_id)
        keep = set(committed.chunk_ids()) if committed else set()
        _chunks_collect(session_id=checkpoint.session_id, keep=keep)


def _chunks_collect(*, session_id: str, keep: set[int] | None = None, pending_only: bool = False) -> int:
    """Delete the session's chunks outside `keep` (or only its PENDING ones) with their objects
    (removed after the commit, by the files app's delete intents). Inside a transaction."""
    rows = SandboxChunk.objects.filter(session_id=session_id)
    if pending_only:
        rows = rows.filter(state=SandboxChunk.State.PENDING)
    elif keep:
        rows = rows.exclude(pk__in=keep)
    ids = list(rows.values_list("id", flat=True))
    if ids:
        owned_objects_delete(owner_kind=OWNER_KIND, owner_ids=[str(chunk_id) for chunk_id in ids])
        SandboxChunk.objects.filter(pk__in=ids).delete()
    return len(ids)


def checkpoints_delete(*, session_id: str) -> int:
    """Everything of the session's checkpoints, in the caller's transaction (a session delete):
    the objects go once it commits."""
    SandboxCheckpoint.objects.filter(session_id=session_id).delete()
    return _chunks_collect(session_id=session_id)


def checkpoint_stream(*, checkpoint: SandboxCheckpoint, stream: str) -> Iterator[bytes]:
    """One stream of a committed checkpoint (the tar archive), chunk after chunk from the store,
    each verified against its SHA-256."""
    ids = checkpoint.manifest.get(stream, [])
    chunks = {chunk.id: chunk for chunk in SandboxChunk.objects.filter(pk__in=set(ids))}
    for chunk_id in ids:
        chunk = chunks[chunk_id]
        digest = hashlib.sha256()
        for piece in owned_object_stream(owner_kind=OWNER_KIND, owner_id=str(chunk.id), object_key=chunk.object_key):
            digest.update(piece)
            yield piece
        if digest.hexdigest() != chunk.sha256:
            raise ValueError(f"chunk {chunk.id} of the checkpoint does not match its digest")


def checkpoint_stale_sweep(*, older_than_seconds: float) -> int:
    """PENDING checkpoints whose attempt died long ago (their session's next attempt would collect
    them; a deleted or never-again-idle session has none): removed with their pending chunks."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    count = 0
    for checkpoint in SandboxCheckpoint.objects.filter(state=SandboxCheckpoint.State.PENDING, started_at__lt=cutoff):
        checkpoint_abandon(checkpoint=checkpoint)
        count += 1
    return count
