"""The runtime's reads of its own sessions (it holds their lease, so no workspace gate): pending
input, tool uses and answers, outcomes, the conversation. Statement-lean: the runner asks some of
these before every model call or tool call."""

import functools
import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Exists, OuterRef, Q

from core.lookups import columns_of
from sessions.events import (
    CLIENT_ANSWER_TYPES,
    CONFIRMABLE_TOOL_USE_TYPES,
    CONVERSATION_TYPES,
    RUNNER_INPUT_TYPES,
    TOOL_RESULT_TYPES,
    EventType,
    required_action_ids,
    tool_use_id_of,
)
from sessions.models import Session, SessionEvent, SessionResource


def session_workspace_id(*, session_id: str) -> str | None:
    """The workspace of a session (deleted or not); None for an unknown id."""
    return Session.objects.filter(id=session_id).values_list("workspace_id", flat=True).first()


def session_by_id(*, session_id: str) -> Session:
    """The runner's read of its own session (no workspace: the runner holds its lease)."""
    return Session.objects.get(id=session_id)


def session_is_deleted(*, session_id: str) -> bool:
    """Whether the session was deleted (a running turn stops and logs nothing more)."""
    return Session.objects.filter(id=session_id, deleted_at__isnull=False).exists()


def session_interrupt_pending(*, session_id: str) -> bool:
    """Whether a user.interrupt awaits the runner (confirms the Redis flag)."""
    return SessionEvent.objects.filter(
        session_id=session_id, type=EventType.USER_INTERRUPT, processed_at__isnull=True
    ).exists()


def session_pending_input(*, session_id: str) -> list[SessionEvent]:
    """Client events the runner has not yet acted on, oldest first. Written out (every turn start
    reads it under the session's lock): compiling the queryset cost more than the read."""
    return list(SessionEvent.objects.raw(_pending_sql(), [session_id, list(RUNNER_INPUT_TYPES)]))


@functools.cache
def _pending_sql() -> str:
    return (
        f"SELECT {columns_of(SessionEvent)} FROM {SessionEvent._meta.db_table}"
        " WHERE session_id = %s AND processed_at IS NULL AND type = ANY(%s) ORDER BY seq"
    )


def session_answered_tool_use_ids(*, session_id: str, types=TOOL_RESULT_TYPES) -> set[str]:
    """Ids of the tool uses that events of `types` answer."""
    rows = SessionEvent.objects.filter(session_id=session_id, type__in=types).only("payload")
    return {tool_use_id_of(event.payload) for event in rows}


def session_required_action_ids(*, session_id: str, child: bool = False) -> list[str]:
    """The tool uses the last session.status_idle (a `child` thread's: session.thread_status_idle)
    handed to the client (requires_action)."""
    idle_type = EventType.SESSION_THREAD_STATUS_IDLE if child else EventType.SESSION_STATUS_IDLE
    idle = SessionEvent.objects.filter(session_id=session_id, type=idle_type).order_by("-seq").only("payload").first()
    return required_action_ids(idle.payload) if idle is not None else []


def session_last_idle_seq(*, session_id: str) -> int:
    return (
        SessionEvent.objects.filter(session_id=session_id, type=EventType.SESSION_STATUS_IDLE)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    ) or 0


def session_last_model_usage(*, session_id: str) -> dict:
    """The model_usage of the session's last model call that succeeded (its
    span.model_request_end), the size the next call starts from; empty when the conversation was
    compacted after it, or no call succeeded."""
    last = (
        SessionEvent.objects.filter(session_id=session_id)
        .filter(
            Q(type=EventType.AGENT_THREAD_CONTEXT_COMPACTED)
            | Q(type=EventType.SPAN_MODEL_REQUEST_END, payload__is_error=False)
        )
        .order_by("-seq")
        .only("type", "payload")
        .first()
    )
    if last is None or last.type == EventType.AGENT_THREAD_CONTEXT_COMPACTED:
        return {}
    return last.payload.get("model_usage") or {}


