"""Reconciliation: finish every object-store operation a crash interrupted.

Runs at startup (`manage.py reconcile_files`, called by `make run`), every 5 minutes (the
`files.reconcile` Celery task) and on demand from the admin. Safe with any number of API
processes, workers and reconcilers at once:

* an intent is finished as soon as its owner process is provably dead (files/liveness.py: the
  owner's advisory lock is no longer held), and never while its owner lives — so after a
  crash and restart, interrupted operations are finished at once, whatever the number of
  processes. An intent its owner (or a reconciler) gave up on because the store was
  unreachable belongs to liveness.GIVEN_UP, which no process holds: it is finished by the next
  pass that reaches the store (files.reconcile_given_up retries them every few seconds). Only
  intents whose owner cannot be known (NULL: rows from older builds) wait for the grace window,
  measured from their last sign of life;
* intents are claimed with SELECT … FOR UPDATE SKIP LOCKED and the claim (attempts + 1, and
  the reconciler becomes the owner, so a concurrent reconciler leaves it alone and a crashed
  one's claims are finished by the next) is committed before any object-store call; a request
  whose intent was claimed refuses to publish its File (services.create_visible_file), so the
  claim decides the race;
* every step is idempotent (abort, delete, conditional row updates), so a repeated or
  concurrent pass is harmless.
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.crashpoints import crash_point
from files import liveness, storage
from files import metrics as files_metrics
from files.intents import delete_finish, intent_close
from files.models import File, OwnedObject, StorageIntent, owned_key_prefix

logger = logging.getLogger(__name__)

BATCH_SIZE = 100
CLOSED_INTENT_RETENTION = timedelta(days=7)
UNOWNED_MULTIPART_SECONDS = 60


@dataclass
class Report:
    dry_run: bool = False
    uploads_rolled_back: int = 0
    uploads_already_committed: int = 0
    deletes_finished: int = 0
    multipart_uploads_aborted: int = 0
    orphan_objects_deleted: int = 0
    closed_intents_pruned: int = 0
    deferred: int = 0
    store_scan_deferred: bool = False
    actions: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "actions"}


def _unlocked_owners() -> tuple[set[int], float]:
    """Owners of open intents whose advisory lock is not held, and the database's uptime.

    The owners are read before the locks: an owner takes its lock before it stamps an intent,
    so an owner seen on an intent and then missing from the locks has lost its session (ids
    are never reused). The other order would take a process that started in between for one."""
    owners = set(
        StorageIntent.objects.filter(state=StorageIntent.State.OPEN, owner__isnull=False)
        .values_list("owner", flat=True)
        .distinct()
    )
    if not owners:
        return set(), float("inf")
    live, uptime = liveness.live_owners()
    return owners - live, uptime


def dead_owners(*, wait: bool = True) -> set[int]:
    """Owners of open intents whose processes are gone: unlocked, and still unlocked after the
    time a living process takes to notice a lost session and re-stamp its intents under a new
    id (files/liveness.py). Their intents still carry the old id only if nobody re-stamped
    them, so a claim of `owner__in=dead_owners()` never takes a living process's intent. Just
    after a database restart (every lock lost at once) the wait is longer. `wait=False` (dry
    runs) skips the wait."""
    unlocked, uptime = _unlocked_owners()
    if not wait or not (unlocked - {liveness.GIVEN_UP}):
        return unlocked
    time.sleep(max(liveness.RELOCK_SECONDS, liveness.RESTART_SECONDS - uptime))
    return unlocked


def _finishable(*, cutoff, dead: set[int]) -> Q:
    """Open intents reconciliation may finish now: a dead owner's, or an ownerless one idle
    for longer than the grace window."""
    return Q(state=StorageIntent.State.OPEN) & (Q(owner__in=dead) | Q(owner__isnull=True, updated_at__lt=cutoff))


def _claim(*, cutoff, dead: set[int], batch_size: int, intent_ids=None) -> list[StorageIntent]:
    with transaction.atomic():
        queryset = StorageIntent.objects.select_for_update(skip_locked=True).filter(
            _finishable(cutoff=cutoff, dead=dead)
        )
        if intent_ids is not None:
            queryset = queryset.filter(pk__in=intent_ids)
        intents = list(queryset.order_by("updated_at")[:batch_size])
        if intents:
            StorageIntent.objects.filter(pk__in=[intent.pk for intent in intents]).update(
                attempts=F("attempts") + 1, updated_at=timezone.now(), owner=liveness.owner_id()
            )
    crash_point("reconcile_claimed")
    return intents


def _store_prefixes() -> list[str]:
    """Every prefix the store holds our objects under: the Files' and each owner kind's."""
    return [storage.KEY_PREFIX, *(owned_key_prefix(kind) for kind in OwnedObject.OwnerKind.values)]


def _keys_held(keys: list[str]) -> set[str]:
    """Those of `keys` that a File or an OwnedObject names (in any state): never orphans."""
    held = set(File.objects.filter(object_key__in=keys).values_list("object_key", flat=True))
    return held | set(OwnedObject.objects.filter(object_key__in=keys).values_list("object_key", flat=True))


def _finish_upload(intent: StorageIntent, report: Report) -> None:
    if _keys_held([intent.object_key]):
        # Defensive: the row and the intent close are one transaction, so this means the
        # intent was closed by hand or by an older build. The object is in use: keep it.
        intent_close(intent.pk, state=StorageIntent.State.COMMITTED)
        report.uploads_already_committed += 1
        return
    if intent.upload_id:
        storage.multipart_abort(key=intent.object_key, upload_id=intent.upload_id)
    # Also the uploads the intent does not name: its owner may have died between starting one and
    # recording its id, or a retried start may have made a second. Keys are unique per intent, so
    # every upload under this exact key is the intent's.
    for upload in storage.list_multipart_uploads(prefix=intent.object_key):
        if upload["key"] == intent.object_key:
            storage.multipart_abort(key=upload["key"], upload_id=upload["upload_id"])
    storage.delete_object(key=intent.object_key)
    crash_point("reconcile_object_removed")
    intent_close(intent.pk, state=StorageIntent.State.ROLLED_BACK)
    report.uploads_rolled_back += 1


def _finish_delete(intent: StorageIntent, report: Report) -> None:
    delete_finish(intent, defer=False, crash_at="reconcile_object_removed")
    report.deletes_finished += 1


def _describe(intent: StorageIntent) -> str:
    verb = "delete object and row" if intent.kind == StorageIntent.Kind.DELETE else "roll back upload"
    return f"{verb}: intent {intent.pk} key {intent.object_key} file {intent.file_id or '-'}"


def reconcile(
    *,
    grace_seconds: int | None = None,
    dry_run: bool = False,
    intent_ids: list[int] | None = None,
    scan_orphans: bool = False,
) -> Report:
    """Finish open intents whose owner is dead at once, and ownerless ones idle for longer than
    the grace window; abort stale multipart uploads that no open intent owns; optionally
    delete orphan objects (no File, no OwnedObject, no open intent)."""
    report = Report(dry_run=dry_run)
    if not storage.is_configured():
        return report
    grace = settings.MANGO_RECONCILE_GRACE_SECONDS if grace_seconds is None else grace_seconds
    cutoff = timezone.now() - timedelta(seconds=grace)

    if dry_run:
        queryset = StorageIntent.objects.filter(_finishable(cutoff=cutoff, dead=dead_owners(wait=False)))
        if intent_ids is not None:
            queryset = queryset.filter(pk__in=intent_ids)
        report.actions += [_describe(intent) for intent in queryset.order_by("updated_at")]
    else:
        dead = dead_owners()
        store_down = False
        while not store_down:
            intents = _claim(cutoff=cutoff, dead=dead, batch_size=BATCH_SIZE, intent_ids=intent_ids)
            if not intents:
                break
            for intent in intents:
                report.actions.append(_describe(intent))
                if not store_down:
                    try:
                        if intent.kind == StorageIntent.Kind.UPLOAD:
                            _finish_upload(intent, report)
                        else:
                            _finish_delete(intent, report)
                        continue
                    except storage.StorageUnavailable as exc:
                        store_down, error = True, f"reconcile: {exc.details}"[:2000]
                        logger.warning("reconcile deferred: object store unavailable", extra={"intent_id": intent.pk})
                report.deferred += 1
                # Given up: no process owns it, so the next pass retries it without a grace.
                StorageIntent.objects.filter(pk=intent.pk, state=StorageIntent.State.OPEN).update(
                    owner=liveness.GIVEN_UP, last_error=error
                )

    if intent_ids is None:
        try:
            _abort_stale_multipart(cutoff=cutoff, dry_run=dry_run, report=report)
            if scan_orphans:
                _delete_orphans(cutoff=cutoff, dry_run=dry_run, report=report)
        except storage.StorageUnavailable:
            report.store_scan_deferred = True
            logger.warning("reconcile: object store unreachable; bucket scan deferred")
        if not dry_run:
            report.closed_intents_pruned, _ = (
                StorageIntent.objects.exclude(state=StorageIntent.State.OPEN)
                .filter(closed_at__lt=timezone.now() - CLOSED_INTENT_RETENTION)
                .delete()
            )
        files_metrics.record_reconcile(report)
    return report


def reconcile_given_up() -> Report:
    """Finish the intents their owners gave up on (liveness.GIVEN_UP): they have no live owner,
    so they wait for nothing but the store. Cheap when there are none (one indexed query)."""
    ids = list(
        StorageIntent.objects.filter(state=StorageIntent.State.OPEN, owner=liveness.GIVEN_UP).values_list(
            "pk", flat=True
        )[:BATCH_SIZE]
    )
    return reconcile(intent_ids=ids) if ids else Report()


def _abort_stale_multipart(*, cutoff, dry_run: bool, report: Report) -> None:
    """Abort the multipart uploads no open intent owns, once older than the grace window or
    UNOWNED_MULTIPART_SECONDS, whichever is shorter. A multipart upload is started only under a
    committed intent for its key (keys are unique per intent), so one whose key has no open intent
    is never going to be completed (the short age only covers an intent not yet visible to this
    transaction). The uploads are listed before the intents are read, so an upload started
    meanwhile is never taken for an unowned one."""
    uploads = [upload for prefix in _store_prefixes() for upload in storage.list_multipart_uploads(prefix=prefix)]
    keys = sorted({upload["key"] for upload in uploads})
    owned = set()
    for start in range(0, len(keys), 1000):
        owned |= set(
            StorageIntent.objects.filter(
                state=StorageIntent.State.OPEN, object_key__in=keys[start : start + 1000]
            ).values_list("object_key", flat=True)
        )
    cutoff = max(cutoff, timezone.now() - timedelta(seconds=UNOWNED_MULTIPART_SECONDS))
    for upload in uploads:
        if upload["key"] in owned or upload["initiated"] is None or upload["initiated"] >= cutoff:
            continue
        report.actions.append(f"abort stale multipart upload {upload['upload_id']} key {upload['key']}")
        if not dry_run:
            storage.multipart_abort(key=upload["key"], upload_id=upload["upload_id"])
            report.multipart_uploads_aborted += 1


def _delete_orphans(*, cutoff, dry_run: bool, report: Report) -> None:
    """Delete the objects under our prefixes that no File, no OwnedObject and no open intent
    names, once older than the grace window. An intent commits before its object is written and
    closes in the transaction that creates the row, and the objects are listed before the intents
    and then the rows are read, so a live object is never taken for an orphan."""
    batch: list[dict] = []

    def flush():
        keys = [item["key"] for item in batch]
        # Open intents first: an intent closes in the transaction that creates its row, so a key
        # whose intent closed after this read has a row by the next one.
        known = set(
            StorageIntent.objects.filter(object_key__in=keys, state=StorageIntent.State.OPEN).values_list(
                "object_key", flat=True
            )
        )
        known |= _keys_held(keys)
        for item in batch:
            if item["key"] in known or item["last_modified"] >= cutoff:
                continue
            report.actions.append(f"delete orphan object {item['key']}")
            if not dry_run:
                storage.delete_object(key=item["key"])
                report.orphan_objects_deleted += 1
        batch.clear()

    for prefix in _store_prefixes():
        for item in storage.list_objects(prefix=prefix):
            batch.append(item)
            if len(batch) >= 1000:
                flush()
    if batch:
        flush()
