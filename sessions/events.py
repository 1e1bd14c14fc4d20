"""The event vocabulary of a session: every event type, the groups the runtime and the API
reason about, tool modes, and one builder per server-built payload (session.error,
agent.tool_result, session.status_idle stop reasons). Nothing else writes these shapes.

Depends on nothing in the project but the pure processors and the price table
(sessions/pricing.py), so every floor (tasks, runtime, services, selectors) may import it.
"""

import enum

from django.db import models

from processors.conversation import tool_use_id_of  # noqa: F401  (the one place this is decided)
from sessions import pricing


class EventType(models.TextChoices):
    # Sent by clients.
    USER_MESSAGE = "user.message"
    USER_INTERRUPT = "user.interrupt"
    USER_TOOL_CONFIRMATION = "user.tool_confirmation"
    USER_CUSTOM_TOOL_RESULT = "user.custom_tool_result"
    USER_TOOL_RESULT = "user.tool_result"
    USER_DEFINE_OUTCOME = "user.define_outcome"
    SYSTEM_MESSAGE = "system.message"
    # Written by the runtime.
    AGENT_MESSAGE = "agent.message"
    AGENT_THINKING = "agent.thinking"
    AGENT_TOOL_USE = "agent.tool_use"
    AGENT_CUSTOM_TOOL_USE = "agent.custom_tool_use"
    AGENT_TOOL_RESULT = "agent.tool_result"
    AGENT_MCP_TOOL_USE = "agent.mcp_tool_use"
    AGENT_MCP_TOOL_RESULT = "agent.mcp_tool_result"
    AGENT_THREAD_CONTEXT_COMPACTED = "agent.thread_context_compacted"
    AGENT_THREAD_MESSAGE_SENT = "agent.thread_message_sent"
    AGENT_THREAD_MESSAGE_RECEIVED = "agent.thread_message_received"
    SESSION_STATUS_RUNNING = "session.status_running"
    SESSION_STATUS_IDLE = "session.status_idle"
    SESSION_STATUS_RESCHEDULED = "session.status_rescheduled"
    SESSION_STATUS_TERMINATED = "session.status_terminated"
    SESSION_ERROR = "session.error"
    SESSION_UPDATED = "session.updated"
    SESSION_DELETED = "session.deleted"
    SESSION_USAGE = "session.usage"
    SESSION_THREAD_CREATED = "session.thread_created"
    SESSION_THREAD_STATUS_RUNNING = "session.thread_status_running"
    SESSION_THREAD_STATUS_IDLE = "session.thread_status_idle"
    SESSION_THREAD_STATUS_RESCHEDULED = "session.thread_status_rescheduled"
    SESSION_THREAD_STATUS_TERMINATED = "session.thread_status_terminated"
    WORKFLOW_RUN_CREATED = "workflow_run.created"
    WORKFLOW_RUN_STATUS_RUNNING = "workflow_run.status_running"
    WORKFLOW_RUN_PHASE_STARTED = "workflow_run.phase_started"
    WORKFLOW_RUN_PHASE_ENDED = "workflow_run.phase_ended"
    WORKFLOW_RUN_ERROR = "workflow_run.error"
    WORKFLOW_RUN_STATUS_ENDED = "workflow_run.status_ended"
    SPAN_MODEL_REQUEST_START = "span.model_request_start"
    SPAN_MODEL_REQUEST_END = "span.model_request_end"
    SPAN_OUTCOME_EVALUATION_START = "span.outcome_evaluation_start"
    SPAN_OUTCOME_EVALUATION_ONGOING = "span.outcome_evaluation_ongoing"
    SPAN_OUTCOME_EVALUATION_END = "span.outcome_evaluation_end"


E = EventType
# The toolset's web tools as the upstream's server tools, and the beta header web_fetch needs.
SERVER_TOOL_TYPES = {"web_search": "web_search_20250305", "web_fetch": "web_fetch_20250910"}
WEB_FETCH_BETA = "web-fetch-2025-09-10"
# Response blocks of server tools: their call, and each tool's result block.
SERVER_TOOL_USE = "server_tool_use"
SERVER_TOOL_RESULTS = ("web_search_tool_result", "web_fetch_tool_result")


def _values(*types: EventType) -> tuple[str, ...]:
    return tuple(t.value for t in types)


