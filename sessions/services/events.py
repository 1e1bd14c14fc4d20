"""The session event log: append-only, ordered by a per-session sequence handed out under a short
row lock on the session (UniqueConstraint(session, seq) backs it up).

A runner's appends are fenced by its lease: while a thread runs a session's turn (`runner_fence`),
every append it makes checks, under the session's row lock, that the session still names that
runner's token, and raises LeaseLost otherwise (its transaction rolls back). A runner presumed
dead whose lease was taken over can therefore never write next to its successor."""

import json
import threading
import time
from contextlib import contextmanager, nullcontext
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.errors import InvalidRequest
from core.ids import new_id
from files.quotas import StorageQuotaExceeded
from sessions import notify
from sessions.dispatch import session_run_enqueue_on_commit
from sessions.events import (
    CONFIRMABLE_TOOL_USE_TYPES,
    RUNNER_INPUT_TYPES,
    USAGE_TOTAL_KEYS,
    EventType,
    primary_thread_id,
    thread_session_id,
)
from sessions.models import Session, SessionEvent
from sessions.queue.services import session_work_ensure
from sessions.selectors import APPEND_FIELDS, session_get
from sessions.services.admission import events_admit
from sessions.signals import session_changed


class LeaseLost(Exception):
    """The runner's lease on the session was taken over: it must stop without writing."""


_fence = threading.local()


@contextmanager
def runner_fence(*, session_id: str, token: str):
    """This thread appends to `session_id` only while the session's runner_token is `token`."""
    previous = getattr(_fence, "value", None)
    _fence.value = (session_id, token)
    try:
        yield
    finally:
        _fence.value = previous


def _fence_check(session: Session) -> None:
    fence = getattr(_fence, "value", None)
    if fence is not None and fence[0] == session.id and session.runner_token != fence[1]:
        raise LeaseLost(session.id)


def events_append_locked(*, session: Session, items: list[dict], also_save: tuple[str, ...] = ()) -> list[SessionEvent]:
    """Append `items` ({type, payload, processed_at?, private?}) to a session whose row the caller
    holds locked (select_for_update) inside a transaction, saving the session's `also_save`
    fields in the same UPDATE. Streams are woken after commit. Raises LeaseLost inside a
    runner_fence whose token the session no longer names."""
    _fence_check(session)
    now = timezone.now()
    payload_bytes, private_bytes = _json_sizes(items)
    rows = []
    for item in items:
        session.last_seq += 1
        rows.append(
            SessionEvent(
                id=item.get("id") or new_id("sevt"),
                session=session,
                seq=session.last_seq,
                type=item["type"],
                payload=item.get("payload", {}),
                private=item.get("private", {}),
                processed_at=item.get("processed_at", now),
                created_at=now,
            )
        )
    SessionEvent.objects.bulk_create(rows)
    session.updated_at = now
    session.event_bytes = F("event_bytes") + payload_bytes + private_bytes
    session.save(update_fields=["last_seq", "updated_at", "event_bytes", *also_save])
    session.__dict__.pop("event_bytes")  # deferred again: a later read loads the new total
    session_id = session.id
    announced = _announced(items)
    if announced and session.primary_id is None:
        _announce(workspace_id=session.workspace_id, session_id=session_id, items=announced)
    transaction.on_commit(lambda: notify.events_committed(session_id, rows, payload_bytes=payload_bytes))
    _crosspost(items)
    return rows


# The event types other apps hear of (sessions.signals.session_changed).
ANNOUNCED_TYPES = frozenset(
    t.value
    for t in (
        EventType.SESSION_STATUS_RUNNING,
        EventType.SESSION_STATUS_IDLE,
        EventType.SESSION_STATUS_RESCHEDULED,
        EventType.SESSION_STATUS_TERMINATED,
        EventType.SESSION_UPDATED,
        EventType.SESSION_DELETED,
        EventType.SESSION_THREAD_CREATED,
        EventType.SESSION_THREAD_STATUS_IDLE,
        EventType.SESSION_THREAD_STATUS_TERMINATED,
        EventType.SPAN_OUTCOME_EVALUATION_END,
    )
)


def _announced(items: list[dict]) -> list[dict]:
    if not session_changed.has_listeners():
        return []
    return [item for item in items if str(item["type"]) in ANNOUNCED_TYPES]


def _announce(*, workspace_id: str, session_id: str, items: list[dict]) -> None:
    """session_changed for each of `items` (announced ones), in the caller's transaction."""
    for item in items:
        session_changed.send(
            sender=Session,
            workspace_id=workspace_id,
            session_id=session_id,
            change=str(item["type"]),
            payload=item.get("payload") or {},
        )


