"""Writes for Files. Each service states its invariant; object-store calls never run inside a
database transaction, and every one of them is preceded by a committed StorageIntent so that a
crash at any point leaves something reconciliation can finish (files/reconcile.py). The bytes
themselves move through files/transfers.py; intents open and close through files/intents.py.
Objects that are not Files (skill files, sandbox checkpoints) are written and deleted here too,
through the same intents (owned_object_write, owned_objects_delete)."""

from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.database import connection_live
from core.errors import NotFound
from core.models import Workspace
from files import storage
from files.intents import (
    UploadReclaimed,
    delete_finish,
    hide_for_delete,
    intent_error,
    upload_discard,
    upload_intent_open,
)
from files.models import File, OwnedObject, StorageIntent, owned_key_prefix
from files.quotas import quota_enforce
from files.transfers import StagedObject, stage_stream
from processors.filenames import filename_strip


def _intent_claim_for_commit(intent_id: int) -> StorageIntent:
    """Within the caller's transaction: the upload intent, locked, unless reconciliation has
    claimed it (it is deleting the object): then UploadReclaimed."""
    intent = StorageIntent.objects.select_for_update().get(pk=intent_id)
    if intent.state != StorageIntent.State.OPEN or intent.attempts:
        raise UploadReclaimed()
    return intent


def _intent_commit(intent: StorageIntent, *, file_id: str | None = None) -> None:
    intent.state = StorageIntent.State.COMMITTED
    intent.file_id = file_id
    intent.closed_at = timezone.now()
    intent.save(update_fields=["state", "file_id", "closed_at", "updated_at"])


def create_visible_file(*, intent_id: int, workspace: Workspace, **fields) -> File:
    """In one transaction: create the ready File and close its upload intent. Refuses when
    reconciliation has claimed the intent (it is deleting the object)."""
    crash_point("upload_before_commit")
    connection_live()  # the body may have streamed through a database restart
    with transaction.atomic():
        intent = _intent_claim_for_commit(intent_id)
        file = File.new_ready(workspace=workspace, object_key=intent.object_key, **fields)
        file.save(force_insert=True)
        _intent_commit(intent, file_id=file.id)
        quota_enforce(workspace_id=workspace.id)
    crash_point("upload_after_commit")
    return file


def object_stage_stream(
    *,
    workspace: Workspace,
    chunks: Iterable[bytes],
    mime_type: str,
    max_bytes: int | None = None,
    key_prefix: str = storage.KEY_PREFIX,
) -> StagedObject:
    """Stream `chunks` into a new object under a committed, still-open upload intent; make
    nothing visible. Memory stays bounded whatever the size; more than `max_bytes` (default
    MANGO_FILE_MAX_BYTES) raises RequestTooLarge. Any failure (including one raised by
    `chunks`) discards the partial object; if the store cannot be reached to do so, the open
    intent is left for reconciliation."""
    storage.require_configured()
    max_bytes = settings.MANGO_FILE_MAX_BYTES if max_bytes is None else max_bytes
    key = storage.new_object_key(workspace_id=workspace.id, prefix=key_prefix)
    intent_id = upload_intent_open(workspace_id=workspace.id, object_key=key)
    crash_point("upload_intent_opened")
    return stage_stream(intent_id=intent_id, key=key, chunks=chunks, mime_type=mime_type, max_bytes=max_bytes)


