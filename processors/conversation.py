"""Rendering a session's stored events for the model: the Messages API conversation of a turn,
the grader's verdict as feedback for the agent, and the grader's view of the work. Pure: the
events are any objects with `id`, `type`, `payload` and `private` (the ORM rows in production);
no Django, no database.

The type names are those of `sessions.events.EventType` (processors import no app; a test
checks that the two agree).
"""

import json
from collections.abc import Iterable
from typing import Protocol

USER_SIDE = ("user.message", "agent.thread_message_received", "user.define_outcome", "span.outcome_evaluation_end")
TOOL_USES = ("agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use")
TOOL_RESULTS = ("agent.tool_result", "agent.mcp_tool_result", "user.tool_result", "user.custom_tool_result")
EVALUATION_END = "span.outcome_evaluation_end"
INTERRUPTED_RESULT = "No result: the call was interrupted."


class Event(Protocol):
    id: str
    type: str
    payload: dict
    private: dict


def tool_use_id_of(payload: dict) -> str | None:
    """The tool use a result answers (custom tools name it custom_tool_use_id, MCP tools mcp_tool_use_id)."""
    return payload.get("tool_use_id") or payload.get("custom_tool_use_id") or payload.get("mcp_tool_use_id")


def _refused_note(reason: str) -> list[dict]:
    return [{"type": "text", "text": f"[Content left out: the model refused it earlier ({reason})]"}]


def user_blocks(event: Event) -> list[dict]:
    """The model-facing content of a user event. Admission may store a rewritten form in
    event.private["model_content"] (documents resolved to text); content the upstream refused
    (private["model_refused"]) is replaced by a note."""
    if "model_refused" in event.private:
        return _refused_note(event.private["model_refused"])
    if "model_content" in event.private:
        return list(event.private["model_content"])
    if event.type == "user.define_outcome":
        rubric = event.payload.get("rubric") or {}
        rubric_text = (
            event.private.get("rubric_text") or rubric.get("content") or f"(rubric file {rubric.get('file_id')})"
        )
        return [
            {
                "type": "text",
                "text": f"Outcome to achieve: {event.payload.get('description', '')}\n\nRubric:\n{rubric_text}",
            }
        ]
    blocks = []
    for block in event.payload.get("content") or []:
        if block.get("type") == "redacted":
            continue
        if block.get("type") == "text":
            blocks.append({"type": "text", "text": block.get("text", "")})
        else:
            blocks.append(block)
    return blocks


def feedback_blocks(event: Event) -> list[dict]:
    """How an evaluation (span.outcome_evaluation_end) reaches the working agent (user side)."""
    result = event.payload.get("result")
    explanation = event.payload.get("explanation", "")
    if result == "needs_revision":
        text = (
            "A grader checked your work against the rubric and found it does not yet satisfy it:\n"
            f"{explanation}\nRevise the work to meet every criterion."
        )
    elif result == "max_iterations_reached":
        text = (
            "A grader checked your work against the rubric and it still does not satisfy it:\n"
            f"{explanation}\nNo more revisions will be evaluated. Briefly acknowledge what remains unmet."
        )
    else:
        return []
    return [{"type": "text", "text": text}]


def _result_block(tool_use_id: str, payload: dict, private: dict | None = None) -> dict:
    private = private or {}
    content = private.get("model_content") or payload.get("content")
    if "model_refused" in private:
        content = _refused_note(private["model_refused"])
    block = {"type": "tool_result", "tool_use_id": tool_use_id}
    if content:
        block["content"] = content
    if payload.get("is_error"):
        block["is_error"] = True
    return block


