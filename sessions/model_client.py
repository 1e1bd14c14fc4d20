"""The model upstream: the one module that calls the Messages API (via the official SDK) at
ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY. Errors come back as ModelError with the session error
type they map to and whether retrying can help."""

from collections.abc import Callable

import anthropic
from django.conf import settings

from core import metrics


class ModelError(Exception):
    def __init__(self, message: str, *, error_type: str, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.retryable = retryable
        self.status = status


def _client() -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=settings.ANTHROPIC_BASE_URL,
        api_key=settings.ANTHROPIC_API_KEY or "unset",
        max_retries=0,  # the runner retries, reporting each attempt as a session.error
        timeout=settings.MANGO_MODEL_TIMEOUT_SECONDS,
    )


def _map_status_error(exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    detail = f"upstream returned {status}: {getattr(exc, 'message', '') or exc}"
    if status == 529:
        return ModelError(detail, error_type="model_overloaded_error", retryable=True, status=status)
    if status == 429:
        return ModelError(detail, error_type="model_rate_limited_error", retryable=True, status=status)
    if status == 402:
        return ModelError(detail, error_type="billing_error", retryable=False, status=status)
    retryable = status >= 500 or status in (408, 409)
    return ModelError(detail, error_type="model_request_failed_error", retryable=retryable, status=status)


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
        raise ModelError("upstream request timed out", error_type="model_request_failed_error", retryable=True) from exc
    except anthropic.APIConnectionError as exc:
        raise ModelError(
            f"upstream unreachable: {exc}", error_type="model_request_failed_error", retryable=True
        ) from exc
    return message.model_dump(mode="json", exclude_none=True)