def session_tool_confirmations(*, session_id: str) -> dict[str, dict]:
    """The user.tool_confirmation payloads of the session, by the tool use they answer."""
    rows = SessionEvent.objects.filter(session_id=session_id, type=EventType.USER_TOOL_CONFIRMATION).only("payload")
    return {event.payload["tool_use_id"]: event.payload for event in rows}


def session_denied_tool_use_ids(*, session_id: str) -> list[str]:
    """The tool uses the client denied (user.tool_confirmation with result deny)."""
    return [
        tool_use_id
        for tool_use_id, payload in session_tool_confirmations(session_id=session_id).items()
        if payload.get("result") != "allow"
    ]


def session_tool_uses(*, session_id: str, ids: list[str] | None = None, after_seq: int = 0) -> list[SessionEvent]:
    """The session's agent.tool_use and agent.mcp_tool_use events, oldest first: those of `ids`,
    or those after `after_seq`."""
    rows = SessionEvent.objects.filter(session_id=session_id, type__in=CONFIRMABLE_TOOL_USE_TYPES, seq__gt=after_seq)
    if ids is not None:
        rows = rows.filter(id__in=ids)
    return list(rows.order_by("seq"))


def session_latest_outcome(*, session_id: str) -> tuple[SessionEvent, list[str]] | None:
    """The latest processed user.define_outcome and the results of its evaluations so far."""
    events = SessionEvent.objects.filter(session_id=session_id)
    define = events.filter(type=EventType.USER_DEFINE_OUTCOME, processed_at__isnull=False).order_by("-seq").first()
    if define is None:
        return None
    outcome_id = define.payload["outcome_id"]
    results = events.filter(type=EventType.SPAN_OUTCOME_EVALUATION_END, payload__outcome_id=outcome_id).values_list(
        "payload__result", flat=True
    )
    return define, list(results)


def session_events_since(*, session_id: str, after_seq: int) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session_id=session_id, seq__gt=after_seq).order_by("seq"))


@dataclass
class EventRow:
    """An event as the runtime's conversation reads it (processors.conversation.Event)."""

    id: str
    seq: int
    type: str
    payload: dict
    private: dict
    processed_at: datetime | None


_CONVERSATION_SQL = (
    f"SELECT id, seq, type, payload, private, processed_at FROM {SessionEvent._meta.db_table}"
    " WHERE session_id = %s AND seq > %s AND type = ANY(%s) AND NOT (private ? 'thread_copy') ORDER BY seq"
)


def session_conversation_events(*, session_id: str, after_seq: int = 0) -> list[EventRow]:
    """The events the model's conversation is built from (after `after_seq`), oldest first,
    client events included whether processed or not: the conversation has a client event only
    once processed (runtime.model.Conversation). Read once per model call, so without the ORM
    (a plain query on the (session, seq) key; JSON columns arrive as text)."""
    with connection.cursor() as cursor:
        cursor.execute(_CONVERSATION_SQL, [session_id, after_seq, list(CONVERSATION_TYPES)])
        rows = cursor.fetchall()
    return [
        EventRow(id, seq, type, json.loads(payload), json.loads(private), processed_at)
        for id, seq, type, payload, private, processed_at in rows
    ]


_UNPLACED_TYPES_SQL = (
    f"SELECT DISTINCT type FROM {SessionResource._meta.db_table}"
    " WHERE session_id = %s AND placed_ref IS DISTINCT FROM %s"
)


def session_unplaced_resource_types(*, session_id: str, ref: str | None) -> set[str]:
    """The types of the session's resources not yet placed in (or, for repositories, tried in)
    sandbox `ref`: one statement, asked before every sandbox tool call."""
    with connection.cursor() as cursor:
        cursor.execute(_UNPLACED_TYPES_SQL, [session_id, ref])
        return {kind for (kind,) in cursor.fetchall()}


@dataclass(frozen=True)
class RepositoryToClone:
    id: str
    url: str
    checkout: dict | None
    mount_path: str
    sealed_token: str  # core.secrets ciphertext ("" when none): decrypted by the worker right before use


