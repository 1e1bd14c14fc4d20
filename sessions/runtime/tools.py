"""The built-in toolset (agent_toolset_20260401) and the session's MCP tools as presented to the
model, and the tool executor: built-in tools run inside the session's sandbox (runtime.builtins,
once runtime.sandbox_ready has made it ready), each answered by one agent.tool_result; MCP tools
are called by this worker (sessions.runtime.mcp; on self_hosted environments too: MCP tools run
server-side), each answered by one agent.mcp_tool_result; confirmed always_ask uses run, denied
ones get an error result; on resume, the dead runner's unfinished uses get an error result."""

from dataclasses import dataclass

from django.conf import settings

import sandboxes as sandbox
from agents.configs import TOOLSET_TYPE
from sessions import events as ev
from sessions.events import SERVER_TOOL_TYPES, EventType
from sessions.models import Session, SessionEvent
from sessions.runtime.builtins import SANDBOX_TOOLS, ToolOutcome, run_builtin
from sessions.runtime.control import Stop, TurnControl, db_release
from sessions.runtime.mcp import McpFailure, McpTool, SessionMcp
from sessions.runtime.sandbox_ready import sandbox_ready
from sessions.runtime.threads import THREAD_TOOLS, Roster, thread_tool_definitions, thread_tool_run
from sessions.runtime.workflows import START
from sessions.selectors.runner import (
    session_answered_tool_use_ids,
    session_by_id,
    session_last_idle_seq,
    session_tool_confirmations,
    session_tool_uses,
)
from sessions.services.events import SessionGone, events_append
from sessions.thread_events import THREAD_COPY

