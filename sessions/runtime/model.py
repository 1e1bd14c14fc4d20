"""The model upstream: the one module that calls the Messages API (via the official SDK) at
ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY, and the turn's model call around it — retries
(each attempt reported as session.error / session.status_rescheduled), span.model_request_*
events with usage, and streamed agent.message previews.

Errors come back as ModelError: the session error type, whether retrying can help, a message
safe to show any client (what failed, and for connection or key failures the setting to check;
never the upstream's text or our internal addresses) and the full detail for logs."""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import anthropic
from django.conf import settings
from django.utils import timezone

from core import metrics
from core.ids import new_id
from processors.conversation import build_messages
from processors.memory import memory_prompt_section
from processors.skills import skills_prompt_section
from sessions import events as ev
from sessions import notify
from sessions.events import MESSAGE_TYPES, ErrorType, EventType
from sessions.models import Session
from sessions.runtime.control import Stop, TurnControl
from sessions.selectors.memory import session_memory_stores
from sessions.selectors.runner import EventRow, session_conversation_events
from sessions.selectors.skills import session_skills
from sessions.services.events import events_append, session_event_append
from sessions.services.runner import session_error_record, session_events_mark_processed, session_status_running_set

logger = logging.getLogger(__name__)

UPSTREAM = "The model upstream"


class ModelError(Exception):
    def __init__(self, message: str, *, error_type: str, retryable: bool, status: int | None = None, detail=""):
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.retryable = retryable
        self.status = status
        self.detail = detail or message


_clients: dict[tuple, anthropic.Anthropic] = {}
_clients_lock = threading.Lock()


def _client() -> anthropic.Anthropic:
    """One client per process (thread-safe; its connection pool and TLS context are shared by
    every turn the process runs), rebuilt only if the settings change."""
    key = (settings.ANTHROPIC_BASE_URL, settings.ANTHROPIC_API_KEY, settings.MANGO_MODEL_TIMEOUT_SECONDS)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            _clients.clear()
            client = _clients[key] = anthropic.Anthropic(
                base_url=settings.ANTHROPIC_BASE_URL,
                api_key=settings.ANTHROPIC_API_KEY or "unset",
                max_retries=0,  # the turn retries, reporting each attempt as a session.error
                timeout=settings.MANGO_MODEL_TIMEOUT_SECONDS,
            )
        return client


