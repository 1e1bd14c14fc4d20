"""The self-hosted work queue: environment keys, and work items from queued to stopped.

A `self_hosted` session needs a worker (the SDK's EnvironmentWorker, on the client's machine) to
run its tools; Mango's Celery runner keeps running the model. A work item is queued when such a
session is created and whenever it is given input while no item of its is open (one open item
per session: a partial unique constraint). A poll hands out the oldest claimable item (queued
and never handed out, or handed out but unacknowledged past the poller's reclaim window, or one
whose lease ran out), under SKIP LOCKED so concurrent polls never hand out the same item; ack
starts its lease, heartbeats extend it with a compare-and-set on the last heartbeat, and stop
ends it (gracefully through `stopping`, or at once with force). Deleting a session stops its item.

Wake-ups for long polls are Redis hints published after commit (sessions.notify); PostgreSQL
stays the source of truth (a poll always claims from the table)."""

import functools
import logging
from datetime import timedelta

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Environment
from core.api import rfc3339
from core.errors import ApiError, Conflict, InvalidRequest, NotFound
from core.lookups import columns_of, returned_row
from core.metadata import metadata_patch_apply
from sessions import notify
from sessions.models import EnvironmentKey, Session, WorkItem
from sessions.queue import credentials
from sessions.toolhost import tool_host

logger = logging.getLogger(__name__)

NO_HEARTBEAT = "NO_HEARTBEAT"
# The poller's reclaim window when it names none (the SDK's documented default).
RECLAIM_DEFAULT_MS = 5000
# A worker counts as polling for this long after its last poll (stats.workers_polling).
WORKERS_POLLING_WINDOW_SECONDS = 30
MIN_LEASE_SECONDS = 1

State = WorkItem.State
OPEN = ~Q(state=State.STOPPED)


class HeartbeatPreconditionFailed(ApiError):
    """`expected_last_heartbeat` does not match the stored one: another worker may hold the lease
    (or the item went back to the queue). The details carry the lease as the server holds it."""

    status = 412
    type = "invalid_request_error"
    code = "heartbeat_precondition_failed"


def work_channel(environment_id: str) -> str:
    return f"mango:env-work:{environment_id}"


def _workers_key(environment_id: str) -> str:
    return f"mango:env-workers:{environment_id}"


# --- environment keys ---------------------------------------------------------------------------


def environment_key_issue(*, environment: Environment, name: str = "") -> tuple[EnvironmentKey, str]:
    """Mint a key for a self_hosted `environment`. Returns the row and the raw key, which is never
    stored: the row holds only its SHA-256."""
    if not tool_host(environment.config).client_runs_tools:
        raise InvalidRequest(
            f"Environment {environment.id!r} is not self_hosted: only a self_hosted environment has workers.",
            code="environment_not_self_hosted",
        )
    raw = credentials.environment_key_generate()
    key = EnvironmentKey.objects.create(
        workspace_id=environment.workspace_id,
        environment=environment,
        name=name,
        key_hash=credentials.credential_hash(raw),
        key_hint=raw[: len(credentials.ENVIRONMENT_KEY_PREFIX) + 6],
    )
    return key, raw


def environment_key_create(*, environment_id: str, name: str = "") -> tuple[EnvironmentKey, str]:
    """For the operator (manage.py create_environment_key): the environment by id, any workspace."""
    environment = Environment.objects.filter(id=environment_id).first()
    if environment is None:
        raise NotFound(f"Environment {environment_id!r} not found.", code="environment_not_found")
    return environment_key_issue(environment=environment, name=name)


def environment_key_revoke(*, keys) -> int:
    """Revoke the given keys that are not revoked yet (idempotent); returns how many changed."""
    return keys.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def environment_key_touch(*, key: EnvironmentKey) -> None:
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        EnvironmentKey.objects.filter(pk=key.pk).update(last_used_at=now)


# --- queueing -------------------------------------------------------------------------------------


def _publish_work(environment_id: str) -> None:
    try:
        notify.client().publish(work_channel(environment_id), b"1")
    except redis.RedisError:
        logger.warning("could not publish a work wake-up", extra={"environment_id": environment_id})


def session_work_ensure(*, session: Session) -> bool:
    """Queue a work item for a self_hosted `session` unless one of its is open (the partial unique
    constraint decides, in one statement: concurrent sends queue one item). Called in the
    transaction that creates the session or appends its input; the long polls are woken after
    commit only when an item was queued (a tool result sent while the worker holds the item wakes
    nobody). Returns whether it queued one."""
    if not session.tool_host.client_runs_tools:
        return False
    item = WorkItem(
        workspace_id=session.workspace_id,
        environment_id=session.environment_id,
        session_id=session.id,
        created_at=timezone.now(),
    )
    if not _insert_unless_open(item):
        return False
    environment_id = session.environment_id
    transaction.on_commit(lambda: _publish_work(environment_id))
    return True