# Every event a client may send; each is input the runner acts on (processed_at stays null until
# it has).
CLIENT_EVENT_TYPES = _values(
    E.USER_MESSAGE,
    E.USER_INTERRUPT,
    E.USER_TOOL_CONFIRMATION,
    E.USER_CUSTOM_TOOL_RESULT,
    E.USER_TOOL_RESULT,
    E.USER_DEFINE_OUTCOME,
    E.SYSTEM_MESSAGE,
)
# What the runner acts on: the client's events and, in a multiagent session, another thread's
# message (processed_at null until a turn took it).
RUNNER_INPUT_TYPES = (*CLIENT_EVENT_TYPES, E.AGENT_THREAD_MESSAGE_RECEIVED.value)
# Client answers to tool uses handed over with stop_reason requires_action.
CLIENT_ANSWER_TYPES = _values(E.USER_CUSTOM_TOOL_RESULT, E.USER_TOOL_RESULT, E.USER_TOOL_CONFIRMATION)
# Events that give a tool use its result.
TOOL_RESULT_TYPES = _values(E.AGENT_TOOL_RESULT, E.AGENT_MCP_TOOL_RESULT, E.USER_CUSTOM_TOOL_RESULT, E.USER_TOOL_RESULT)
# Tool uses a user.tool_confirmation may answer (always_ask built-ins and MCP tools).
CONFIRMABLE_TOOL_USE_TYPES = _values(E.AGENT_TOOL_USE, E.AGENT_MCP_TOOL_USE)
# Client messages a running turn absorbs at its next model call.
MESSAGE_TYPES = _values(E.USER_MESSAGE, E.SYSTEM_MESSAGE, E.USER_DEFINE_OUTCOME, E.AGENT_THREAD_MESSAGE_RECEIVED)
# What the transcript for the model is built from (processors.conversation renders them).
CONVERSATION_TYPES = _values(
    E.AGENT_THREAD_CONTEXT_COMPACTED,
    E.AGENT_THINKING,
    E.USER_MESSAGE,
    E.AGENT_THREAD_MESSAGE_RECEIVED,
    E.SYSTEM_MESSAGE,
    E.USER_DEFINE_OUTCOME,
    E.AGENT_MESSAGE,
    E.AGENT_TOOL_USE,
    E.AGENT_CUSTOM_TOOL_USE,
    E.AGENT_TOOL_RESULT,
    E.AGENT_MCP_TOOL_USE,
    E.AGENT_MCP_TOOL_RESULT,
    E.USER_CUSTOM_TOOL_RESULT,
    E.USER_TOOL_RESULT,
    E.USER_TOOL_CONFIRMATION,
    E.SPAN_OUTCOME_EVALUATION_END,
)


# An outcome evaluation with one of these results ends the outcome.
TERMINAL_RESULTS = ("satisfied", "max_iterations_reached", "failed", "interrupted")


class ToolMode(enum.Enum):
    """What the runtime does with a tool use the model made."""

    RUN = "run"  # a built-in tool executed here, in the sandbox
    CLIENT = "client"  # handed to the client (custom tool, self_hosted, always_ask)
    UNKNOWN = "unknown"  # no such tool: answered with an error result at once
    DENIED = "denied"  # judged high-risk under the auto policy: answered with an error result at once


class ToolPermission(enum.StrEnum):
    ALWAYS_ALLOW = "always_allow"
    ALWAYS_ASK = "always_ask"
    AUTO = "auto"


class ErrorType(enum.StrEnum):
    UNKNOWN = "unknown_error"
    MODEL_OVERLOADED = "model_overloaded_error"
    MODEL_RATE_LIMITED = "model_rate_limited_error"
    MODEL_REQUEST_FAILED = "model_request_failed_error"
    BILLING = "billing_error"
    TOOL_USE_LIMIT_REACHED = "tool_use_limit_reached_error"
    COMPACTION_LIMIT_REACHED = "compaction_limit_reached_error"
    REPOSITORY_AUTHENTICATION = "repository_authentication_error"
    REPOSITORY_FORBIDDEN = "repository_forbidden_error"
    REPOSITORY_NOT_FOUND = "repository_not_found_error"
    REPOSITORY_CHECKOUT = "repository_checkout_error"
    REPOSITORY_CLONE = "repository_clone_error"
    MCP_CONNECTION_FAILED = "mcp_connection_failed_error"
    MCP_AUTHENTICATION_FAILED = "mcp_authentication_failed_error"
    CREDENTIAL_HOST_UNREACHABLE = "credential_host_unreachable_error"


# --- payload builders -----------------------------------------------------------------------