def _map_status_error(exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = f"upstream returned {status}: {getattr(exc, 'message', '') or exc}"
    if status in (401, 403):
        message = f"{UPSTREAM} rejected the API key (HTTP {status}); check ANTHROPIC_API_KEY."
        return ModelError(
            message, error_type=ErrorType.MODEL_REQUEST_FAILED, retryable=False, status=status, detail=detail
        )
    kinds = {
        529: (ErrorType.MODEL_OVERLOADED, True, "is overloaded"),
        429: (ErrorType.MODEL_RATE_LIMITED, True, "is rate limiting requests"),
        402: (ErrorType.BILLING, False, "refused the request for billing reasons"),
    }
    retryable = status >= 500 or status in (408, 409)
    error_type, retryable, what = kinds.get(status, (ErrorType.MODEL_REQUEST_FAILED, retryable, "failed the request"))
    message = f"{UPSTREAM} {what} (HTTP {status})."
    return ModelError(message, error_type=error_type, retryable=retryable, status=status, detail=detail)


@metrics.timed_model_call
def messages_create(
    *,
    model: str,
    system: str | None,
    messages: list[dict],
    tools: list[dict],
    max_tokens: int,
    tool_choice: dict | None = None,
    on_stream_event: Callable[[dict], None] | None = None,
) -> dict:
    """One Messages API call. Returns the message as a plain dict. With `on_stream_event` the call
    streams and reports {"type": "block_start", "index", "block_type"} and
    {"type": "text_delta", "index", "text"} as they arrive (raising from it aborts the call)."""
    params: dict = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
    if tool_choice:
        params["tool_choice"] = tool_choice
    try:
        if on_stream_event is None:
            message = _client().messages.create(**params)
        else:
            with _client().messages.stream(**params) as stream:
                for event in stream:
                    if event.type == "content_block_start":
                        on_stream_event(
                            {"type": "block_start", "index": event.index, "block_type": event.content_block.type}
                        )
                    elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                        on_stream_event({"type": "text_delta", "index": event.index, "text": event.delta.text})
                message = stream.get_final_message()
    except anthropic.APIStatusError as exc:
        raise _map_status_error(exc) from exc
    except anthropic.APITimeoutError as exc:
        message = f"{UPSTREAM} did not answer within {settings.MANGO_MODEL_TIMEOUT_SECONDS:g} s."
        raise ModelError(
            message, error_type=ErrorType.MODEL_REQUEST_FAILED, retryable=True, detail=f"timeout: {exc}"
        ) from exc
    except anthropic.APIConnectionError as exc:
        message = f"{UPSTREAM} could not be reached; check ANTHROPIC_BASE_URL."
        raise ModelError(
            message, error_type=ErrorType.MODEL_REQUEST_FAILED, retryable=True, detail=f"unreachable: {exc!r}"
        ) from exc
    return message.model_dump(mode="json", exclude_none=True)


# --- streamed previews -----------------------------------------------------------------------


class AbortStream(Exception):
    """Raised inside the upstream stream to stop it once the turn no longer wants it."""


class PreviewPublisher:
    """Turns the upstream's streamed text into event_start / event_delta previews of the
    agent.message events the turn will append (ids allocated here, in order; contiguous text
    blocks form one agent.message, as in turn.append_response). Previews are ephemeral:
    published on Redis to streams that opted in with event_deltas[], never stored."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.message_ids: list[str] = []
        self._blocks: dict[int, tuple[str, int]] = {}
        self._run: list | None = None  # [event id, content index] while text blocks are contiguous
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def handle(self, event: dict) -> None:
        if self._cancelled:
            raise AbortStream()
        if event["type"] == "block_start":
            self._block_start(event)
        elif event["type"] == "text_delta" and event["index"] in self._blocks:
            event_id, content_index = self._blocks[event["index"]]
            delta = {"type": "content_delta", "content": {"type": "text", "text": event["text"]}}
            delta["index"] = content_index
            notify.publish_delta(self.session_id, {"type": "event_delta", "event_id": event_id, "delta": delta})

    def _block_start(self, event: dict) -> None:
        if event["block_type"] != "text":
            self._run = None
            return
        if self._run is None:
            event_id = new_id("sevt")
            self.message_ids.append(event_id)
            self._run = [event_id, 0]
            started = {"type": "event_start", "event": {"type": EventType.AGENT_MESSAGE.value, "id": event_id}}
            notify.publish_delta(self.session_id, started)
        else:
            self._run[1] += 1
        self._blocks[event["index"]] = (self._run[0], self._run[1])


# --- the turn's model call -------------------------------------------------------------------


@dataclass
class ModelReply:
    response: dict
    # Ids the streamed previews announced, one per agent.message the response becomes.
    preview_ids: list[str] = field(default_factory=list)
    # The call's span.model_request_start: its _end is appended in the same statement as the
    # response's events (span_end_item), one row lock and one commit per answer.
    span_start_id: str = ""


class Conversation:
    """The events a turn's model calls see, read incrementally: each call reads only what was
    appended since the previous one. Messages the client sent while the turn runs are marked
    processed as they are read, and join the conversation at that call; other client events
    count once processed, so the events from the first one still unprocessed on are read again
    next time."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self._settled: list[EventRow] = []
        self._after_seq = 0

    def events(self) -> list[EventRow]:
        rows = session_conversation_events(session_id=self.session_id, after_seq=self._after_seq)
        self._absorb([row for row in rows if row.processed_at is None and row.type in MESSAGE_TYPES])
        counted = [row.processed_at is not None or not row.type.startswith("user.") for row in rows]
        settled = counted.index(False) if False in counted else len(rows)
        self._settled.extend(rows[:settled])
        if settled:
            self._after_seq = rows[settled - 1].seq
        return self._settled + [row for row, keep in zip(rows[settled:], counted[settled:], strict=True) if keep]

    def _absorb(self, messages: list[EventRow]) -> None:
        if messages:
            session_events_mark_processed(event_ids=[row.id for row in messages], only_unprocessed=True)
            now = timezone.now()
            for row in messages:
                row.processed_at = now


def system_prompt(session: Session) -> str | None:
    """The agent's system prompt, then the skills section (each pinned skill's name,
    description and path), then the memory section (each attached store's name, path, access,
    description and instructions), read once per turn."""
    skills = [
        {"name": version.name, "description": version.description, "path": path}
        for version, path in session_skills(session=session)
    ]
    section = skills_prompt_section(skills)
    memory = memory_prompt_section(
        [
            {
                "name": row.name,
                "mount_path": row.mount_path,
                "access": row.access,
                "description": row.description,
                "instructions": row.instructions,
            }
            for row in session_memory_stores(session=session)
        ]
    )
    system = session.agent_snapshot.get("system")
    return "\n\n".join(part for part in (system, section, memory) if part) or None


def model_call(
    *, control: TurnControl, session: Session, definitions: list[dict], conversation: Conversation, system: str | None
) -> ModelReply | None:
    """Call the model with the conversation so far, retrying retryable failures
    (MANGO_MODEL_MAX_RETRIES, exponential back-off). None once retries are exhausted."""
    snapshot = session.agent_snapshot
    attempts = settings.MANGO_MODEL_MAX_RETRIES + 1
    for attempt in range(attempts):
        messages = build_messages(conversation.events())
        start = session_event_append(session_id=control.session_id, type=EventType.SPAN_MODEL_REQUEST_START)
        previews = PreviewPublisher(control.session_id)
        params = {
            "model": snapshot["model"]["id"],
            "system": system,
            "messages": messages,
            "tools": definitions,
            "max_tokens": settings.MANGO_MODEL_MAX_TOKENS,
            "on_stream_event": previews.handle,
        }
        try:
            response = control.interruptible(lambda params=params: messages_create(**params), previews.cancel)
        except ModelError as exc:
            _span_end(control.session_id, start.id, None)
            retrying = exc.retryable and attempt + 1 < attempts
            model_error_record(session_id=control.session_id, exc=exc, retrying=retrying)
            if not retrying:
                return None
            control.sleep(settings.MANGO_MODEL_RETRY_BACKOFF_SECONDS * (2**attempt))
            session_status_running_set(session_id=control.session_id)
            continue
        except Stop:
            _span_end(control.session_id, start.id, None)
            raise
        return ModelReply(response, list(previews.message_ids), span_start_id=start.id)
    return None


def span_end_item(*, start_id: str, usage: dict | None) -> tuple[dict, dict]:
    """The span.model_request_end item of a call and its token counts, which the caller's append
    adds to the session's totals (events_append(usage=...))."""
    usage = usage or {}
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    model_usage = {key: int(usage.get(key) or 0) for key in keys}
    payload = {"model_request_start_id": start_id, "model_usage": model_usage, "is_error": usage == {}}
    return ev.item(EventType.SPAN_MODEL_REQUEST_END, payload), model_usage


def _span_end(session_id: str, start_id: str, usage: dict | None) -> None:
    item, model_usage = span_end_item(start_id=start_id, usage=usage)
    events_append(session_id=session_id, items=[item], usage=model_usage)


def model_error_record(*, session_id: str, exc: ModelError, retrying: bool) -> None:
    """session.error for a failed call (+ session.status_rescheduled when retrying). The detail
    goes to the log and the session's last_error (operators), never to the event."""
    logger.warning("model call failed: %s", exc.detail, extra={"session_id": session_id})
    session_error_record(
        session_id=session_id,
        payload=ev.session_error(message=exc.message, error_type=exc.error_type, retrying=retrying),
        last_error=f"{exc.error_type}: {exc.detail}",
        rescheduling=retrying,
    )
