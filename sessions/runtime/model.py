"""The model upstream: the one module that calls the Messages API (via the official SDK) at
ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY, and the turn's model call around it — retries
(each attempt reported as session.error / session.status_rescheduled), span.model_request_*
events with usage, and streamed agent.message previews.

Errors come back as ModelError: the session error type, whether retrying can help, a message
safe to show any client (what failed, the upstream's address the operator configured, and for
connection or key failures the settings to check; never the upstream's own text) and the full
detail for logs. The start-up warning (sessions/checks.py) quotes the same messages."""

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from files.selectors import event_snapshot_read
from processors.caching import with_breakpoints
from processors.conversation import build_messages
from processors.media import inline_snapshots
from processors.memory import memory_prompt_section
from processors.skills import skills_prompt_section
from sessions import events as ev
from sessions import pricing
from sessions.events import MESSAGE_TYPES, SERVER_TOOL_TYPES, WEB_FETCH_BETA, ErrorType, EventType
from sessions.models import Session
from sessions.runtime.control import Stop, TurnControl
from sessions.runtime.upstream import ModelError, PreviewPublisher, messages_create
from sessions.selectors import session_memory_stores
from sessions.selectors.runner import EventRow, session_conversation_events
from sessions.services.events import events_append, session_event_append
from sessions.services.runner import (
    session_error_record,
    session_events_mark_processed,
    session_events_refused,
    session_status_running_set,
)
from sessions.services.skill_mounts import session_skills

logger = logging.getLogger(__name__)

# --- the turn's model call -------------------------------------------------------------------


@dataclass
class ModelReply:
    response: dict
    # Ids the streamed previews announced, one per agent.message the response becomes.
    preview_ids: list[str] = field(default_factory=list)
    # Ids of the agent.thinking previews, one per thinking block.
    thinking_ids: list[str] = field(default_factory=list)
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
        # The admitted PDFs and images, read once per turn (each call sends them again).
        self._media: dict[str, bytes] = {}
        self._sent: list[EventRow] = []  # what the latest request was built from

    def refused_input(self, exc: "ModelError") -> list[str]:
        """After the upstream refused a request as invalid (HTTP 400): the client input the
        request added since the model last answered (the newest user events). They are left out
        of every later request (their content replaced by a note), so one bad event cannot fail
        the session's every turn. Returns their ids (none for other failures)."""
        if exc.status != 400:
            return []
        trailing = []
        for row in reversed(self._sent):
            if not row.type.startswith(("user.", "system.")):
                break
            trailing.append(row.id)
        if trailing:
            session_events_refused(event_ids=trailing, reason=exc.message)
            self._settled = []  # read again: the refused content is left out from now on
            self._after_seq = 0
        return trailing

    def media(self, file_id: str) -> bytes:
        """An admitted PDF or image's bytes. What one turn holds (and one request carries) is
        bounded by MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES: past it, a 400-like ModelError, so the
        newest input is left out (refused_input) and the session recovers."""
        if file_id not in self._media:
            limit = max(settings.MANGO_MODEL_PDF_MAX_BYTES, settings.MANGO_MODEL_IMAGE_MAX_BYTES)
            data = event_snapshot_read(file_id=file_id, max_bytes=limit)
            total = sum(map(len, self._media.values())) + len(data)
            if total > settings.MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES:
                cap = settings.MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES
                raise ModelError(
                    f"The conversation's PDFs and images exceed {cap:,} bytes, more than one model request carries.",
                    error_type=ErrorType.MODEL_REQUEST_FAILED,
                    retryable=False,
                    status=400,
                )
            self._media[file_id] = data
        return self._media[file_id]

    def events(self) -> list[EventRow]:
        rows = session_conversation_events(session_id=self.session_id, after_seq=self._after_seq)
        self._absorb([row for row in rows if row.processed_at is None and row.type in MESSAGE_TYPES])
        counted = [row.processed_at is not None or not row.type.startswith("user.") for row in rows]
        settled = counted.index(False) if False in counted else len(rows)
        self._settled.extend(rows[:settled])
        if settled:
            self._after_seq = rows[settled - 1].seq
        sent = self._settled + [row for row, keep in zip(rows[settled:], counted[settled:], strict=True) if keep]
        self._sent = _after_last_compaction(sent)
        return self._sent

    def _absorb(self, messages: list[EventRow]) -> None:
        if messages:
            session_events_mark_processed(event_ids=[row.id for row in messages], only_unprocessed=True)
            now = timezone.now()
            for row in messages:
                row.processed_at = now


FAST_MODE_BETA = "fast-mode-2026-02-01"


