"""Storage intents: the durable records that come before every object-store call (a crash at
any point leaves something reconciliation can finish, files/reconcile.py), and the steps that
close them. Used by the services, the transfer engine and reconciliation."""

import logging
import threading
from contextlib import contextmanager

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.database import connection_live, database_connect
from core.errors import ServiceUnavailable
from files import liveness, storage
from files.models import File, OwnedObject, StorageIntent

logger = logging.getLogger(__name__)

# Per thread, while an upload_intents_scope is open: the upload intents opened inside a
# transaction (`ids`, else None) and the autocommit connection they were written on (`conn`,
# opened at the first, closed when the outermost scope ends).
_scoped = threading.local()


class UploadReclaimed(ServiceUnavailable):
    message = "The upload took too long and was cleaned up; nothing was stored. Retry."
    code = "upload_reclaimed"


def upload_intent_open(*, workspace_id: str, object_key: str) -> int:
    """Record an open upload intent for `object_key`, committed before this returns, and return
    its id. Outside a transaction it commits at once. Inside the caller's transaction and an
    upload_intents_scope (a deployment's fire creates its session's file copies in the
    transaction that records the run) it is written on an autocommit connection of its own, so
    that a rollback or a kill of the caller leaves it open: reconciliation deletes the object once
    the scope hands it over or the process is gone. The caller's transaction still closes it with
    the File row (create_visible_file): the row and the close commit together or not at all.
    Inside a transaction without a scope it is written in that transaction (and rolls back with
    it: only a bucket scan would find the object)."""
    owner = liveness.owner_id()
    if not connection.in_atomic_block or getattr(_scoped, "ids", None) is None:
        intent = StorageIntent.objects.create(
            kind=StorageIntent.Kind.UPLOAD, workspace_id=workspace_id, object_key=object_key, owner=owner
        )
        return intent.pk
    now = timezone.now()
    if getattr(_scoped, "conn", None) is None or _scoped.conn.closed or _scoped.conn.broken:
        _scoped.conn = database_connect()
    (intent_id,) = _scoped.conn.execute(
        f"INSERT INTO {StorageIntent._meta.db_table}"
        " (kind, state, workspace_id, object_key, owner, attempts, last_error, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, 0, '', %s, %s) RETURNING id",
        (StorageIntent.Kind.UPLOAD, StorageIntent.State.OPEN, workspace_id, object_key, owner, now, now),
    ).fetchone()
    _scoped.ids.append(intent_id)
    return intent_id


@contextmanager
def upload_intents_scope():
    """Put it around a transaction (outside it: `with upload_intents_scope(), transaction.atomic():`)
    in which Files are copied or uploaded. Once the transaction has ended, the upload intents
    opened in it that it did not close (their File rows rolled back with it: a refused session, a
    lost race) are handed to liveness.GIVEN_UP, so files.reconcile_given_up deletes their objects
    within seconds, not once this long-lived process exits. A committed one is closed already and
    left alone."""
    outer = getattr(_scoped, "ids", None)
    _scoped.ids = ids = []
    try:
        yield
    finally:
        _scoped.ids = outer
        if outer is None and getattr(_scoped, "conn", None) is not None:
            conn, _scoped.conn = _scoped.conn, None
            conn.close()
        if outer is not None:
            outer.extend(ids)  # the enclosing scope hands them over when its transaction has ended
        elif ids:
            try:
                StorageIntent.objects.filter(pk__in=ids, state=StorageIntent.State.OPEN).update(
                    owner=liveness.GIVEN_UP, updated_at=timezone.now()
                )
            except DatabaseError:
                for intent_id in ids:
                    liveness.give_up_later(intent_id)


def intent_close(intent_id: int, *, state: str, file_id: str | None = None) -> None:
    updates = {"state": state, "closed_at": timezone.now(), "updated_at": timezone.now()}
    if file_id:
        updates["file_id"] = file_id
    StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(**updates)


def intent_error(intent_id: int, exc: BaseException) -> None:
    """Best effort (the error being recorded may be the database's own)."""
    try:
        StorageIntent.objects.filter(pk=intent_id).update(last_error=f"{type(exc).__name__}: {exc}"[:2000])
    except DatabaseError:
        pass


def intent_disown(intent_id: int, exc: BaseException) -> None:
    """This process gives up on an open intent (the store was unreachable while finishing it):
    record why and hand it to liveness.GIVEN_UP, an owner no process holds, so reconciliation
    finishes it as soon as the store answers again (files.reconcile_given_up), without a grace.
    If the database does not answer either, the process hands it over once it does."""
    try:
        StorageIntent.objects.filter(pk=intent_id, state=StorageIntent.State.OPEN).update(
            owner=liveness.GIVEN_UP, last_error=f"{type(exc).__name__}: {exc}"[:2000]
        )
    except DatabaseError:
        liveness.give_up_later(intent_id)


def intent_heartbeat(intent_id: int, **fields) -> None:
    """Refresh a live upload's intent; fail if reconciliation has claimed it meanwhile."""
    connection_live()  # a long upload may have streamed through a database restart
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
    try:
        intent_close(intent_id, state=StorageIntent.State.ROLLED_BACK)
    except DatabaseError:
        liveness.give_up_later(intent_id)  # nothing left in the store: reconciliation closes it


def delete_finish(intent: StorageIntent, *, defer: bool = True, crash_at: str = "delete_object_deleted") -> bool:
    """Delete the object, then (in one transaction) the row (the File the intent names, else the
    OwnedObject of its key) and the intent. If the store is
    unreachable: with `defer`, False, the intent left open for reconciliation (given up);
    without (reconciliation itself), the store's error is raised."""
    try:
        storage.delete_object(key=intent.object_key)
    except Exception as exc:
        if not defer:
            raise
        where = {"file_id": intent.file_id, "object_key": intent.object_key}
        logger.warning("object delete deferred to reconciliation", extra=where)
        intent_disown(intent.pk, exc)
        return False
    crash_point(crash_at)
    try:
        with transaction.atomic():
            if intent.file_id:
                File.objects.filter(pk=intent.file_id, state=File.State.DELETING).delete()
            else:
                OwnedObject.objects.filter(object_key=intent.object_key, state=OwnedObject.State.DELETING).delete()
            intent_close(intent.pk, state=StorageIntent.State.COMMITTED)
    except DatabaseError:
        liveness.give_up_later(intent.pk)  # the File stays hidden; reconciliation removes the row
        raise
    return True


def hide_for_delete(rows) -> list[StorageIntent]:
    """Within the caller's transaction: mark the (locked, ready) Files or OwnedObjects `deleting`
    and record one delete intent each."""
    intents = []
    owner = liveness.owner_id() if rows else None
    for row in rows:
        row.state = row.State.DELETING
        row.save(update_fields=["state"])
        intents.append(
            StorageIntent(
                kind=StorageIntent.Kind.DELETE,
                workspace_id=row.workspace_id,
                object_key=row.object_key,
                file_id=row.id if isinstance(row, File) else None,
                owner=owner,
            )
        )
    return StorageIntent.objects.bulk_create(intents)
