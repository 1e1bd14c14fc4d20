"""The session event log: append-only, ordered by a per-session sequence handed out under a short
row lock on the session (UniqueConstraint(session, seq) backs it up).

A runner's appends are fenced by its lease: while a thread runs a session's turn (`runner_fence`),
every append it makes checks, under the session's row lock, that the session still names that
runner's token, and raises LeaseLost otherwise (its transaction rolls back). A runner presumed
dead whose lease was taken over can therefore never write next to its successor."""

import json
import threading
from contextlib import contextmanager, nullcontext

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from core.crashpoints import crash_point
from core.ids import new_id
from sessions import notify
from sessions.events import USAGE_TOTAL_KEYS, EventType
from sessions.models import Session, SessionEvent
from sessions.services.announce import announce, announced_by_id, announced_items
from sessions.services.event_bytes import json_sizes
from sessions.thread_events import THREAD_COPY


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
    payload_bytes, private_bytes = json_sizes(items)
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
    if session.primary_id is None and (announced := announced_items(items, workspace_id=session.workspace_id)):
        announce(workspace_id=session.workspace_id, session_id=session_id, items=announced)
    transaction.on_commit(lambda: notify.events_committed(session_id, rows, payload_bytes=payload_bytes))
    _crosspost(items)
    return rows


def _crosspost_append(target: str, copies: list[dict]) -> None:
    if any(THREAD_COPY in copy.get("private", {}) for copy in copies):
        crash_point("thread_tool_use_crosspost")  # the thread's commit done, its copies not yet
    else:
        crash_point("thread_status_crosspost")  # a thread's status committed, its copy not yet
    events_append(session_id=target, items=copies)


def _crosspost(items: list[dict]) -> None:
    """A child thread's status events (sessions.thread_events.status_item) and the tool uses it hands
    its client (sessions.thread_events.crosspost_tool_use) are copied to its primary's log, where
    clients watching the session see them (the SDK: "cross-posted to the primary stream for
    child threads"; an item's crosspost_copy overrides the copy's id, payload or private).
    Unfenced (the primary is another runner's), and after commit: a transaction holding the
    child's row lock never waits for the primary's, which the API holds while it forwards an
    interrupt or a tool answer to the children (one lock order, no deadlock). A copy lost to a
    crash in between is only a copy: a thread's tool use is still on its own log (and stream),
    where the client may answer it by its own id, and the coordinator's runner appends a lost
    tool-use copy before its idle lists it (services.threads.thread_copies_ensure)."""
    targets: dict[str, list[dict]] = {}
    for item in items:
        if item.get("crosspost"):
            copy = {"type": item["type"], "payload": item["payload"], **item.get("crosspost_copy", {})}
            targets.setdefault(item["crosspost"], []).append(copy)
    for target, copies in targets.items():
        transaction.on_commit(lambda target=target, copies=copies: _crosspost_append(target, copies), robust=True)


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
    # As event_bytes counts them (an empty object dumps to its two braces; ASCII: len is bytes).
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
    announced, workspace_id = announced_by_id(session_id=session_id, items=items)
    # Announced changes commit with what listeners write of them (one transaction).
    with transaction.atomic() if announced else nullcontext():
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            found = cursor.fetchone()
        if found is None:
            _append_refused(session_id=session_id, token=token, unless_deleted=unless_deleted)
        if announced:
            announce(workspace_id=workspace_id, session_id=session_id, items=announced)
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
