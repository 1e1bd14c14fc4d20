"""Storage intents: the durable records that come before every object-store call (a crash at
any point leaves something reconciliation can finish, files/reconcile.py), and the steps that
close them. Used by the services, the transfer engine and reconciliation."""

import logging

from django.db import transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.errors import ServiceUnavailable
from files import liveness, storage
from files.models import File, StorageIntent

logger = logging.getLogger(__name__)


class UploadReclaimed(ServiceUnavailable):
    message = "The upload took too long and was cleaned up; nothing was stored. Retry."
    code = "upload_reclaimed"


def intent_close(intent_id: int, *, state: str, file_id: str | None = None) -> None:
    updates = {"state": state, "closed_at": timezone.now(), "updated_at": timezone.now()}
    if file_id:
        updates["file_id"] = file_id
    StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(**updates)


def intent_error(intent_id: int, exc: BaseException) -> None:
    StorageIntent.objects.filter(pk=intent_id).update(last_error=f"{type(exc).__name__}: {exc}"[:2000])


def intent_disown(intent_id: int, exc: BaseException) -> None:
    """This process gives up on an open intent (the store was unreachable while finishing it):
    record why and drop its owner, so reconciliation finishes it after the grace window even
    while this process lives on."""
    StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(
        owner=None, last_error=f"{type(exc).__name__}: {exc}"[:2000]
    )


def intent_heartbeat(intent_id: int, **fields) -> None:
    """Refresh a live upload's intent; fail if reconciliation has claimed it meanwhile."""
    updated = StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN, attempts=0).update(
        updated_at=timezone.now(), **fields
    )
    if not updated:
        raise UploadReclaimed()


def upload_discard(*, intent_id: int, key: str, upload_id: str | None) -> None:
    """Best effort: remove what a failed upload left in the store and close its intent. If the
    store is unreachable the intent stays open and reconciliation finishes the job."""
    try:
        if upload_id:
            storage.multipart_abort(key=key, upload_id=upload_id)
        storage.delete_object(key=key)
    except Exception as exc:  # noqa: BLE001 — cleanup must not mask the original error
        logger.warning("upload cleanup deferred to reconciliation", extra={"object_key": key})
        intent_disown(intent_id, exc)
        return
    crash_point("upload_discard_before_close")
    intent_close(intent_id, state=StorageIntent.State.ROLLED_BACK)


def delete_finish(intent: StorageIntent, *, defer: bool = True, crash_at: str = "delete_object_deleted") -> bool:
    """Delete the object, then (in one transaction) the row and the intent. If the store is
    unreachable: with `defer`, False, the intent left open for reconciliation (ownerless);
    without (reconciliation itself), the store's error is raised."""
    try:
        storage.delete_object(key=intent.object_key)
    except Exception as exc:
        if not defer:
            raise
        logger.warning("file delete deferred to reconciliation", extra={"file_id": intent.file_id})
        intent_disown(intent.pk, exc)
        return False
    crash_point(crash_at)
    with transaction.atomic():
        File.objects.filter(pk=intent.file_id, state=File.State.DELETING).delete()
        intent_close(intent.pk, state=StorageIntent.State.COMMITTED)
    return True


def hide_for_delete(files) -> list[StorageIntent]:
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