def _crosspost(items: list[dict]) -> None:
    """A child thread's status events (sessions.events.status_item) are copied to its primary's
    log, where clients watching the session see them (the SDK: "cross-posted to the primary
    stream for child threads"). Unfenced (the primary is another runner's), and after commit:
    a transaction holding the child's row lock never waits for the primary's, which the API
    holds while it forwards an interrupt to the children (one lock order, no deadlock). A copy
    lost to a crash in between is only a copy."""
    targets: dict[str, list[dict]] = {}
    for item in items:
        if item.get("crosspost"):
            targets.setdefault(item["crosspost"], []).append({"type": item["type"], "payload": item["payload"]})
    for target, copies in targets.items():
        transaction.on_commit(
            lambda target=target, copies=copies: events_append(session_id=target, items=copies), robust=True
        )


def _json_bytes(value: dict) -> int:
    """What a JSON column stores of `value`, as the event-bytes quota counts it (an empty object
    counts as its two braces, like the backfill in migration 0005). json.dumps escapes to ASCII:
    its length is its size in bytes."""
    return len(json.dumps(value)) if value else 2


def _json_sizes(items: list[dict]) -> tuple[int, int]:
    """(bytes of the items' payloads, bytes of their private parts), each item dumped once."""
    payloads = sum(_json_bytes(item.get("payload", {})) for item in items)
    return payloads, sum(_json_bytes(item.get("private", {})) for item in items)


_USAGE_TTL_SECONDS = 5.0
_usage: dict[str, tuple[float, int]] = {}  # workspace id -> (read at, event bytes), per process


def _workspace_event_bytes(workspace_id: str, *, fresh: bool) -> int:
    """The workspace's event bytes: summed over its sessions when `fresh` or when this process's
    figure is over _USAGE_TTL_SECONDS old, else that figure (plus what it accepted since)."""
    cached = _usage.get(workspace_id)
    if not fresh and cached is not None and time.monotonic() - cached[0] < _USAGE_TTL_SECONDS:
        return cached[1]
    total = Session.objects.filter(workspace_id=workspace_id).aggregate(total=Sum("event_bytes"))["total"] or 0
    if len(_usage) > 10_000:
        _usage.clear()
    _usage[workspace_id] = (time.monotonic(), total)
    return total


def _events_quota_check(*, session: Session, incoming: int) -> None:
    """Refuse client events that would take the workspace's event logs (all its sessions) over
    MANGO_WORKSPACE_EVENTS_MAX_BYTES. A soft quota, cheap per event: the sum over the sessions is
    read at most every few seconds per process and always before refusing; the runner's own
    events are not refused mid-turn (a turn that starts under the quota may end over it, and the
    next client event is refused until the tenant deletes sessions, which purges their logs)."""
    limit = settings.MANGO_WORKSPACE_EVENTS_MAX_BYTES
    if not limit:
        return
    used = _workspace_event_bytes(session.workspace_id, fresh=False)
    if used + incoming > limit:
        used = _workspace_event_bytes(session.workspace_id, fresh=True)
        if used + incoming > limit:
            raise StorageQuotaExceeded(
                f"The workspace's session event storage ({limit} bytes) is used up: {used} bytes stored,"
                f" {incoming} more sent. Delete sessions to free it."
            )
    read_at, _ = _usage[session.workspace_id]
    _usage[session.workspace_id] = (read_at, used + incoming)


def session_events_purge(*, session_id: str) -> None:
    """A deleted session's log is purged but for its final session.deleted (which ends its
    streams), and counts no more against the quota. A runner still appending after this is
    purged by the next sweep (sessions.tasks)."""
    with transaction.atomic():
        Session.objects.select_for_update().filter(id=session_id).values_list("id").first()
        SessionEvent.objects.filter(session_id=session_id).exclude(type=EventType.SESSION_DELETED).delete()
        Session.objects.filter(id=session_id).update(event_bytes=0)


class SessionGone(Exception):
    """events_append(unless_deleted=True) found the session deleted: nothing was appended."""


_USAGE_TOTALS = ", ".join(
    f"'{key}', COALESCE((s.usage ->> '{key}')::bigint, 0) + %(usage_{key})s" for key in USAGE_TOTAL_KEYS
)

_END_TURN = (
    "status = %(idle)s, turn_started_at = NULL, active_seconds = s.active_seconds"
    " + COALESCE(EXTRACT(EPOCH FROM (%(now)s - s.turn_started_at))::float8, 0)"
)

