"""Reads. Every lookup is scoped to the caller's workspace: a foreign id is the same not-found
as a missing one (one access gate per resource)."""

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from core.errors import InvalidRequest, NotFound
from core.lookups import row_or_not_found
from core.pagination import in_range, keyset_page, rendered_bytes
from sessions.events import TERMINAL_RESULTS, EventType, thread_id_of, thread_session_id
from sessions.models import Session, SessionEvent, SessionMemoryStore, SessionResource

# What appending client events reads of the session it locks (services.user_events): its JSON
# snapshots (agent, environment) are neither needed nor decoded there.
# environment_config: a self_hosted session's input may queue a work item (sessions.queue.services).
APPEND_FIELDS = (
    "id",
    "workspace_id",
    "status",
    "archived_at",
    "last_seq",
    "runner_token",
    "runner_heartbeat_at",
    "updated_at",
    "environment_id",
    "environment_config",
)


def session_get(*, workspace, session_id: str, for_update: bool = False, fields: tuple[str, ...] = ()) -> Session:
    """The only way API code obtains a Session. Deleted sessions are gone for every route.
    `fields`: load only these columns (the others are deferred)."""
    if fields:  # the event appends' read (APPEND_FIELDS): one hand-written statement
        return row_or_not_found(
            Session,
            where="t.workspace_id = %s AND t.id = %s AND t.deleted_at IS NULL AND t.primary_id IS NULL",
            params=[getattr(workspace, "pk", workspace), session_id],
            fields=fields,
            for_update=for_update,
            missing=NotFound(f"Session {session_id!r} not found."),
        )
    queryset = Session.objects.filter(workspace=workspace, id=session_id, deleted_at__isnull=True, primary__isnull=True)
    if for_update:
        queryset = queryset.select_for_update()
    if fields:
        queryset = queryset.only(*fields)
    # By primary key: at most one row, so no ORDER BY (.first() would compile and send one).
    session = next(iter(queryset[:1]), None)
    if session is None:
        raise NotFound(f"Session {session_id!r} not found.")
    return session


def session_list(
    *,
    workspace,
    limit: int,
    page: str | None,
    order: str,
    include_archived: bool,
    statuses: list[str],
    agent_id: str | None,
    agent_version: int | None,
    created: dict,
    deployment_id: str | None = None,
    memory_store_id: str | None = None,
):
    """A multiagent session's child threads are not sessions of their own (session_threads)."""
    queryset = Session.objects.filter(workspace=workspace, deleted_at__isnull=True, primary__isnull=True)
    if deployment_id:
        queryset = queryset.filter(deployment_id=deployment_id)
    if memory_store_id:
        queryset = queryset.filter(memory_stores__memory_store_id=memory_store_id)
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    if statuses:
        queryset = queryset.filter(status__in=statuses)
    if agent_id:
        queryset = queryset.filter(agent_id=agent_id)
        if agent_version is not None:
            queryset = queryset.filter(agent_version=agent_version)
    elif agent_version is not None:
        raise InvalidRequest("agent_version: only together with agent_id.")
    queryset = in_range(queryset, "created_at", created)
    return keyset_page(
        queryset,
        key="id",
        descending=order == "desc",
        limit=limit,
        page=page,
        purpose="sessions",
        size=rendered_bytes("agent_snapshot", "metadata", "title"),
    )


def session_event_list(
    *, session: Session, limit: int, page: str | None, order: str, types: list[str], processed: dict
):
    queryset = SessionEvent.objects.filter(session=session)
    if types:
        queryset = queryset.filter(type__in=types)
    queryset = in_range(queryset, "processed_at", processed)
    rows, next_page, _ = keyset_page(
        queryset,
        key="seq",
        descending=order == "desc",
        limit=limit,
        page=page,
        purpose="events",
        integer_key=True,
        size=rendered_bytes("payload"),
    )
    return rows, next_page


class StreamedEvent(NamedTuple):
    """What an SSE stream sends of an event (event_to_wire reads these; `private` is not read)."""

    seq: int
    id: str
    type: str
    payload: dict
    processed_at: datetime | None
    created_at: datetime


