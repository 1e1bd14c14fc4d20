"""The model upstream: the one module that calls the Messages API (via the official SDK) at
ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY, and the streamed previews of what it answers.

Errors come back as ModelError: the session error type, whether retrying can help, a message
safe to show any client (what failed, and for connection or key failures the setting to check;
never the upstream's text or our internal addresses) and the full detail for logs."""

import logging
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

import anthropic
from django.conf import settings

from core import metrics
from core.ids import new_id
from sessions import notify
from sessions.events import ErrorType, EventType

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


def upstream_url() -> str:
    """ANTHROPIC_BASE_URL as messages show it: without user:password@ or a query."""
    parts = urlsplit(settings.ANTHROPIC_BASE_URL)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}".rstrip("/")


def unreachable_message(reason: str) -> str:
    return (
        f"{UPSTREAM} at {upstream_url()} could not be reached ({reason}); "
        "check ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY."
    )


def rejected_key_message(status: int) -> str:
    return f"{UPSTREAM} at {upstream_url()} rejected the API key (HTTP {status}); check ANTHROPIC_API_KEY."


def _connection_reason(exc: BaseException) -> str:
    """The innermost cause's own words ("[Errno 111] Connection refused"), one line."""
    for _ in range(10):
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _map_status_error(exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = f"upstream {upstream_url()} returned {status}: {getattr(exc, 'message', '') or exc}"
    if status in (401, 403):
        message = rejected_key_message(status)
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
    options: dict | None = None,
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
    if options:
        params.update(options)
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
        reason = _connection_reason(exc)
        raise ModelError(
            unreachable_message(reason),
            error_type=ErrorType.MODEL_REQUEST_FAILED,
            retryable=True,
            detail=f"{upstream_url()} unreachable: {reason}",
        ) from exc
    return message.model_dump(mode="json", exclude_none=True)


# --- streamed previews -----------------------------------------------------------------------


class AbortStream(Exception):
    """Raised inside the upstream stream to stop it once the turn no longer wants it."""


class PreviewPublisher:
    """Turns the upstream's streamed text into event_start / event_delta previews of the
    agent.message events the turn will append (ids allocated here, in order; contiguous text
    blocks form one agent.message, as in turn.append_response). Previews are ephemeral:
    published on Redis to streams that opted in with event_deltas[], never stored. A message's
    deltas are published only when its event_start reached a stream: with nobody listening (the
    usual case) a call costs one publish per message, not one per chunk of text the model
    streams; a stream that opens mid-message sees that message when it is appended."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.message_ids: list[str] = []
        self.thinking_ids: list[str] = []  # agent.thinking previews: a start, no content (the SDK's)
        self._blocks: dict[int, tuple[str, int]] = {}
        self._run: list | None = None  # [event id, content index] while text blocks are contiguous
        self._listened = False  # the current message's event_start reached a stream
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def handle(self, event: dict) -> None:
        if self._cancelled:
            raise AbortStream()
        if event["type"] == "block_start":
            self._block_start(event)
        elif event["type"] == "text_delta" and event["index"] in self._blocks and self._listened:
            event_id, content_index = self._blocks[event["index"]]
            delta = {"type": "content_delta", "content": {"type": "text", "text": event["text"]}}
            delta["index"] = content_index
            notify.publish_delta(self.session_id, {"type": "event_delta", "event_id": event_id, "delta": delta})

    def _block_start(self, event: dict) -> None:
        if event["block_type"] in ("thinking", "redacted_thinking"):
            event_id = new_id("sevt")
            self.thinking_ids.append(event_id)
            started = {"type": "event_start", "event": {"type": EventType.AGENT_THINKING.value, "id": event_id}}
            notify.publish_delta(self.session_id, started)
        if event["block_type"] != "text":
            self._run = None
            return
        if self._run is None:
            event_id = new_id("sevt")
            self.message_ids.append(event_id)
            self._run = [event_id, 0]
            started = {"type": "event_start", "event": {"type": EventType.AGENT_MESSAGE.value, "id": event_id}}
            self._listened = notify.publish_delta(self.session_id, started) > 0
        else:
            self._run[1] += 1
        self._blocks[event["index"]] = (self._run[0], self._run[1])