# A session.error names at most this many paths (each at most NAME_MAX_CHARS) and counts the
# rest: its size does not grow with what a sandbox holds.
ERROR_MAX_NAMES = 20
NAME_MAX_CHARS = 300


class BoundedNames(list):
    """The reasons (each naming a path) one session.error will list: the first ERROR_MAX_NAMES
    are kept, the rest only counted in `total`, so neither the report nor the event grows with
    the number of offending files."""

    def __init__(self, items=()):
        super().__init__()
        self.total = 0
        self.extend(items)

    def append(self, item: str) -> None:
        self.total += 1
        if len(self) < ERROR_MAX_NAMES:
            super().append(item[:NAME_MAX_CHARS])

    def extend(self, items) -> None:
        for item in items:
            self.append(item)

    def listed(self) -> str:
        """`a; b; c`, and `; and N more` when some were only counted."""
        more = self.total - len(self)
        return "; ".join(self) + (f"; and {more} more" if more else "")


def session_error(
    *,
    message: str,
    error_type: str = ErrorType.UNKNOWN,
    retrying: bool = False,
    terminal: bool = False,
    mcp_server_name: str | None = None,
) -> dict:
    """A session.error payload. `message` says what failed in words safe to show any client:
    never upstream exception text or internal addresses. The MCP errors name their server.
    retry_status (the SDK's): `retrying` (the server tries again), `exhausted` (the turn is dead,
    the session goes idle), `terminal` (it goes idle and is terminated: a child thread's turn
    that failed for good, as the SDK's child threads do)."""
    status = "retrying" if retrying else "terminal" if terminal else "exhausted"
    error = {"type": str(error_type), "message": message, "retry_status": {"type": status}}
    if mcp_server_name is not None:
        error["mcp_server_name"] = mcp_server_name
    return {"error": error}


def repository_error(*, error_type: str, message: str, repository_url: str | None) -> dict:
    """A repository_* session.error: always `retrying` (the session goes on without the
    repository; a new sandbox or a rotated token tries again). `repository_url` carries no
    credentials (they are refused in URLs)."""
    payload = session_error(message=message, error_type=ErrorType(error_type), retrying=True)
    payload["error"]["repository_url"] = repository_url
    return payload


def credential_host_unreachable_error(*, credential_id: str, vault_id: str, hosts: list[str]) -> dict:
    """A vault environment_variable credential names hosts the environment's networking does not
    let the sandbox reach: the proxy will never put the secret into a request to them. `exhausted`,
    as a failed package install: nothing retries it (unlike an MCP server, connected again each
    turn), since the environment's networking is fixed for the session; the client changes the
    credential's hosts or the environment. The message names the hosts and the credential, never its value."""
    shown = ", ".join(hosts[:10]) + (f" and {len(hosts) - 10} more" if len(hosts) > 10 else "")
    message = (
        f"Credential {credential_id} of vault {vault_id} is for {shown}, which the environment's "
        "networking does not allow: its secret is never sent there."
    )
    payload = session_error(message=message, error_type=ErrorType.CREDENTIAL_HOST_UNREACHABLE)
    payload["error"] |= {"credential_id": credential_id, "vault_id": vault_id}
    return payload


def credential_unreadable_error(*, credential_id: str, vault_id: str) -> dict:
    """A vault environment_variable credential this server cannot decrypt (MANGO_VAULT_KEY no
    longer holds its key): the sandbox starts without it, so the variable is unset. `exhausted`:
    nothing retries it until the operator restores the key or the client replaces the secret."""
    message = (
        f"Credential {credential_id} of vault {vault_id} cannot be read by this server (its encryption key is"
        " no longer configured): the sandbox runs without it. Update the credential's secret to use it again."
    )
    return session_error(message=message)


def tool_result(*, tool_use_id: str, text: str, is_error: bool = False) -> dict:
    """An agent.tool_result payload with one text block."""
    return {"tool_use_id": tool_use_id, "content": [{"type": "text", "text": text}], "is_error": is_error}


def mcp_tool_result(*, mcp_tool_use_id: str, content: list[dict], is_error: bool = False) -> dict:
    """An agent.mcp_tool_result payload (the MCP server's content blocks)."""
    return {"mcp_tool_use_id": mcp_tool_use_id, "content": content, "is_error": is_error}


def status_idle(stop_reason: dict, stop_details: dict | None = None) -> dict:
    """session.status_idle's payload; `stop_details` only when there is something to report (a
    refusal's category and explanation, as the upstream gave them)."""
    return {"stop_reason": stop_reason, **({"stop_details": stop_details} if stop_details else {})}