# The runner's append in one statement and one round trip (autocommit): the UPDATE takes the
# session's row lock (the same lock events_append_locked's SELECT FOR UPDATE takes, so appends
# stay ordered with the API's) and hands out the sequence numbers; the INSERT numbers the events
# in the given order. The fence and the deleted check are conditions of the UPDATE: when either
# fails nothing is written, and the caller is told which.
_APPEND_SQL = f"""
WITH s AS (
    UPDATE {Session._meta.db_table} AS s
       SET last_seq = s.last_seq + %(count)s, updated_at = %(now)s,
           event_bytes = s.event_bytes + %(bytes)s, {{usage}}
     WHERE s.id = %(session_id)s {{conditions}}
 RETURNING s.last_seq
), inserted AS (
    INSERT INTO {SessionEvent._meta.db_table} (id, session_id, seq, type, payload, private, processed_at, created_at)
    SELECT e.id, %(session_id)s, s.last_seq - %(count)s + e.n, e.type, e.payload::jsonb, e.private::jsonb,
           %(processed_at)s, %(now)s
      FROM s, unnest(%(ids)s::varchar[], %(types)s::varchar[], %(payloads)s::text[], %(privates)s::text[])
           WITH ORDINALITY AS e(id, type, payload, private, n)
){{processed}}
SELECT last_seq FROM s
"""

# The client events a turn start acts on, marked processed in the same statement (only when the
# session's UPDATE matched: a refused append marks nothing).
_PROCESSED_SQL = f""", processed AS (
    UPDATE {SessionEvent._meta.db_table} AS p SET processed_at = %(now)s
      FROM s WHERE p.session_id = %(session_id)s AND p.id = ANY(%(processed_ids)s::varchar[])
)"""

_START_TURN = "status = %(running)s, turn_started_at = COALESCE(s.turn_started_at, %(now)s)"


def events_append(
    *,
    session_id: str,
    items: list[dict],
    usage: dict | None = None,
    unless_deleted: bool = False,
    end_turn: bool = False,
    start_turn: bool = False,
    processed_ids: list[str] | tuple = (),
    pending: bool = False,
) -> list[SessionEvent]:
    """Append server `items` ({type, payload, id?, private?}, processed now) in one statement,
    without the ORM's locked read of the session; `usage` ({key: tokens}) is added to the
    session's totals in the same UPDATE, and with end_turn the session goes idle there too (the
    turn's time added to active_seconds); with start_turn it is running (its turn started now
    unless one had started), and the client events `processed_ids` are marked processed in the
    same statement; with pending the events are the client's, for the runner to process (not
    processed). Fenced like events_append_locked (LeaseLost);
    with unless_deleted, raises SessionGone instead of appending to a deleted session. Streams
    are woken after commit. Returns the appended events (not read back)."""
    fence = getattr(_fence, "value", None)
    token = fence[1] if fence is not None and fence[0] == session_id else None
    now = timezone.now()
    rows = [
        SessionEvent(
            id=item.get("id") or new_id("sevt"),
            session_id=session_id,
            type=item["type"],
            payload=item.get("payload") or {},
            private=item.get("private") or {},
            processed_at=None if pending else now,
            created_at=now,
        )
        for item in items
    ]
    params = {
        "session_id": session_id,
        "count": len(rows),
        "now": now,
        "processed_at": None if pending else now,
        "token": token,
        "ids": [row.id for row in rows],
        "types": [row.type for row in rows],
        "payloads": [json.dumps(row.payload) for row in rows],
        "privates": [json.dumps(row.private) for row in rows],
    }
    # As _json_bytes counts them (an empty object dumps to its two braces; ASCII: len is bytes).
    payload_bytes = sum(map(len, params["payloads"]))
    params["bytes"] = payload_bytes + sum(map(len, params["privates"]))
    statement = _append_statement(
        params,
        fenced=token is not None,
        unless_deleted=unless_deleted,
        usage=usage,
        end_turn=end_turn,
        start_turn=start_turn,
        processed_ids=list(processed_ids),
    )
    announced = _announced(items)
    # Announced changes commit with what listeners write of them (one transaction).
    with transaction.atomic() if announced else nullcontext():
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            found = cursor.fetchone()
        if found is None:
            _append_refused(session_id=session_id, token=token, unless_deleted=unless_deleted)
        if announced:
            owner = Session.objects.filter(id=session_id).values_list("workspace_id", "primary_id").first()
            if owner is not None and owner[1] is None:
                _announce(workspace_id=owner[0], session_id=session_id, items=announced)
    last_seq = found[0]
    for offset, row in enumerate(rows):
        row.seq = last_seq - len(rows) + offset + 1
    transaction.on_commit(lambda: notify.events_committed(session_id, rows, payload_bytes=payload_bytes))
    _crosspost(items)
    return rows


