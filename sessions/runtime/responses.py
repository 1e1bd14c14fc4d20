"""A model response as the events it becomes: contiguous text as one agent.message (with the id
its streamed preview announced), thinking as agent.thinking, the upstream's own server tools as
agent.tool_use / agent.tool_result, and each tool use with its permission evaluated and its
ToolMode: run here, handed to the client (custom tools, always_ask, a self_hosted environment's
built-in tools), or unknown."""

from collections.abc import Callable

from core.ids import new_id
from sessions import events as ev
from sessions.events import SERVER_TOOL_RESULTS, SERVER_TOOL_USE, EventType, ToolMode
from sessions.runtime.judge import Judgement
from sessions.runtime.model import ModelReply
from sessions.runtime.tools import ToolSpec

Judge = Callable[[str, object], Judgement]  # (tool name, input) -> the auto policy's judgement
MODES = {"ask": ToolMode.CLIENT, "deny": ToolMode.DENIED}


def _tool_use_item(
    block: dict, specs: dict[str, ToolSpec], self_hosted: bool, judge: Judge | None = None
) -> tuple[dict, ToolMode]:
    name, tool_input = block.get("name"), block.get("input") or {}
    spec = specs.get(name)
    private = {"model_tool_use_id": block.get("id")}
    # session_thread_id names the subagent thread an event was cross-posted from: empty on the
    # primary thread's own events (the SDK's runner reads an empty one as the primary thread).
    payload = {"name": name, "input": tool_input, "session_thread_id": None}
    if spec is not None and spec.kind == "custom":
        return ev.item(EventType.AGENT_CUSTOM_TOOL_USE, payload, private=private), ToolMode.CLIENT
    if spec is not None and spec.kind == "mcp":
        return _mcp_tool_use_item(spec, tool_input, private, judge)
    if spec is None or spec.kind == "server":  # a server tool is the upstream's to run, never a tool_use of ours
        payload["evaluated_permission"] = "deny"
        mode = ToolMode.UNKNOWN
    elif spec.permission == ev.ToolPermission.ALWAYS_ASK:
        payload["evaluated_permission"] = "ask"
        payload["evaluation"] = {"type": "always_ask"}
        mode = ToolMode.CLIENT
    else:
        # A coordinator's thread tools are the server's to run, on self_hosted too.
        mode = ToolMode.CLIENT if self_hosted and spec.kind != "thread" else ToolMode.RUN
        payload["evaluated_permission"], payload["evaluation"] = "allow", {"type": "always_allow"}
        if spec.permission == ev.ToolPermission.AUTO and judge is None:  # no judge here: allowed
            payload["evaluation"] = {"type": "auto", "evaluated_permission": {"type": "allow"}}
        elif spec.permission == ev.ToolPermission.AUTO:
            judged = judge(name, tool_input)
            payload["evaluated_permission"], payload["evaluation"] = judged.decision, judged.evaluation()
            mode = MODES.get(judged.decision, mode)
    return ev.item(EventType.AGENT_TOOL_USE, payload, private=private), mode


def _evaluation(spec: ToolSpec, tool_input, judge: Judge | None) -> tuple[str, dict]:
    if spec.permission == ev.ToolPermission.ALWAYS_ASK:
        return "ask", {"type": "always_ask"}
    if spec.permission == ev.ToolPermission.AUTO and judge is None:  # no judge here: allowed
        return "allow", {"type": "auto", "evaluated_permission": {"type": "allow"}}
    if spec.permission == ev.ToolPermission.AUTO:
        judged = judge(spec.name, tool_input)
        return judged.decision, judged.evaluation()
    return "allow", {"type": "always_allow"}


def _mcp_tool_use_item(spec: ToolSpec, tool_input, private: dict, judge: Judge | None) -> tuple[dict, ToolMode]:
    """agent.mcp_tool_use: the tool's own name and its server's; always_ask waits for the
    client's user.tool_confirmation, otherwise this worker calls it (on self_hosted too: MCP
    tools run server-side, the SDK's EnvironmentWorker never sees them)."""
    permission, evaluation = _evaluation(spec, tool_input, judge)
    payload = {
        "name": spec.mcp.name,
        "mcp_server_name": spec.mcp.server,
        "input": tool_input if isinstance(tool_input, dict) else {},
        "evaluated_permission": permission,
        "evaluation": evaluation,
        "session_thread_id": None,
    }
    private = {**private, "model_name": spec.name}
    mode = MODES.get(permission, ToolMode.RUN)
    return ev.item(EventType.AGENT_MCP_TOOL_USE, payload, private=private), mode