def _events_after_many_sql() -> str:
    table, quote = SessionEvent._meta.db_table, connection.ops.quote_name
    columns = ", ".join(f"e.{quote(name)}" for name in StreamedEvent._fields)
    return (
        f"SELECT w.n, {columns} FROM unnest(%s::varchar[], %s::bigint[]) WITH ORDINALITY AS w(session_id, after, n) "
        f"CROSS JOIN LATERAL (SELECT * FROM {quote(table)} WHERE session_id = w.session_id AND seq > w.after "
        "ORDER BY seq LIMIT %s) e ORDER BY w.n, e.seq"
    )


def session_events_after_many(*, wants: list[tuple[str, int]], limit: int = 500) -> list[list[StreamedEvent]]:
    """For each (session id, after seq) of `wants`: the events appended after that seq, oldest
    first, at most `limit` — what the SSE streams of those sessions send next. One hand-written
    query for all of them (the streams of a process read together; compiling a queryset per
    session cost more CPU than the read)."""
    found: list[list[StreamedEvent]] = [[] for _ in wants]
    if not wants:
        return found
    session_ids, afters = [w[0] for w in wants], [w[1] for w in wants]
    with connection.cursor() as cursor:
        cursor.execute(_events_after_many_sql(), [session_ids, afters, limit])
        rows = cursor.fetchall()
    for n, seq, event_id, event_type, payload, processed_at, created_at in rows:
        payload = json.loads(payload) if isinstance(payload, str) else payload
        found[n - 1].append(StreamedEvent(seq, event_id, event_type, payload, processed_at, created_at))
    return found


@dataclass(frozen=True)
class SessionParts:
    """Which of the sessions have resources, attached memory stores and outcome events."""

    resources: frozenset[str]
    memory_stores: frozenset[str]
    outcomes: frozenset[str]


_OUTCOME_TYPES = (
    EventType.USER_DEFINE_OUTCOME.value,
    EventType.SPAN_OUTCOME_EVALUATION_START.value,
    EventType.SPAN_OUTCOME_EVALUATION_END.value,
)


@functools.cache
def _parts_sql() -> str:
    return (
        "SELECT s.id,"
        f" EXISTS (SELECT 1 FROM {SessionResource._meta.db_table} r WHERE r.session_id = s.id),"
        f" EXISTS (SELECT 1 FROM {SessionMemoryStore._meta.db_table} m WHERE m.session_id = s.id),"
        f" EXISTS (SELECT 1 FROM {SessionEvent._meta.db_table} e WHERE e.session_id = s.id AND e.type = ANY(%s))"
        " FROM unnest(%s::varchar[]) AS s(id)"
    )


def session_parts(*, session_ids: list[str]) -> SessionParts:
    """One statement: which sessions have any of the parts a session's wire shape lists, so the
    reads of those parts run only for the sessions that have some (most have none: a created or
    retrieved session then costs one statement instead of three)."""
    if not session_ids:
        return SessionParts(frozenset(), frozenset(), frozenset())
    with connection.cursor() as cursor:
        cursor.execute(_parts_sql(), [list(_OUTCOME_TYPES), list(session_ids)])
        rows = cursor.fetchall()
    return SessionParts(
        resources=frozenset(row[0] for row in rows if row[1]),
        memory_stores=frozenset(row[0] for row in rows if row[2]),
        outcomes=frozenset(row[0] for row in rows if row[3]),
    )


def session_visible_file_ids(*, session_id: str) -> set[str]:
    """The Files a session was given as resources (the client's and the session's copy of each):
    with the Files scoped to the session, all it can see (admission on its work token's behalf)."""
    rows = SessionResource.objects.filter(session_id=session_id, type=SessionResource.Type.FILE)
    return {file_id for pair in rows.values_list("source_file_id", "file_id") for file_id in pair if file_id}


def session_resources_by_session(*, session_ids: list[str]) -> dict[str, list[SessionResource]]:
    """Each session's resources, oldest first, for many sessions in one query."""
    grouped: dict[str, list[SessionResource]] = {session_id: [] for session_id in session_ids}
    if not session_ids:
        return grouped
    for row in SessionResource.objects.filter(session_id__in=session_ids).order_by("id"):
        grouped[row.session_id].append(row)
    return grouped


def session_resource_page(*, session: Session, limit: int | None, page: str | None):
    """Resources oldest first; all of them when no limit is given."""
    queryset = SessionResource.objects.filter(session=session)
    if limit is None and not page:
        return list(queryset.order_by("id")), None
    rows, next_page, _ = keyset_page(
        queryset, key="id", descending=False, limit=limit or 1000, page=page, purpose="resources"
    )
    return rows, next_page