def refusal_details(response: dict) -> dict | None:
    """The upstream's stop_details of a refusal ({type: refusal, category, explanation}), or None."""
    details = response.get("stop_details")
    if not isinstance(details, dict) or details.get("type") != "refusal":
        return None
    return {"type": "refusal", "category": details.get("category"), "explanation": details.get("explanation")}


def stop_end_turn() -> dict:
    return {"type": "end_turn"}


def stop_retries_exhausted() -> dict:
    return {"type": "retries_exhausted"}


def stop_refusal() -> dict:
    return {"type": "refusal"}


def stop_budget_reached() -> dict:
    return {"type": "budget_reached"}


def stop_requires_action(event_ids: list[str]) -> dict:
    return {"type": "requires_action", "event_ids": list(event_ids)}


def required_action_ids(idle_payload: dict) -> list[str]:
    """The tool uses a session.status_idle handed to the client (empty unless requires_action)."""
    reason = idle_payload.get("stop_reason") or {}
    return list(reason.get("event_ids") or []) if reason.get("type") == "requires_action" else []


def item(event_type: str, payload: dict | None = None, **extra) -> dict:
    """One entry for services.events.events_append_locked: {type, payload, id?, private?, processed_at?}."""
    return {"type": str(event_type), "payload": payload or {}, **extra}


# The session's stored usage totals (Session.usage; services.events adds each call's delta in
# the append): token counts, server tool requests, and the list cost in nano-USD.
USAGE_TOTAL_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "ephemeral_5m_input_tokens",
    "ephemeral_1h_input_tokens",
    "web_search_requests",
    "web_fetch_requests",
    "list_cost_nanousd",
)


def usage_delta(usage: dict, price) -> dict:
    """One model call's addition to the session's totals, from the Messages API `usage`; its
    list cost when the model has a list price (sessions/pricing.py)."""
    creation = usage.get("cache_creation") or {}
    server = usage.get("server_tool_use") or {}
    # Without the breakdown, cache writes are the default 5-minute kind.
    written_5m = creation.get("ephemeral_5m_input_tokens") if creation else usage.get("cache_creation_input_tokens")
    delta = {
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
        "cache_read_input_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "ephemeral_5m_input_tokens": int(written_5m or 0),
        "ephemeral_1h_input_tokens": int(creation.get("ephemeral_1h_input_tokens") or 0),
        "web_search_requests": int(server.get("web_search_requests") or 0),
        "web_fetch_requests": int(server.get("web_fetch_requests") or 0),
    }
    if price is not None:
        delta["list_cost_nanousd"] = pricing.call_cost_nanousd(price, usage)
    return delta


def usage_snapshot(totals: dict, *, active_seconds: float | None = None) -> dict:
    """The SDK's session usage (BetaManagedAgentsSessionUsage and the session.usage snapshot)
    from stored totals; `list_cost` once any call was priced."""
    snapshot = {key: int(totals.get(key) or 0) for key in ("input_tokens", "output_tokens", "cache_read_input_tokens")}
    snapshot["cache_creation"] = {
        "ephemeral_5m_input_tokens": int(totals.get("ephemeral_5m_input_tokens") or 0),
        "ephemeral_1h_input_tokens": int(totals.get("ephemeral_1h_input_tokens") or 0),
    }
    snapshot["server_tool_use"] = {
        "web_search_requests": int(totals.get("web_search_requests") or 0),
        "web_fetch_requests": int(totals.get("web_fetch_requests") or 0),
    }
    if "list_cost_nanousd" in totals:
        snapshot["list_cost"] = {"amount": pricing.cents(int(totals["list_cost_nanousd"])), "currency": "USD"}
    if active_seconds is not None:
        snapshot["active_seconds"] = round(active_seconds, 3)
    return snapshot


def session_usage(totals: dict, budget: dict | None) -> dict:
    """A session.usage event's payload."""
    return {"usage": usage_snapshot(totals), "budget": budget}


def primary_thread_id(session_id: str) -> str:
    """A session's primary thread: its id follows the session's. A child thread of a multiagent
    session is a session row of its own (Session.primary), whose id its thread id follows too."""
    return "sthr_" + session_id.split("_", 1)[-1]


thread_id_of = primary_thread_id  # the thread a session row runs (its primary, or a child thread)


def thread_session_id(thread_id: str) -> str:
    """The session row that runs `thread_id` (the inverse of thread_id_of)."""
    return "sesn_" + thread_id.split("_", 1)[-1]