TOOL_DEFINITIONS = {
    "bash": {
        "description": "Run a shell command (/bin/sh) in the session's sandbox. Returns the combined "
        "stdout and stderr and the exit status.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run."},
                "restart": {
                    "type": "boolean",
                    "description": "Start a new shell (each call runs in a fresh one here); with no command, "
                    "nothing else runs.",
                },
                "timeout_ms": {"type": "integer", "description": "Optional timeout in milliseconds."},
            },
        },
    },
    "read": {
        "description": "Read a text file in the sandbox, with line numbers.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] line"},
            },
            "required": ["file_path"],
        },
    },
    "write": {
        "description": "Create or overwrite a file in the sandbox.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["file_path", "content"],
        },
    },
    "edit": {
        "description": "Replace an exact string in a file in the sandbox (once, unless replace_all).",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
    "glob": {
        "description": "List files matching a glob pattern (** matches across directories).",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
    "grep": {
        "description": "Search file contents with an extended regular expression.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
}
# The toolset's web tools are the upstream's server tools (it searches and fetches, not us):
# offered with the agent's options when MANGO_MODEL_SERVER_WEB_TOOLS is on, not at all otherwise.
SERVER_TOOL_OPTIONS = {
    "web_search": ("allowed_domains", "blocked_domains", "user_location"),
    "web_fetch": ("allowed_domains", "blocked_domains", "max_content_tokens"),
}


@dataclass
class ToolSpec:
    name: str
    kind: str  # "builtin" | "custom" | "server" (run by the upstream) | "mcp" | "thread" (always ours)
    permission: ev.ToolPermission  # builtin and mcp
    mcp: McpTool | None = None


def session_tools(
    agent_snapshot: dict, mcp: SessionMcp | None = None, roster: Roster | None = None
) -> tuple[list[dict], dict[str, ToolSpec]]:
    """The tool list sent to the model and a name → spec map for dispatch (keyed by the name the
    model uses: MCP tools get names that collide with no other tool). A coordinator (a primary
    thread with a `roster`) is offered the thread tools too (runtime.threads)."""
    definitions, specs = [], {}
    for definition in thread_tool_definitions(roster) if roster is not None else []:
        definitions.append(definition)
        specs[definition["name"]] = ToolSpec(definition["name"], "thread", ev.ToolPermission.ALWAYS_ALLOW)
    for tool in agent_snapshot.get("tools", []):
        if tool["type"] == TOOLSET_TYPE:
            for config in tool["configs"]:
                if not config["enabled"]:
                    continue
                name = config["name"]
                if name in SERVER_TOOL_TYPES:
                    # An agent stored before always_ask on a web tool was refused (agents.tools): never
                    # offered, so never run unconfirmed (the upstream runs it inside its own call).
                    asks = config["permission_policy"]["type"] == ev.ToolPermission.ALWAYS_ASK
                    if settings.MANGO_MODEL_SERVER_WEB_TOOLS and not asks:
                        options = {key: config[key] for key in SERVER_TOOL_OPTIONS[name] if config.get(key) is not None}
                        definitions.append({"type": SERVER_TOOL_TYPES[name], "name": name, **options})
                        specs[name] = ToolSpec(name, "server", ev.ToolPermission.ALWAYS_ALLOW)
                    continue
                definitions.append({"name": name, **TOOL_DEFINITIONS[name]})
                specs[name] = ToolSpec(name, "builtin", ev.ToolPermission(config["permission_policy"]["type"]))
        elif tool["type"] == "custom":
            definitions.append(
                {"name": tool["name"], "description": tool["description"], "input_schema": tool["input_schema"]}
            )
            specs[tool["name"]] = ToolSpec(tool["name"], "custom", ev.ToolPermission.ALWAYS_ALLOW)
    if mcp:
        for tool in mcp.tools(taken=set(specs)):
            definitions.append(
                {"name": tool.model_name, "description": tool.description, "input_schema": tool.input_schema}
            )
            specs[tool.model_name] = ToolSpec(tool.model_name, "mcp", ev.ToolPermission(tool.permission), mcp=tool)
    return definitions, specs


# --- the executor ----------------------------------------------------------------------------


def _answer(
    session_id: str,
    tool_use_id: str,
    text: str,
    *,
    is_error: bool,
    stop_if_deleted: bool = False,
    mcp: bool = False,
    extra: list[dict] | None = None,
) -> None:
    """Append the tool result (agent.mcp_tool_result for an MCP tool use); with stop_if_deleted,
    raise Stop instead when the session was deleted meanwhile (a condition of the append itself:
    no query of its own). `extra` events go first, in the same append."""
    if mcp:
        content = [{"type": "text", "text": text}]
        result = ev.item(
            EventType.AGENT_MCP_TOOL_RESULT,
            ev.mcp_tool_result(mcp_tool_use_id=tool_use_id, content=content, is_error=is_error),
        )
    else:
        result = ev.item(
            EventType.AGENT_TOOL_RESULT, ev.tool_result(tool_use_id=tool_use_id, text=text, is_error=is_error)
        )
    _append(session_id, [*(extra or []), result], stop_if_deleted=stop_if_deleted)


def _append(session_id: str, items: list[dict], *, stop_if_deleted: bool) -> None:
    try:
        events_append(session_id=session_id, items=items, unless_deleted=stop_if_deleted)
    except SessionGone:
        raise Stop() from None


def mcp_failure_item(failure: McpFailure) -> dict:
    """The session.error of an MCP server that could not be reached or refused the authorization
    (its message names the server and never carries a secret). `retrying`, as a repository's: the
    turn is not dead (the SDK's `exhausted`), it goes on without that server's tools, and the next
    turn connects again."""
    payload = ev.session_error(
        message=failure.message, error_type=failure.error_type, retrying=True, mcp_server_name=failure.server
    )
    return ev.item(EventType.SESSION_ERROR, payload)


def mcp_tool_run(*, control: TurnControl, session: Session, event: SessionEvent, mcp: SessionMcp) -> None:
    """Call one MCP tool (this worker is the MCP client) and append its agent.mcp_tool_result.
    A server that cannot be reached or refuses the authorization is a session.error naming it,
    and the use gets an error result: the turn goes on."""
    payload = event.payload
    control.check_stop()
    db_release()  # no connection held while the MCP server answers
    try:
        result = mcp.call(server=payload["mcp_server_name"], tool=payload["name"], arguments=payload.get("input") or {})
    except McpFailure as failure:
        _answer(
            control.session_id,
            event.id,
            failure.message,
            is_error=True,
            stop_if_deleted=True,
            mcp=True,
            extra=[mcp_failure_item(failure)],
        )
        return
    item = ev.item(
        EventType.AGENT_MCP_TOOL_RESULT,
        ev.mcp_tool_result(mcp_tool_use_id=event.id, content=result.content, is_error=result.is_error),
    )
    _append(control.session_id, [item], stop_if_deleted=True)


def tool_run(*, control: TurnControl, session: Session, event: SessionEvent, mcp: SessionMcp | None = None) -> None:
    """Execute one built-in (or MCP) tool use and append its result. Raises Stop when the session was
    deleted meanwhile (nothing more is logged) or the command was interrupted."""
    if event.type == EventType.AGENT_MCP_TOOL_USE:
        if mcp is None:
            _answer(control.session_id, event.id, "MCP is unavailable in this turn.", is_error=True, mcp=True)
            return
        return mcp_tool_run(control=control, session=session, event=event, mcp=mcp)
    name = event.payload["name"]
    if name in THREAD_TOOLS:  # offered to a coordinator only (session_tools)
        tool_input = event.payload.get("input") or {}
        text, is_error = thread_tool_run(session=session, name=name, tool_input=tool_input, tool_use_id=event.id)
        _answer(control.session_id, event.id, text, is_error=is_error, stop_if_deleted=True)
        return
    try:
        if name in SANDBOX_TOOLS:
            sandbox_ready(control, session)
        db_release()  # no connection held while the command runs
        try:
            outcome = run_builtin(
                session_id=session.id,
                name=name,
                tool_input=event.payload.get("input") or {},
                should_cancel=control.should_stop,
            )
        except sandbox.SandboxGone:
            # The sandbox went (dockerd restarted, removed by hand): nothing of the call ran. It is
            # made again (from its checkpoint, if it slept before) and the call runs there.
            sandbox_ready(control, session, gone=True)
            db_release()
            outcome = run_builtin(
                session_id=session.id,
                name=name,
                tool_input=event.payload.get("input") or {},
                should_cancel=control.should_stop,
            )
    except sandbox.SandboxError as exc:
        outcome = ToolOutcome(f"The sandbox is unavailable: {exc}", is_error=True)
    # Deleted meanwhile (its sandbox went with it): Stop, nothing more is logged.
    _answer(control.session_id, event.id, outcome.text, is_error=outcome.is_error, stop_if_deleted=True)
    if outcome.cancelled:
        raise Stop()


def tools_run_confirmed(
    *, control: TurnControl, session: Session, mcp: SessionMcp | None = None, sandbox: Session | None = None
) -> None:
    """Answer always_ask tool uses the client confirmed (run them, in the sandbox of `sandbox`:
    a child thread's primary) or denied (error result). On self_hosted a confirmed built-in tool
    is the client's to run (its user.tool_result answers it): never run in a sandbox of ours; a
    confirmed MCP tool is ours to call everywhere. A child thread's tool uses cross-posted to a
    primary's log are the thread's to answer, never the primary's."""
    confirmations = session_tool_confirmations(session_id=session.id)
    if not confirmations:
        return
    answered = session_answered_tool_use_ids(session_id=session.id)
    self_hosted = session.tool_host.client_runs_tools
    for tool_use in session_tool_uses(session_id=session.id, ids=list(confirmations)):
        if tool_use.id in answered or THREAD_COPY in tool_use.private:
            continue
        confirmation = confirmations[tool_use.id]
        is_mcp = tool_use.type == EventType.AGENT_MCP_TOOL_USE
        if confirmation["result"] == "allow":
            if is_mcp or not self_hosted:
                tool_run(control=control, session=sandbox or session, event=tool_use, mcp=mcp)
        else:
            message = confirmation.get("deny_message") or "The user denied this tool call."
            _answer(session.id, tool_use.id, message, is_error=True, mcp=is_mcp)


def tools_answer_dangling(*, session_id: str) -> None:
    """On resume, built-in tool uses of the interrupted turn (after the last idle) that the
    dead worker was executing, and that never got a result, are answered with an error."""
    answered = session_answered_tool_use_ids(session_id=session_id)
    confirmed = session_answered_tool_use_ids(session_id=session_id, types=(EventType.USER_TOOL_CONFIRMATION,))
    for tool_use in session_tool_uses(session_id=session_id, after_seq=session_last_idle_seq(session_id=session_id)):
        if tool_use.id in answered or tool_use.id in confirmed or THREAD_COPY in tool_use.private:
            continue
        if tool_use.payload.get("evaluated_permission") != "allow":
            continue
        mcp = tool_use.type == EventType.AGENT_MCP_TOOL_USE
        text, is_error = "The worker running this tool stopped before it finished.", True
        if tool_use.payload.get("name") == START:  # its run may be under way: found by the call, or started now
            session = session_by_id(session_id=session_id)
            text, is_error = thread_tool_run(
                session=session, name=START, tool_input=tool_use.payload.get("input") or {}, tool_use_id=tool_use.id
            )
        _answer(session_id, tool_use.id, text, is_error=is_error, mcp=mcp)