def _append_statement(
    params: dict,
    *,
    fenced: bool,
    unless_deleted: bool,
    usage: dict | None,
    end_turn: bool,
    start_turn: bool = False,
    processed_ids: list[str] | None = None,
) -> str:
    """_APPEND_SQL with the fence and deleted conditions, the usage totals, the start or end of
    the turn and the events marked processed it needs (their values added to `params`)."""
    conditions = ("AND s.runner_token = %(token)s " if fenced else "") + (
        "AND s.deleted_at IS NULL" if unless_deleted else ""
    )
    assignments = ["usage = s.usage"]
    if usage is not None:
        assignments = [f"usage = COALESCE(s.usage, '{{}}'::jsonb) || jsonb_build_object({_USAGE_TOTALS})"]
        params.update({f"usage_{key}": int(usage.get(key) or 0) for key in USAGE_TOTAL_KEYS})
    if end_turn:
        assignments.append(_END_TURN)
        params["idle"] = Session.Status.IDLE.value
    if start_turn:
        assignments.append(_START_TURN)
        params["running"] = Session.Status.RUNNING.value
    processed = ""
    if processed_ids:
        processed = _PROCESSED_SQL
        params["processed_ids"] = processed_ids
    return _APPEND_SQL.format(usage=", ".join(assignments), conditions=conditions, processed=processed)


def _append_refused(*, session_id: str, token: str | None, unless_deleted: bool) -> None:
    """Why events_append wrote nothing: the session is deleted (SessionGone), another runner
    holds it (LeaseLost), or it does not exist."""
    state = Session.objects.filter(id=session_id).values_list("runner_token", "deleted_at").first()
    if state is None:
        raise Session.DoesNotExist(session_id)
    if unless_deleted and state[1] is not None:
        raise SessionGone(session_id)
    raise LeaseLost(session_id)


def session_event_append(
    *, session_id: str, type: str, payload: dict | None = None, private: dict | None = None
) -> SessionEvent:
    """Append one server event (processed now). Used by the runner."""
    return events_append(
        session_id=session_id, items=[{"type": type, "payload": payload or {}, "private": private or {}}]
    )[0]


_REFERENCED_SQL = (
    f"SELECT id, type FROM {SessionEvent._meta.db_table} WHERE session_id = %s AND id = ANY(%s::varchar[])"
)


def _validate_references(*, session: Session, parsed: list[dict]) -> None:
    """Tool results and confirmations must answer a tool use of this session; an interrupt may
    name only this session's thread (its primary one: there are no others to interrupt alone)."""
    wanted = {}
    for item in parsed:
        payload = item["payload"]
        thread_id = payload.get("session_thread_id") if item["type"] == EventType.USER_INTERRUPT else None
        named = thread_id is not None and thread_id != primary_thread_id(session.id)
        if named and not _child_thread(session, thread_id):
            raise InvalidRequest(f"session_thread_id: no thread {thread_id!r} in this session.")
        if item["type"] == EventType.USER_CUSTOM_TOOL_RESULT:
            wanted[payload["custom_tool_use_id"]] = (EventType.AGENT_CUSTOM_TOOL_USE.value,)
        elif item["type"] == EventType.USER_TOOL_RESULT:
            wanted[payload["tool_use_id"]] = (EventType.AGENT_TOOL_USE.value,)
        elif item["type"] == EventType.USER_TOOL_CONFIRMATION:
            wanted[payload["tool_use_id"]] = CONFIRMABLE_TOOL_USE_TYPES
    if not wanted:
        return
    with connection.cursor() as cursor:  # by primary key, hand-written: every tool result sends this
        cursor.execute(_REFERENCED_SQL, [session.id, list(wanted)])
        found = dict(cursor.fetchall())
    for event_id, types in wanted.items():
        if found.get(event_id) not in types:
            raise InvalidRequest(f"No {' or '.join(types)} event {event_id!r} in this session.")


def _child_thread(session: Session, thread_id: str) -> bool:
    """Whether `thread_id` is a live child thread of the (primary) session."""
    return Session.objects.filter(
        id=thread_session_id(thread_id), primary_id=session.id, deleted_at__isnull=True
    ).exists()