def _insert_unless_open(item: WorkItem) -> bool:
    """INSERT … ON CONFLICT DO NOTHING RETURNING: whether the row went in (Django's
    bulk_create(ignore_conflicts=True) cannot tell). Every concrete field, as save() prepares it."""
    fields = WorkItem._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    values = [field.get_db_prep_save(field.pre_save(item, True), connection) for field in fields]
    statement = (
        f"INSERT INTO {connection.ops.quote_name(WorkItem._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT DO NOTHING RETURNING 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
        return cursor.fetchone() is not None


def session_work_stop(*, session_id: str) -> int:
    """A deleted session's open item stops (its worker's next heartbeat says so)."""
    now = timezone.now()
    return WorkItem.objects.filter(OPEN, session_id=session_id).update(
        state=State.STOPPED,
        stopped_at=now,
        stop_requested_at=Coalesce(F("stop_requested_at"), Value(now)),
        lease_expires_at=None,
    )


# --- the worker's calls ----------------------------------------------------------------------------


def worker_polled(*, environment_id: str, worker_id: str) -> None:
    """Remember that `worker_id` polled now (stats.workers_polling); a hint, never raises."""
    if not worker_id:
        return
    now = timezone.now().timestamp()
    try:
        pipe = notify.client().pipeline(transaction=False)
        pipe.zadd(_workers_key(environment_id), {worker_id[:255]: now})
        pipe.zremrangebyscore(_workers_key(environment_id), "-inf", now - WORKERS_POLLING_WINDOW_SECONDS)
        pipe.expire(_workers_key(environment_id), WORKERS_POLLING_WINDOW_SECONDS * 2)
        pipe.execute()
    except redis.RedisError:
        logger.debug("could not record a polling worker", extra={"environment_id": environment_id})


def workers_polling(*, environment_id: str) -> int | None:
    now = timezone.now().timestamp()
    try:
        return notify.client().zcount(_workers_key(environment_id), now - WORKERS_POLLING_WINDOW_SECONDS, "+inf")
    except redis.RedisError:
        return None


def work_claim(*, environment_id: str, worker_id: str = "", reclaim_older_than_ms: int | None = None):
    """One poll: the oldest claimable item of the environment, handed out (or None). Claimable: queued
    and never handed out, handed out but unacknowledged for `reclaim_older_than_ms` (default 5 s),
    or acknowledged but its lease ran out (its worker is gone: the item starts over, so the old
    holder's next heartbeat gets a 412). SKIP LOCKED: concurrent polls take different items. One
    statement (every poll of every worker makes it): the row found and locked, and handed out."""
    now = timezone.now()
    reclaim = timedelta(milliseconds=RECLAIM_DEFAULT_MS if reclaim_older_than_ms is None else reclaim_older_than_ms)
    return returned_row(
        WorkItem,
        sql=_claim_sql(),
        params={
            "environment_id": environment_id,
            "now": now,
            "reclaim_before": now - reclaim,
            "worker_id": worker_id[:255],
            "queued": State.QUEUED.value,
            "leased": [State.STARTING.value, State.ACTIVE.value],
        },
    )


@functools.cache
def _claim_sql() -> str:
    return _CLAIM_SQL.format(table=WorkItem._meta.db_table, columns=columns_of(WorkItem))


_CLAIM_SQL = """
UPDATE {table} SET state = %(queued)s, polled_at = %(now)s, poll_worker_id = %(worker_id)s,
    acknowledged_at = NULL, started_at = NULL, latest_heartbeat_at = NULL, lease_expires_at = NULL,
    lease_ttl_seconds = 0, claims = claims + 1
WHERE id = (
    SELECT id FROM {table}
    WHERE environment_id = %(environment_id)s AND (
        (state = %(queued)s AND (polled_at IS NULL OR polled_at < %(reclaim_before)s))
        OR (state = ANY(%(leased)s) AND lease_expires_at < %(now)s)
    )
    ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
)
RETURNING {columns}
"""


def _locked(*, environment_id: str, work_id: str) -> WorkItem:
    item = WorkItem.objects.select_for_update().filter(id=work_id, environment_id=environment_id).first()
    if item is None:
        raise NotFound(f"Work item {work_id!r} not found.", code="work_not_found")
    return item


@transaction.atomic
def work_ack(*, environment_id: str, work_id: str) -> WorkItem:
    """queued (handed out by a poll) → starting; the lease runs from now. Acknowledging an item
    that is starting and not yet heartbeated answers it as it is: the retry of an ack whose answer
    was lost (the SDK's client retries, and its poller force-stops an item whose ack meets a 4xx).
    A poll hands out only queued items, so that is the poller that holds it; were it a superseded
    one, the first heartbeat decides (NO_HEARTBEAT matches once) and the other gets the 412."""
    item = _locked(environment_id=environment_id, work_id=work_id)
    if item.state == State.STARTING and item.latest_heartbeat_at is None:
        return item
    if item.state != State.QUEUED or item.polled_at is None:
        raise Conflict(f"Work item {work_id!r} is {item.state}, not a polled queued item: it cannot be acknowledged.")
    now = timezone.now()
    item.state = State.STARTING
    item.acknowledged_at = now
    item.lease_ttl_seconds = settings.MANGO_WORK_LEASE_SECONDS
    item.lease_expires_at = now + timedelta(seconds=item.lease_ttl_seconds)
    item.save(update_fields=["state", "acknowledged_at", "lease_ttl_seconds", "lease_expires_at"])
    return item


def lease_state(item: WorkItem) -> dict:
    return {
        "last_heartbeat": rfc3339(item.latest_heartbeat_at),
        "lease_extended": False,
        "state": item.state,
        "ttl_seconds": item.lease_ttl_seconds,
    }


@transaction.atomic
def work_heartbeat(
    *, environment_id: str, work_id: str, desired_ttl_seconds: int | None, expected_last_heartbeat: str | None
) -> dict:
    """Extend the lease, if `expected_last_heartbeat` (when given) is the stored one (`NO_HEARTBEAT`
    for none yet); else 412 with the lease as held. A stopping or stopped item is not compared:
    it answers its state with lease_extended false, which ends the worker's run. An item back in
    the queue (its lease ran out and a poll handed it out again) has no lease to extend: 412."""
    item = _locked(environment_id=environment_id, work_id=work_id)
    if item.state in (State.STOPPING, State.STOPPED):
        return {**lease_state(item), "last_heartbeat": rfc3339(item.latest_heartbeat_at) or ""}
    stored = rfc3339(item.latest_heartbeat_at) or NO_HEARTBEAT
    mismatch = expected_last_heartbeat is not None and expected_last_heartbeat != stored
    if item.state == State.QUEUED or mismatch:
        raise HeartbeatPreconditionFailed(
            "expected_last_heartbeat does not match the stored heartbeat: another worker may hold the lease.",
            details={"current_state": lease_state(item)},
        )
    now = timezone.now()
    ttl = settings.MANGO_WORK_LEASE_SECONDS if desired_ttl_seconds is None else desired_ttl_seconds
    ttl = max(MIN_LEASE_SECONDS, min(ttl, settings.MANGO_WORK_LEASE_MAX_SECONDS))
    fields = ["latest_heartbeat_at", "lease_ttl_seconds", "lease_expires_at"]
    if item.state == State.STARTING:
        item.state, item.started_at = State.ACTIVE, now
        fields += ["state", "started_at"]
    item.latest_heartbeat_at = now
    item.lease_ttl_seconds = ttl
    item.lease_expires_at = now + timedelta(seconds=ttl)
    item.save(update_fields=fields)
    return {"last_heartbeat": rfc3339(now), "lease_extended": True, "state": item.state, "ttl_seconds": ttl}


@transaction.atomic
def work_stop(*, environment_id: str, work_id: str, force: bool) -> WorkItem:
    """Graceful: an acknowledged item goes `stopping` (its worker sees it on its next heartbeat and
    stops it with force when done). Force, or an item no worker acknowledged: `stopped` at once.
    A stopped item is a 409 (the SDK reads it as "already stopped")."""
    item = _locked(environment_id=environment_id, work_id=work_id)
    if item.state == State.STOPPED:
        raise Conflict(f"Work item {work_id!r} is already stopped.")
    now = timezone.now()
    item.stop_requested_at = item.stop_requested_at or now
    if force or item.state == State.QUEUED:
        item.state, item.stopped_at, item.lease_expires_at = State.STOPPED, now, None
    else:
        item.state = State.STOPPING
    item.save(update_fields=["state", "stop_requested_at", "stopped_at", "lease_expires_at"])
    return item


@transaction.atomic
def work_update(*, environment_id: str, work_id: str, metadata: dict) -> WorkItem:
    """The metadata patch: a string upserts its key, null (or "") deletes it."""
    item = _locked(environment_id=environment_id, work_id=work_id)
    item.metadata = metadata_patch_apply(item.metadata, metadata)
    item.save(update_fields=["metadata"])
    return item