def session_repositories_unplaced(*, session_id: str, ref: str | None) -> list[RepositoryToClone]:
    """The session's repositories not yet tried in sandbox `ref`, in the order they were added."""
    rows = (
        SessionResource.objects.filter(session_id=session_id, type=SessionResource.Type.GITHUB_REPOSITORY)
        .exclude(placed_ref=ref)
        .order_by("id")
        .values_list("id", "url", "checkout", "mount_path", "authorization_token")
    )
    return [RepositoryToClone(*row) for row in rows]


# --- multiagent threads ------------------------------------------------------------------------


def session_threads_busy(*, session_id: str) -> bool:
    """Whether a child thread of the session is at work: running (or rescheduling), or given
    input it has not taken yet. A coordinator's turn waits for them before it goes idle."""
    pending = SessionEvent.objects.filter(
        session_id=OuterRef("pk"), processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES
    )
    return (
        Session.objects.filter(primary_id=session_id, deleted_at__isnull=True, archived_at__isnull=True)
        .filter(Q(status__in=(Session.Status.RUNNING, Session.Status.RESCHEDULING)) | Q(Exists(pending)))
        .exists()
    )


def session_thread_messages_pending(*, session_id: str) -> bool:
    """Whether another thread's message awaits this thread's model (the next call absorbs it)."""
    return SessionEvent.objects.filter(
        session_id=session_id, type=EventType.AGENT_THREAD_MESSAGE_RECEIVED, processed_at__isnull=True
    ).exists()


def session_turn_reply(*, session_id: str) -> str:
    """The text of a child thread's agent.message events since its turn started: what its idle
    reports to the thread that messaged it."""
    started = (
        SessionEvent.objects.filter(session_id=session_id, type=EventType.SESSION_THREAD_STATUS_RUNNING)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    ) or 0
    rows = SessionEvent.objects.filter(
        session_id=session_id, type=EventType.AGENT_MESSAGE, seq__gt=started
    ).values_list("payload", flat=True)
    return "\n\n".join(
        "".join(block.get("text", "") for block in payload.get("content") or [] if block.get("type") == "text")
        for payload in rows
    ).strip()


def session_family_list_cost(*, primary_id: str) -> int:
    """The list cost (nano-USD) of a session and all its child threads: what its budget holds."""
    rows = Session.objects.filter(Q(id=primary_id) | Q(primary_id=primary_id)).values_list("usage", flat=True)
    return sum(int((usage or {}).get("list_cost_nanousd") or 0) for usage in rows)


def session_threads_handed(*, session_id: str) -> list[str]:
    """The tool uses the (primary) session's idle child threads handed their client and that no
    answer reached yet, by their ids on the threads' logs (their copies on the primary's are
    sessions.thread_events.thread_copy_id's)."""
    children = Session.objects.filter(
        primary_id=session_id, deleted_at__isnull=True, archived_at__isnull=True, status=Session.Status.IDLE
    ).values_list("id", flat=True)
    handed = []
    for child in children:
        needed = session_required_action_ids(session_id=child, child=True)
        if needed:
            answered = session_answered_tool_use_ids(session_id=child, types=CLIENT_ANSWER_TYPES)
            handed += [event_id for event_id in needed if event_id not in answered]
    return handed


def session_transcript(*, session_id: str, max_chars: int) -> str:
    """The text of the session's user and agent messages, oldest first, its newest `max_chars`
    (what an advisor reads of the conversation it is consulted on)."""
    rows = (
        SessionEvent.objects.filter(session_id=session_id, type__in=(EventType.USER_MESSAGE, EventType.AGENT_MESSAGE))
        .order_by("-seq")
        .values_list("type", "payload")
    )
    lines, size = [], 0
    for kind, payload in rows.iterator():
        said = "".join(b.get("text", "") for b in payload.get("content") or [] if b.get("type") == "text")
        line = f"{'User' if kind == EventType.USER_MESSAGE else 'Agent'}: {said}"
        lines.append(line)
        size += len(line) + 1
        if size >= max_chars:
            break
    return "\n".join(reversed(lines))[-max_chars:]