def object_stage_discard(staged: StagedObject) -> None:
    """Give up a staged object: delete it and roll back its intent (or leave that to
    reconciliation if the store is unreachable)."""
    upload_discard(intent_id=staged.intent_id, key=staged.object_key, upload_id=None)


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
        return create_visible_file(
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


def file_copy(
    *, source: File, scope_session_id: str, origin: str = File.Origin.RESOURCE_COPY, downloadable: bool = True
) -> File:
    """An independent, downloadable, session-scoped copy of `source` (a new id and a new object,
    copied inside the store: no bytes pass through this process). Same intent discipline as
    file_upload_stream: the copy is visible only once its object exists."""
    storage.require_configured()
    if source.state != File.State.READY:
        raise NotFound(f"No file with id {source.id!r}.")
    key = storage.new_object_key(workspace_id=source.workspace_id)
    intent_id = upload_intent_open(workspace_id=source.workspace_id, object_key=key)
    crash_point("copy_intent_opened")
    try:
        storage.copy_object(source_key=source.object_key, key=key, content_type=source.mime_type)
        crash_point("copy_object_stored")
    except storage.StorageObjectMissing:
        upload_discard(intent_id=intent_id, key=key, upload_id=None)
        raise NotFound(f"No file with id {source.id!r}.")
    except BaseException as exc:
        intent_error(intent_id, exc)
        upload_discard(intent_id=intent_id, key=key, upload_id=None)
        raise
    try:
        return create_visible_file(
            intent_id=intent_id,
            workspace=source.workspace,
            # Rows stored before names were cleaned may still carry unsafe characters.
            filename=filename_strip(source.filename),
            mime_type=source.mime_type,
            size_bytes=source.size_bytes,
            sha256=source.sha256,
            downloadable=downloadable,
            scope_session_id=scope_session_id,
            origin=origin,
            output_path=None,
            expires_at=None,
        )
    except BaseException:
        upload_discard(intent_id=intent_id, key=key, upload_id=None)
        raise


def owned_object_write(
    *,
    workspace: Workspace,
    owner_kind: str,
    owner_id: str,
    chunks: Iterable[bytes],
    max_bytes: int,
    content_type: str = "application/octet-stream",
) -> OwnedObject:
    """Stream `chunks` into a new object under `<owner_kind>/<workspace>/`, held by the owner
    (`owner_kind`, `owner_id`). Invariant, as for an upload: the intent commits before the first
    byte goes to the store, and the OwnedObject row is created in the transaction that closes it.
    So a crash mid-write leaves an open intent that reconciliation rolls back (no orphan), and an
    object that was committed always has the row the orphan scan keeps it for. Bounded memory;
    more than `max_bytes` raises RequestTooLarge; past the workspace's storage quota (which counts
    owned objects as Files) StorageQuotaExceeded; a failure leaves no object and no row."""
    owner_kind = OwnedObject.OwnerKind(owner_kind)
    staged = object_stage_stream(
        workspace=workspace,
        chunks=chunks,
        mime_type=content_type,
        max_bytes=max_bytes,
        key_prefix=owned_key_prefix(owner_kind),
    )
    try:
        crash_point("owned_object_before_commit")
        connection_live()
        with transaction.atomic():
            intent = _intent_claim_for_commit(staged.intent_id)
            owned = OwnedObject.objects.create(
                workspace=workspace,
                owner_kind=owner_kind,
                owner_id=owner_id,
                object_key=intent.object_key,
                size_bytes=staged.size_bytes,
                sha256=staged.sha256,
            )
            _intent_commit(intent)
            quota_enforce(workspace_id=workspace.id)  # owned objects count toward the store's quota
    except BaseException:
        object_stage_discard(staged)
        raise
    return owned


def owned_objects_delete(*, owner_kind: str, owner_ids: list[str]) -> int:
    """Delete every object these owners hold. Call it in the transaction that deletes the owners:
    the objects are hidden and a delete intent each is recorded in it, and the objects are removed
    once it commits, so the owner and its objects go together (after a crash, reconciliation
    finishes the open intents). Returns how many objects were hidden."""
    with transaction.atomic():
        rows = list(
            OwnedObject.objects.select_for_update().filter(
                owner_kind=owner_kind, owner_id__in=owner_ids, state=OwnedObject.State.READY
            )
        )
        intents = hide_for_delete(rows)

    def finish() -> None:
        for intent in intents:
            delete_finish(intent)

    # Robust: the owner's change is committed whatever happens here; an intent left open is
    # reconciliation's to finish.
    transaction.on_commit(finish, robust=True)
    return len(intents)


def file_delete(*, file: File) -> None:
    """Delete a File. Invariant: it disappears from every route at once (it is marked
    `deleting` in the same transaction that records the delete intent), then its object is
    deleted, then its row. If the store is unreachable the File stays hidden and reconciliation
    finishes the delete. Raises NotFound if the File is no longer ready (a concurrent delete)."""
    with transaction.atomic():
        locked = list(File.objects.select_for_update().filter(pk=file.pk, state=File.State.READY))
        if not locked:
            raise NotFound(f"No file with id {file.id!r}.")
        (intent,) = hide_for_delete(locked)
    file.state = File.State.DELETING
    crash_point("delete_after_hide")
    delete_finish(intent)


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
        intents = hide_for_delete(files)
    crash_point("session_files_after_hide")
    for intent in intents:
        delete_finish(intent)
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
        intents = hide_for_delete(files)
    crash_point("expire_after_hide")
    for intent in intents:
        delete_finish(intent)
    return len(intents)