def _server_tool_use_item(block: dict, server_uses: dict[str, str]) -> dict:
    """The upstream's own web_search / web_fetch call as agent.tool_use (the raw block kept
    privately: the conversation replays it as it came)."""
    event_id = new_id("sevt")
    server_uses[block.get("id")] = event_id
    payload = {
        "name": block.get("name"),
        "input": block.get("input") or {},
        "evaluated_permission": "allow",
        "evaluation": {"type": "always_allow"},
    }
    return ev.item(EventType.AGENT_TOOL_USE, payload, id=event_id, private={"model_block": block})


def _server_tool_result_item(block: dict, server_uses: dict[str, str]) -> dict:
    """Its result block as agent.tool_result: a text digest (titles and URLs, or the fetched
    page's title and URL) for clients, the raw block kept privately for the conversation."""
    content = block.get("content")
    is_error = isinstance(content, dict) and str(content.get("type", "")).endswith("_error")
    if is_error:
        text = f"The upstream's {block.get('type')} failed: {content.get('error_code', 'error')}."
    elif isinstance(content, list):
        text = (
            "\n".join(f"{item.get('title') or ''} {item.get('url') or ''}".strip() for item in content) or "No results."
        )
    elif isinstance(content, dict):
        text = f"Fetched {content.get('url') or ''}".strip()
    else:
        text = "Done."
    result = ev.tool_result(tool_use_id=server_uses.get(block.get("tool_use_id"), ""), text=text, is_error=is_error)
    return ev.item(EventType.AGENT_TOOL_RESULT, result, private={"model_block": block})


def response_items(reply: ModelReply, specs: dict[str, ToolSpec], self_hosted: bool, judge: Judge | None = None):
    """The events one model response becomes, each with its ToolMode (None for non-tool
    events). Contiguous text blocks form one agent.message, whose id is the one its streamed
    preview announced. `judge` judges each tool use under the auto policy (runtime.judge)."""
    items: list[dict] = []
    modes: list[ToolMode | None] = []
    text: list[dict] = []
    preview_ids = list(reply.preview_ids)
    thinking_ids = list(reply.thinking_ids)

    def flush_text():
        if text:
            event_id = preview_ids.pop(0) if preview_ids else None
            items.append(ev.item(EventType.AGENT_MESSAGE, {"content": list(text)}, id=event_id))
            modes.append(None)
            text.clear()

    server_uses: dict[str, str] = {}  # the upstream's server tool use id -> our event id
    for block in reply.response.get("content") or []:
        kind = block.get("type")
        if kind == SERVER_TOOL_USE:
            flush_text()
            items.append(_server_tool_use_item(block, server_uses))
            modes.append(None)  # run by the upstream, already done
        elif kind in SERVER_TOOL_RESULTS:
            flush_text()
            items.append(_server_tool_result_item(block, server_uses))
            modes.append(None)
        elif kind == "text":
            text.append({"type": "text", "text": block.get("text", "")})
        elif kind in ("thinking", "redacted_thinking"):
            flush_text()
            # A progress signal for clients (the SDK's agent.thinking carries no content); the
            # signed block itself is kept privately and goes back to the model in the tool loop.
            thinking_id = thinking_ids.pop(0) if thinking_ids else None
            items.append(ev.item(EventType.AGENT_THINKING, id=thinking_id, private={"model_block": block}))
            modes.append(None)
        elif kind == "tool_use":
            flush_text()
            item, mode = _tool_use_item(block, specs, self_hosted, judge)
            items.append(item)
            modes.append(mode)
    flush_text()
    return items, modes


def refused_result(tool_use: dict, *, denied: bool) -> dict:
    """The error result that answers at once a tool use of no known tool, or one the auto
    policy's judge denied (an agent.mcp_tool_result for an MCP tool's)."""
    name = tool_use["payload"]["name"]
    text = f"Denied: {name!r} was judged high-risk (auto permission policy)." if denied else f"Unknown tool {name!r}."
    if tool_use["type"] == EventType.AGENT_MCP_TOOL_USE:
        content = [{"type": "text", "text": text}]
        result = ev.mcp_tool_result(mcp_tool_use_id=tool_use["id"], content=content, is_error=True)
        return ev.item(EventType.AGENT_MCP_TOOL_RESULT, result)
    return ev.item(EventType.AGENT_TOOL_RESULT, ev.tool_result(tool_use_id=tool_use["id"], text=text, is_error=True))