class _Conversation:
    """Messages under construction: consecutive blocks of one role merge into one message; tool
    uses stay open until answered, and user text arriving meanwhile waits behind the results."""

    def __init__(self):
        self.messages: list[dict] = []
        self.open_ids: list[str] = []
        self.deferred: list[dict] = []

    def add(self, role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
        else:
            self.messages.append({"role": role, "content": list(blocks)})

    def flush_deferred(self) -> None:
        if self.deferred:
            self.add("user", list(self.deferred))
            self.deferred.clear()

    def close_open(self) -> None:
        """Unanswered tool uses (an interrupted call) get an error result; then deferred text."""
        if self.open_ids:
            self.add(
                "user",
                [
                    {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": INTERRUPTED_RESULT}
                    for tool_id in self.open_ids
                ],
            )
            self.open_ids.clear()
        self.flush_deferred()

    def system(self, blocks: list[dict]) -> None:
        """A system turn follows the input it accompanies (user text deferred behind open tool
        uses goes first once they are answered)."""
        if not self.open_ids:
            self.flush_deferred()
        self.add("system", blocks)

    def user(self, blocks: list[dict]) -> None:
        if self.open_ids:
            self.deferred.extend(blocks)
        else:
            self.add("user", blocks)

    def tool_use(self, event: Event) -> None:
        if self.deferred:
            self.close_open()
        # An MCP tool is offered to the model under its collision-free name (kept privately).
        name = (event.private or {}).get("model_name") or event.payload["name"]
        block = {"type": "tool_use", "id": event.id, "name": name}
        block["input"] = event.payload.get("input") or {}
        self.add("assistant", [block])
        self.open_ids.append(event.id)

    def tool_result(self, event: Event) -> None:
        tool_id = tool_use_id_of(event.payload)
        if tool_id not in self.open_ids:
            return
        self.open_ids.remove(tool_id)
        self.add("user", [_result_block(tool_id, event.payload, event.private)])
        if not self.open_ids:
            self.flush_deferred()


def build_messages(events: Iterable[Event]) -> list[dict]:
    """Messages API conversation from the stored events. Tool uses are identified by their event
    ids; every tool_use gets a tool_result first in the next user message (a missing one — an
    interrupted call — becomes an error result), and user text that arrived while tools were
    outstanding follows the results."""
    conversation = _Conversation()
    for event in events:
        kind = event.type
        if kind in USER_SIDE:
            conversation.user(feedback_blocks(event) if kind == EVALUATION_END else user_blocks(event))
        elif kind == "system.message":
            # Privileged context as a `role: system` turn right after what it accompanies (the
            # SDK's rule), never as user text and never in place of the top-level system prompt.
            conversation.system(user_blocks(event))
        elif kind == "agent.message":
            conversation.close_open()
            text = [b for b in event.payload.get("content") or [] if b.get("type") == "text"]
            conversation.add("assistant", [{"type": "text", "text": b.get("text", "")} for b in text])
        elif "model_block" in event.private:
            # A block the model produced that goes back as it came, in the assistant's turn: its
            # thinking (signed; required back in a tool loop) and its server tools' calls and
            # results (web search / fetch), which nothing of ours answers.
            conversation.add("assistant", [event.private["model_block"]])
        elif kind in TOOL_USES:
            conversation.tool_use(event)
        elif kind in TOOL_RESULTS:
            conversation.tool_result(event)
    if conversation.deferred and not conversation.open_ids:
        conversation.flush_deferred()
    if conversation.open_ids and conversation.deferred:
        conversation.close_open()
    messages = conversation.messages
    # The conversation must start with a user message.
    while messages and messages[0]["role"] != "user":
        messages.pop(0)
    return messages


def grader_transcript(events: Iterable[Event], *, max_chars: int) -> str:
    """The agent's work as the grader reads it: one line per message, tool call and result; the
    tail when it is longer than `max_chars`."""
    lines = []
    for event in events:
        payload = event.payload
        if event.type == "agent.message":
            lines.append("AGENT: " + "".join(b.get("text", "") for b in payload.get("content") or []))
        elif event.type in TOOL_USES:
            lines.append(f"TOOL CALL {payload.get('name')}: {json.dumps(payload.get('input') or {})}")
        elif event.type in TOOL_RESULTS:
            content = payload.get("content") or []
            text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
            lines.append(f"TOOL RESULT{' (error)' if payload.get('is_error') else ''}: {text}")
        elif event.type == "user.message":
            lines.append("USER: " + "".join(b.get("text", "") for b in payload.get("content") or [] if "text" in b))
        elif event.type == EVALUATION_END:
            lines.append(f"GRADER ({payload.get('result')}): {payload.get('explanation', '')}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "…" + text[-max_chars:]
