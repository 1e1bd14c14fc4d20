"""A session's event log as the operator reads it in the admin: a conversation, not JSON.

Each event becomes one transcript item (who, what, the text to show, what to fold); the admin's
session page renders the items (templates/admin/agent_sessions/session/transcript_items.html) and
its live endpoint renders the items of the events that arrive after the page's last one. Pure:
events in, items out; tenant text is escaped by the template."""

import json

# Output longer than this many lines (or characters) is folded (a <details> the operator opens).
FOLD_LINES = 12
FOLD_CHARS = 2000


def _text_of(blocks) -> str:
    if isinstance(blocks, str):
        return blocks
    parts = []
    for block in blocks or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" or (kind is None and "text" in block):
            parts.append(block.get("text", ""))
        elif kind in ("document", "image"):
            source = block.get("source") or {}
            parts.append(f"[{kind}: {source.get('file_id') or source.get('type') or 'inline'}]")
        elif kind == "thinking":
            parts.append(block.get("thinking", ""))
    return "\n".join(part for part in parts if part)


def _json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _folded(text: str) -> bool:
    return text.count("\n") >= FOLD_LINES or len(text) > FOLD_CHARS


def _usage(payload: dict) -> str:
    usage = payload.get("model_usage") or {}
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    shown = [f"{key.replace('_', ' ')}: {usage[key]}" for key in keys if usage.get(key)]
    cost = payload.get("cost") or usage.get("cost")
    if isinstance(cost, dict) and cost.get("amount") is not None:
        shown.append(f"cost: {cost['amount']} {cost.get('currency', '')}".strip())
    if payload.get("is_error"):
        shown.append("failed")
    return ", ".join(shown) or "no usage reported"


def transcript_item(*, seq: int, type: str, payload: dict, created_at) -> dict:
    """One event as the transcript shows it: {seq, kind (a CSS class), who, title, text, code,
    folded, created_at}."""
    item = {"seq": seq, "type": type, "created_at": created_at, "who": "", "title": "", "text": "", "code": ""}
    if type in ("user.message", "system.message", "agent.thread_message_received"):
        item |= {"kind": "user", "who": "user" if type == "user.message" else type.split(".")[0],
                 "text": _text_of(payload.get("content"))}  # fmt: skip
    elif type in ("agent.message", "agent.thread_message_sent"):
        item |= {"kind": "agent", "who": "agent", "text": _text_of(payload.get("content"))}
    elif type == "agent.thinking":
        item |= {
            "kind": "thinking",
            "who": "thinking",
            "text": payload.get("thinking") or _text_of(payload.get("content")),
        }
    elif type in ("agent.tool_use", "agent.mcp_tool_use", "agent.custom_tool_use"):
        name = payload.get("name", "?")
        if payload.get("mcp_server_name"):
            name = f"{payload['mcp_server_name']}: {name}"
        tool_input = payload.get("input") or {}
        shown = tool_input.get("command") if isinstance(tool_input.get("command"), str) else None
        item |= {"kind": "tool-use", "who": "tool use", "title": name,
                 "code": shown if shown is not None else _json(tool_input)}  # fmt: skip
    elif type in ("agent.tool_result", "agent.mcp_tool_result", "user.tool_result", "user.custom_tool_result"):
        error = bool(payload.get("is_error"))
        item |= {"kind": "tool-error" if error else "tool-result", "who": "tool result" + (" (error)" if error else ""),
                 "code": _text_of(payload.get("content"))}  # fmt: skip
    elif type == "session.error":
        error = payload.get("error") or {}
        item |= {"kind": "error", "who": "error", "title": error.get("type", ""), "text": error.get("message", "")}
    elif type == "span.model_request_end":
        item |= {"kind": "span", "who": "model call", "text": _usage(payload)}
    elif type.startswith("span.outcome_evaluation") or type == "user.define_outcome":
        result = payload.get("result") or payload.get("outcome") or {}
        text = result if isinstance(result, str) else _json(payload) if payload else ""
        item |= {"kind": "outcome", "who": "outcome", "title": type.split(".", 1)[1], "code": text}
    elif type.startswith("session.thread") or type.startswith("agent.thread"):
        name = payload.get("agent_name") or payload.get("name") or payload.get("session_thread_id") or ""
        item |= {"kind": "status", "who": "thread", "title": type.split(".", 1)[1], "text": str(name)}
    elif type.startswith("session.status") or type in ("session.deleted", "user.interrupt"):
        stop = (payload.get("stop_reason") or {}).get("type", "")
        item |= {"kind": "status", "who": type.split(".", 1)[1].replace("_", " "), "text": stop}
    else:
        item |= {"kind": "other", "who": type, "code": _json(payload) if payload else ""}
    item["folded"] = _folded(item["code"] or item["text"])
    return item


def transcript(events) -> list[dict]:
    return [
        transcript_item(seq=event.seq, type=event.type, payload=event.payload or {}, created_at=event.created_at)
        for event in events
    ]