# Thinking (MANGO_MODEL_THINKING): `adaptive` lets the model decide when and how much to think,
# for the models that take it; the earlier thinking models take `enabled` with a token budget
# (MANGO_MODEL_THINKING_BUDGET_TOKENS, below max_tokens as the API requires); others none.
ADAPTIVE_THINKING_MODELS = (
    "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8", "claude-sonnet-4-6", "claude-opus-5",
    "claude-sonnet-5", "claude-haiku-5", "claude-fable", "claude-mythos",
)  # fmt: skip
BUDGET_THINKING_MODELS = ("claude-3-7-sonnet", "claude-opus-4", "claude-sonnet-4", "claude-haiku-4")
THINKING_BUDGET_MIN = 1024  # the API's least budget_tokens


def thinking_config(model_id: str) -> dict | None:
    """The `thinking` request field for `model_id` under MANGO_MODEL_THINKING, or None."""
    mode = settings.MANGO_MODEL_THINKING
    if mode == "off":
        return None
    if mode == "adaptive" and model_id.startswith(ADAPTIVE_THINKING_MODELS):
        return {"type": "adaptive"}
    if model_id.startswith(ADAPTIVE_THINKING_MODELS + BUDGET_THINKING_MODELS):
        budget = min(settings.MANGO_MODEL_THINKING_BUDGET_TOKENS, settings.MANGO_MODEL_MAX_TOKENS - 1)
        return {"type": "enabled", "budget_tokens": budget} if budget >= THINKING_BUDGET_MIN else None
    return None


def model_options(model: dict, definitions: list[dict] = ()) -> dict:
    """The agent's model options as Messages API request fields: thinking (thinking_config),
    `effort` as output_config,
    `speed` (fast needs the fast-mode beta header) and `inference_geo`, each only when set; the
    web-fetch beta header when the upstream's web_fetch is offered. Sent as extra body fields,
    so this SDK's request types need not know them."""
    betas = [WEB_FETCH_BETA] if any(d.get("type") == SERVER_TOOL_TYPES["web_fetch"] for d in definitions) else []
    body = {}
    if thinking := thinking_config(model["id"]):
        body["thinking"] = thinking
    if model.get("effort"):
        body["output_config"] = {"effort": model["effort"]["type"]}
    if model.get("speed"):
        body["speed"] = model["speed"]
    if model.get("inference_geo"):
        body["inference_geo"] = model["inference_geo"]
    options = {"extra_body": body} if body else {}
    if model.get("speed") == "fast":
        betas.append(FAST_MODE_BETA)
    if betas:
        options["extra_headers"] = {"anthropic-beta": ",".join(betas)}
    return options


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


COMPACTED = EventType.AGENT_THREAD_CONTEXT_COMPACTED.value
SUMMARY_REQUEST = (
    "The conversation is about to be compacted to save context. Write a summary of everything so far that lets you "
    "continue the task without the earlier messages: the goal, what was done and found (files, commands, results), "
    "decisions, open problems and the next steps. Reply with the summary only."
)


def _after_last_compaction(rows: list[EventRow]) -> list[EventRow]:
    """The conversation from the latest compaction on: its summary (as a user turn) in place
    of everything before it. The public event log keeps every event."""
    last = max((i for i, row in enumerate(rows) if row.type == COMPACTED), default=None)
    if last is None:
        return rows
    compaction = rows[last]
    text = "Summary of the conversation so far (earlier messages were compacted):\n\n" + compaction.private["summary"]
    summary = EventRow(
        id=compaction.id,
        seq=compaction.seq,
        type=EventType.USER_MESSAGE.value,
        payload={},
        private={"model_content": [{"type": "text", "text": text}]},
        processed_at=compaction.processed_at,
    )
    return [summary, *rows[last + 1 :]]


def context_tokens(usage: dict) -> int:
    """The prompt size of a call: what the next call starts from."""
    return sum(
        int(usage.get(key) or 0) for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )


def compaction_threshold(model: str) -> int:
    """Input tokens past which the conversation is compacted before the next call."""
    return settings.MANGO_CONTEXT_COMPACT_TOKENS or DEFAULT_COMPACT_TOKENS


# Well below the smallest context window of the models this server names (200,000 tokens).
DEFAULT_COMPACT_TOKENS = 150_000


