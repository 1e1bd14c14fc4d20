"""Client events (POST /v1/sessions/{id}/events): references checked against the session's log,
the event-log quota, interrupts that reach a multiagent session's threads, and the runner woken
after the commit (or a task, or a self-hosted work item)."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import InvalidRequest
from core.ids import new_id
from sessions import notify
from sessions.dispatch import session_run_enqueue_on_commit
from sessions.events import (
    CLIENT_ANSWER_TYPES,
    CONFIRMABLE_TOOL_USE_TYPES,
    RUNNER_INPUT_TYPES,
    EventType,
    primary_thread_id,
    thread_id_of,
    thread_session_id,
    tool_use_id_of,
)
from sessions.models import Session, SessionEvent
from sessions.queue.services import session_work_ensure
from sessions.selectors import APPEND_FIELDS, session_get
from sessions.services.admission import events_admit
from sessions.services.announce import announce_change
from sessions.services.event_bytes import events_quota_check, json_sizes
from sessions.services.events import events_append
from sessions.thread_events import THREAD_COPY

_REFERENCED_SQL = (
    "SELECT e.id, e.type, COALESCE(e.private->>'thread_copy', e.session_id), e.private->>'thread_event'"
    f" FROM {SessionEvent._meta.db_table} e"
    " WHERE e.id = ANY(%s::varchar[]) AND (e.session_id = %s OR e.session_id IN"
    f" (SELECT c.id FROM {Session._meta.db_table} c WHERE c.primary_id = %s))"
)


@dataclass
class _Route:
    """A client's answer to a child thread's tool use, sent to the session: recorded on the
    primary's log (processed: the primary's runner takes no input of it) naming the copy there,
    and given to the thread as its input naming the thread's own event."""

    thread_session_id: str
    thread_event_id: str


def _validate_references(*, session: Session, parsed: list[dict]) -> dict[str, _Route]:
    """Tool results and confirmations must answer a tool use of this session or of one of its
    child threads (then routed to it: returned by the id answered); an interrupt may name only
    this session's threads."""
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
        return {}
    with connection.cursor() as cursor:  # by primary key, hand-written: every tool result sends this
        cursor.execute(_REFERENCED_SQL, [list(wanted), session.id, session.id])
        found = {event_id: (kind, owner, original) for event_id, kind, owner, original in cursor.fetchall()}
    routes = {}
    for event_id, types in wanted.items():
        kind, owner, original = found.get(event_id, (None, None, None))
        if kind not in types:
            raise InvalidRequest(f"No {' or '.join(types)} event {event_id!r} in this session.")
        if owner != session.id:  # a child thread's tool use (its own, or its copy on this log)
            routes[event_id] = _Route(thread_session_id=owner, thread_event_id=original or event_id)
    return routes


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
    routes = _validate_references(session=session, parsed=parsed)
    items, routed = [], []
    for item in parsed:
        payload = dict(item["payload"])
        if item["type"] == EventType.USER_DEFINE_OUTCOME:
            payload["outcome_id"] = new_id("outc")
        entry = {"type": item["type"], "payload": payload, "private": item.get("private") or {}}
        answers = tool_use_id_of(payload) if item["type"] in CLIENT_ANSWER_TYPES else None
        (routed if answers in routes else items).append(entry)
    events_quota_check(session=session, incoming=sum(json_sizes(items + routed)))
    # One statement (the row lock is held): the events and the session's sequence and bytes.
    rows = events_append(session_id=session.id, items=items, pending=True) if items else []
    if routed:
        rows += _answers_route(session=session, entries=routed, routes=routes)
    session.last_seq, session.updated_at = rows[-1].seq, rows[-1].created_at
    session_id = session.id
    interrupts = [row for row in rows if row.type == EventType.USER_INTERRUPT]
    if any([_interrupt_threads(session=session, interrupt=row) for row in interrupts]):
        transaction.on_commit(lambda: notify.set_interrupt(session_id))
    if any(item["type"] in RUNNER_INPUT_TYPES for item in items):
        if session.status == Session.Status.IDLE:  # a client's: a primary session (session_get)
            # Input waits for a run (webhooks: session.pending), in this transaction.
            announce_change(workspace_id=session.workspace_id, session_id=session_id, change="session.pending")
        # Its runner reads the log under this lock before it lets the session go: it takes
        # this input (a task would find the lease held and end); the flag wakes it if it
        # waits for the client (sessions.runtime.turn, Runner.linger).
        session_runner_wake_on_commit(session=session)
        # A self_hosted session given input needs a worker for its tools: a work item, unless open.
        session_work_ensure(session=session)
    return rows


def _answers_route(*, session: Session, entries: list[dict], routes: dict[str, _Route]) -> list[SessionEvent]:
    """The client's answers to its child threads' tool uses: each thread is given its answers as
    input (naming its own tool use; its row locked after the primary's, the one lock order) and
    woken; the primary's log records them as sent, processed (sessions.selectors.runner counts
    an answer to a thread's own id as one to its copy there too). Both carry
    session_thread_id (the SDK: "set by the server to the subagent thread this result was routed
    to"). Returns the primary's records."""
    by_thread: dict[str, list[dict]] = {}
    records = []
    for entry in entries:
        route = routes[tool_use_id_of(entry["payload"])]
        key = "custom_tool_use_id" if entry["type"] == EventType.USER_CUSTOM_TOOL_RESULT else "tool_use_id"
        named = {"session_thread_id": thread_id_of(route.thread_session_id)}
        given = {**entry["payload"], key: route.thread_event_id, **named}
        by_thread.setdefault(route.thread_session_id, []).append({**entry, "payload": given})
        recorded = {**entry["payload"], **named}  # as sent: the copy's id or the thread's own
        records.append(
            {**entry, "payload": recorded, "private": {**entry["private"], THREAD_COPY: route.thread_session_id}}
        )
    for thread_session, given in sorted(by_thread.items()):
        thread = Session.objects.select_for_update().filter(id=thread_session, deleted_at__isnull=True).first()
        if thread is None or thread.archived_at is not None or thread.status == Session.Status.TERMINATED:
            raise InvalidRequest(
                f"session_thread_id: thread {thread_id_of(thread_session)!r} is archived and accepts no more answers."
            )
        events_append(session_id=thread.id, items=given, pending=True)
        session_runner_wake_on_commit(session=thread)
    return events_append(session_id=session.id, items=records)


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
