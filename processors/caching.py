"""Prompt-caching breakpoints for every model call (issue 24), pure.

The Messages API caches the prompt prefix up to each `cache_control` breakpoint, at most four
per request. A turn's calls share their prefix (tools, system, the conversation so far), so:
one breakpoint on the last tool definition, one on the system prompt, and the rest on the
rolling tail of the conversation: the last block of the last message (what the next call
reads back) and of the message before it (what this call reads back, written by the previous
call). Breakpoints the client put on its own content blocks count toward the four and are kept;
ours fill what remains, tail first.
"""

import json

MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}


def _client_breakpoints(messages: list[dict]) -> int:
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("cache_control")
    )


def with_breakpoints(
    *, system: str | list | None, tools: list[dict], messages: list[dict]
) -> tuple[list | None, list[dict], list[dict]]:
    """(system, tools, messages) with cache_control breakpoints added. The inputs are unchanged:
    only the lists, messages and blocks that get a breakpoint are copied (shallowly), the rest is
    shared with them (a deep copy of the conversation and tools on every call cost ~1 ms)."""
    budget = MAX_BREAKPOINTS - _client_breakpoints(messages)
    messages = list(messages)
    tail = []  # the (copied) content lists of the last two messages, newest first
    for index in range(len(messages) - 1, -1, -1):
        if len(tail) == 2:
            break
        message = messages[index] = dict(messages[index])
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            content = list(content)
        message["content"] = content
        if isinstance(content, list) and content and isinstance(content[-1], dict):
            tail.append(content)
    for content in tail:
        if budget <= 0:
            break
        block = content[-1]
        if not block.get("cache_control") and block.get("type") not in ("thinking", "redacted_thinking"):
            content[-1] = {**block, "cache_control": dict(EPHEMERAL)}
            budget -= 1
    system_blocks = None
    if system:
        system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
        if budget > 0 and not system_blocks[-1].get("cache_control"):
            system_blocks[-1] = {**system_blocks[-1], "cache_control": dict(EPHEMERAL)}
            budget -= 1
    tools = list(tools)
    if tools and budget > 0 and not tools[-1].get("cache_control"):
        tools[-1] = {**tools[-1], "cache_control": dict(EPHEMERAL)}
    return system_blocks, tools, messages


def prefix_share(request: dict) -> float:
    """The share of a request's prompt bytes (tools, system, messages, as JSON) that lies before
    its last cache breakpoint: what a real upstream bills at the cache-read price on a hit."""
    parts = [("tools", request.get("tools") or []), ("system", request.get("system") or []),
             ("messages", request.get("messages") or [])]  # fmt: skip
    text = json.dumps([value for _, value in parts], separators=(",", ":"))
    marker = '"cache_control":'
    last = text.rfind(marker)
    if last < 0:
        return 0.0
    # Everything up to the end of the block that holds the last breakpoint.
    end = text.find("}", text.find("}", last) + 1)
    return (end + 1) / len(text) if text else 0.0