def _interrupt_threads(*, session: Session, interrupt: SessionEvent) -> bool:
    """A user.interrupt sent to a multiagent session reaches its child threads: every one that
    is not archived when it names no thread, else the one it names (then the primary is not
    interrupted: the event is marked processed on its log). Each child gets the interrupt as
    input of its own and its flag. Returns whether the primary is interrupted."""
    target = interrupt.payload.get("session_thread_id")
    children = Session.objects.filter(primary_id=session.id, deleted_at__isnull=True, archived_at__isnull=True)
    if target is not None and target != primary_thread_id(session.id):
        children = children.filter(id=thread_session_id(target))
    for child_id in children.values_list("id", flat=True):
        child_interrupt = {"type": EventType.USER_INTERRUPT, "payload": {"session_thread_id": None}}
        events_append(session_id=child_id, items=[child_interrupt], pending=True)
        transaction.on_commit(lambda child_id=child_id: notify.set_interrupt(child_id))
    if target is not None and target != primary_thread_id(session.id):
        SessionEvent.objects.filter(id=interrupt.id).update(processed_at=timezone.now())
        return False
    return True


def session_runner_wake_on_commit(*, session: Session) -> None:
    """New input for a session whose row the caller holds locked: its runner, if one holds the
    lease, takes it before it lets the session go (the flag wakes it if it waits); else a task."""
    session_id = session.id
    if _runner_holds(session):
        transaction.on_commit(lambda: notify.set_input(session_id))
    else:
        session_run_enqueue_on_commit(session_id=session_id)


def user_events_append_locked(*, session: Session, parsed: list[dict]) -> list[SessionEvent]:
    """Append client events (already parsed) and wake the runner after commit."""
    if session.status == Session.Status.TERMINATED:
        raise InvalidRequest("The session is terminated and accepts no more events.")
    _validate_references(session=session, parsed=parsed)
    items = []
    for item in parsed:
        payload = dict(item["payload"])
        if item["type"] == EventType.USER_DEFINE_OUTCOME:
            payload["outcome_id"] = new_id("outc")
        items.append({"type": item["type"], "payload": payload, "private": item.get("private") or {}})
    _events_quota_check(session=session, incoming=sum(_json_sizes(items)))
    # One statement (the row lock is held): the events and the session's sequence and bytes.
    rows = events_append(session_id=session.id, items=items, pending=True)
    session.last_seq, session.updated_at = rows[-1].seq, rows[-1].created_at
    session_id = session.id
    interrupts = [row for row in rows if row.type == EventType.USER_INTERRUPT]
    if any([_interrupt_threads(session=session, interrupt=row) for row in interrupts]):
        transaction.on_commit(lambda: notify.set_interrupt(session_id))
    if any(item["type"] in RUNNER_INPUT_TYPES for item in parsed):
        # Its runner reads the log under this lock before it lets the session go: it takes
        # this input (a task would find the lease held and end); the flag wakes it if it
        # waits for the client (sessions.runtime.turn, Runner.linger).
        session_runner_wake_on_commit(session=session)
        # A self_hosted session given input needs a worker for its tools: a work item, unless open.
        session_work_ensure(session=session)
    return rows


def _runner_holds(session: Session) -> bool:
    """Whether a live runner holds the session's lease (the caller holds the row lock)."""
    if session.runner_token is None or session.runner_heartbeat_at is None:
        return False
    stale = timezone.now() - timedelta(seconds=settings.MANGO_SESSION_LEASE_SECONDS)
    return session.runner_heartbeat_at >= stale


def session_events_send(
    *, workspace, session_id: str, parsed: list[dict], session_only: bool = False
) -> list[SessionEvent]:
    """POST /v1/sessions/{id}/events. File references are admitted first (object reads, outside
    any transaction); then the events are committed together, before any worker sees them.
    A rejected File commits nothing. `session_only`: sent with the session's work token, whose
    events may name only the Files the session can see (never the rest of the workspace's)."""
    admitted, media = events_admit(
        workspace=workspace,
        parsed=parsed,
        session_id=session_id,
        session_only=session_only,
        # A missing session is a 404 before any File is read (events without Files skip the query).
        before_lookup=lambda: session_get(workspace=workspace, session_id=session_id),
    )
    try:
        with transaction.atomic():
            session = session_get(workspace=workspace, session_id=session_id, for_update=True, fields=APPEND_FIELDS)
            if session.archived_at is not None:
                raise InvalidRequest("The session is archived and accepts no more events.")
            return user_events_append_locked(session=session, parsed=admitted)
    except BaseException:
        media.discard()  # the PDFs and images copied for events that never committed
        raise