def session_threads(*, session: Session) -> list[Session]:
    """A session's threads: the primary (the session itself), then its child threads (session
    rows of their own) in the order they were spawned."""
    return [session, *Session.objects.filter(primary=session, deleted_at__isnull=True).order_by("created_at", "id")]


def session_thread_get(*, session: Session, thread_id: str) -> Session:
    """The session row that runs `thread_id` of `session` (the session itself for its primary
    thread): the only way a route reaches a child thread. Another session's thread is not found."""
    if thread_id == thread_id_of(session.id):
        return session
    child = Session.objects.filter(id=thread_session_id(thread_id), primary=session, deleted_at__isnull=True).first()
    if child is None:
        raise NotFound(f"Thread {thread_id!r} not found.")
    return child


def session_family_usage(*, session: Session) -> tuple[dict, float]:
    """The usage totals and active seconds of a session and all its child threads (what the
    session's usage and stats show, and what its budget is held against)."""
    totals, active = dict(session.usage or {}), session.active_seconds
    if not (session.agent_snapshot or {}).get("multiagent"):
        return totals, active
    for usage, seconds in Session.objects.filter(primary=session).values_list("usage", "active_seconds"):
        for key, value in (usage or {}).items():
            totals[key] = int(totals.get(key) or 0) + int(value or 0)
        active += seconds
    return totals, active


def session_first_running_at(*, session_id: str) -> datetime | None:
    """When the thread's first turn started (its first session.status_running, or a child
    thread's first session.thread_status_running), or None."""
    return (
        SessionEvent.objects.filter(
            session_id=session_id,
            type__in=(EventType.SESSION_STATUS_RUNNING, EventType.SESSION_THREAD_STATUS_RUNNING),
        )
        .order_by("seq")
        .values_list("created_at", flat=True)
        .first()
    )


def session_outcome_evaluations(*, session_ids: list[str]) -> dict[str, list[dict]]:
    """Each session's `outcome_evaluations` (one entry per outcome, newest state), for many
    sessions in one query."""
    entries: dict[str, dict[str, dict]] = {session_id: {} for session_id in session_ids}
    if not session_ids:
        return {}
    events = SessionEvent.objects.filter(session_id__in=session_ids, type__in=_OUTCOME_TYPES).order_by(
        "session_id", "seq"
    )
    for event in events:
        payload = event.payload
        outcomes = entries[event.session_id]
        if event.type == EventType.USER_DEFINE_OUTCOME:
            outcomes[payload["outcome_id"]] = {
                "type": "outcome_evaluation",
                "outcome_id": payload["outcome_id"],
                "description": payload.get("description", ""),
                "iteration": 0,
                "result": "running" if event.processed_at else "pending",
                "explanation": None,
                "completed_at": None,
            }
            continue
        entry = outcomes.get(payload.get("outcome_id"))
        if entry is None:
            continue
        entry["iteration"] = payload.get("iteration", 0)
        if event.type == EventType.SPAN_OUTCOME_EVALUATION_START:
            entry["result"] = "evaluating"
        else:
            result = payload.get("result")
            entry["explanation"] = payload.get("explanation")
            entry["result"] = result if result in TERMINAL_RESULTS else "running"
            if result in TERMINAL_RESULTS:
                entry["completed_at"] = event.processed_at
    return {session_id: list(outcomes.values()) for session_id, outcomes in entries.items()}


def session_memory_stores(*, session: Session) -> list[SessionMemoryStore]:
    """The memory stores attached to `session`, in the order they were given (no query for a
    session created without any)."""
    if not session.memory_store_count:
        return []
    return list(SessionMemoryStore.objects.filter(session=session).order_by("position"))


def session_memory_stores_by_session(*, session_ids: list[str]) -> dict[str, list[SessionMemoryStore]]:
    found: dict[str, list[SessionMemoryStore]] = {session_id: [] for session_id in session_ids}
    if not session_ids:
        return found
    for row in SessionMemoryStore.objects.filter(session_id__in=session_ids).order_by("session_id", "position"):
        found[row.session_id].append(row)
    return found


def session_memory_store_get(*, pk: int) -> SessionMemoryStore:
    return SessionMemoryStore.objects.get(pk=pk)
