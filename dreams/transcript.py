"""The input sessions' transcripts as the text of the dream's first user message: user and agent
messages in full, tool uses and results summarised, oldest first per session; bounded by
MANGO_DREAM_TRANSCRIPT_MAX_CHARS, keeping the most recent text (the start is cut)."""

import json

from django.conf import settings

from core.limits import EVENT_TEXT_MAX_CHARS
from sessions.selectors.runner import session_conversation_events

SUMMARY_CHARS = 200
HEADER = (
    "Here are the transcripts of the sessions to learn from. Reorganize the memory store mounted at {path}"
    " as your instructions say, then end your turn.\n\n"
)


def _text(blocks) -> str:
    if isinstance(blocks, str):
        return blocks
    parts = []
    for block in blocks or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text") or "")
        elif isinstance(block, dict) and block.get("type") in ("image", "document"):
            parts.append(f"[{block['type']}]")
    return "\n".join(parts)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _line(type: str, payload: dict) -> str | None:
    if type == "user.message":
        return f"User: {_text(payload.get('content'))}"
    if type == "agent.message":
        return f"Agent: {_text(payload.get('content'))}"
    if type in ("agent.tool_use", "agent.mcp_tool_use", "agent.custom_tool_use"):
        arguments = json.dumps(payload.get("input") or {}, ensure_ascii=False, separators=(",", ":"))
        return f"[tool use: {payload.get('name')} {_short(arguments)}]"
    if type in ("agent.tool_result", "agent.mcp_tool_result"):
        flag = " (error)" if payload.get("is_error") else ""
        return f"[tool result{flag}: {_short(_text(payload.get('content')))}]"
    return None


def session_transcript(session_id: str) -> str:
    lines = [_line(row.type, row.payload) for row in session_conversation_events(session_id=session_id)]
    return "\n".join(line for line in lines if line)


def dream_prompt(*, session_ids: list[str], mount: str) -> str:
    body = "\n\n".join(f'<session id="{sid}">\n{session_transcript(sid)}\n</session>' for sid in session_ids)
    header = HEADER.format(path=mount)
    bound = min(settings.MANGO_DREAM_TRANSCRIPT_MAX_CHARS, EVENT_TEXT_MAX_CHARS - len(header) - 64)
    if len(body) > bound:
        body = "[earlier transcript cut]\n" + body[-bound:]
    return header + body