def context_compact(
    *, control: TurnControl, session: Session, definitions: list[dict], conversation: Conversation, system: str | None
) -> bool:
    """Summarise the conversation with one model call (no tool may be used) and record the
    summary as agent.thread_context_compacted: the next calls start from it. False when the
    summary could not be made (the caller reports compaction_limit_reached_error)."""
    try:
        messages = inline_snapshots(build_messages(conversation.events()), conversation.media)
    except ModelError:
        return False
    messages.append({"role": "user", "content": [{"type": "text", "text": SUMMARY_REQUEST}]})
    if messages[-2]["role"] == "user":  # two user turns in a row merge
        messages[-2:] = [{"role": "user", "content": [*messages[-2]["content"], *messages[-1]["content"]]}]
    params = {
        "model": session.agent_snapshot["model"]["id"],
        "system": system,
        "messages": messages,
        "tools": definitions,
        "tool_choice": {"type": "none"},
        "max_tokens": settings.MANGO_MODEL_MAX_TOKENS,
    }
    try:
        response = control.interruptible(lambda: messages_create(**params))
    except ModelError as exc:
        logger.warning("compaction call failed: %s", exc.detail, extra={"session_id": control.session_id})
        return False
    summary = "".join(b.get("text", "") for b in response.get("content") or [] if b.get("type") == "text").strip()
    if not summary:
        return False
    usage = response.get("usage") or {}
    events_append(
        session_id=control.session_id,
        items=[ev.item(COMPACTED, {}, private={"summary": summary})],
        usage=ev.usage_delta(usage, pricing.price_for(params["model"])) if usage else None,
    )
    return True


def model_call(
    *, control: TurnControl, session: Session, definitions: list[dict], conversation: Conversation, system: str | None
) -> ModelReply | None:
    """Call the model with the conversation so far, retrying retryable failures
    (MANGO_MODEL_MAX_RETRIES, exponential back-off). None once retries are exhausted."""
    snapshot = session.agent_snapshot
    attempts = settings.MANGO_MODEL_MAX_RETRIES + 1
    for attempt in range(attempts):
        try:
            messages = inline_snapshots(build_messages(conversation.events()), conversation.media)
        except ModelError as exc:  # the media bound: nothing was sent
            model_error_record(
                session_id=control.session_id,
                exc=exc,
                retrying=False,
                terminal=session.primary_id is not None,
                refused=conversation.refused_input(exc),
            )
            return None
        start = session_event_append(session_id=control.session_id, type=EventType.SPAN_MODEL_REQUEST_START)
        previews = PreviewPublisher(control.session_id)
        cached_system, cached_tools, messages = with_breakpoints(system=system, tools=definitions, messages=messages)
        params = {
            "model": snapshot["model"]["id"],
            "system": cached_system,
            "messages": messages,
            "tools": cached_tools,
            "max_tokens": settings.MANGO_MODEL_MAX_TOKENS,
            "options": model_options(snapshot["model"], definitions),
            "on_stream_event": previews.handle,
        }
        try:
            response = control.interruptible(lambda params=params: messages_create(**params), previews.cancel)
        except ModelError as exc:
            _span_end(control.session_id, start.id, None)
            retrying = exc.retryable and attempt + 1 < attempts
            refused = conversation.refused_input(exc)
            model_error_record(
                session_id=control.session_id,
                exc=exc,
                retrying=retrying,
                terminal=session.primary_id is not None,
                refused=refused,
            )
            if not retrying:
                return None
            control.sleep(settings.MANGO_MODEL_RETRY_BACKOFF_SECONDS * (2**attempt))
            session_status_running_set(session_id=control.session_id)
            continue
        except Stop:
            _span_end(control.session_id, start.id, None)
            raise
        return ModelReply(
            response, list(previews.message_ids), span_start_id=start.id, thinking_ids=list(previews.thinking_ids)
        )
    return None


def span_end_item(*, start_id: str, usage: dict | None, price=None) -> tuple[dict, dict | None]:
    """The span.model_request_end item of a call and its addition to the session's usage totals
    (tokens, server tool requests, list cost at `price`), which the caller's append adds
    (events_append(usage=...)); None for a call that failed."""
    usage = usage or {}
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    model_usage = {key: int(usage.get(key) or 0) for key in keys}
    payload = {"model_request_start_id": start_id, "model_usage": model_usage, "is_error": usage == {}}
    return ev.item(EventType.SPAN_MODEL_REQUEST_END, payload), (ev.usage_delta(usage, price) if usage else None)


def _span_end(session_id: str, start_id: str, usage: dict | None) -> None:
    item, delta = span_end_item(start_id=start_id, usage=usage)
    events_append(session_id=session_id, items=[item], usage=delta)


def model_error_record(
    *, session_id: str, exc: ModelError, retrying: bool, terminal: bool = False, refused: list[str] | None = None
) -> None:
    """session.error for a failed call (+ session.status_rescheduled when retrying). The detail
    goes to the log and the session's last_error (operators), never to the event. `terminal`:
    not retrying, the session is a child thread that the failure terminates (runtime.waits)."""
    logger.warning("model call failed: %s", exc.detail, extra={"session_id": session_id})
    message = exc.message
    if refused:
        message += (
            f" The request carried the input {', '.join(refused)}, which is left out of the conversation from now on:"
            " send it again in another form."
        )
    session_error_record(
        session_id=session_id,
        payload=ev.session_error(message=message, error_type=exc.error_type, retrying=retrying, terminal=terminal),
        last_error=f"{exc.error_type}: {exc.detail}",
        rescheduling=retrying,
    )
