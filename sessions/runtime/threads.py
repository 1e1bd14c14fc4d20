"""The coordinator's thread tools: what a multiagent session's primary thread is offered to
spawn a thread of one of its roster's agents and to message a thread, and their execution
(sessions.services.threads). Only the primary thread spawns (the roster's agents have no
multiagent of their own: depth 1); every thread's reply comes back to it as a message."""

from agents.multiagent import roster_entries
from sessions.events import thread_id_of, thread_session_id
from sessions.models import Session
from sessions.services.threads import ThreadRefused, thread_message_send, thread_spawn

SPAWN = "spawn_agent"
MESSAGE = "message_agent"
THREAD_TOOLS = (SPAWN, MESSAGE)


def thread_roster(session: Session) -> list[dict]:
    """The agents a session's primary thread may spawn (their full definitions); none for a
    child thread or a single-agent session."""
    if session.primary_id is not None:
        return []
    return [entry for _field, entry in roster_entries(session.agent_snapshot.get("multiagent"))]


def thread_tool_definitions(roster: list[dict]) -> list[dict]:
    """The two tools as the model sees them (none without a roster)."""
    if not roster:
        return []
    listing = "\n".join(f"- {agent['name']}: {agent.get('description') or 'no description'}" for agent in roster)
    return [
        {
            "name": SPAWN,
            "description": "Start a new thread running one of these agents, with its own context, in the session's "
            "sandbox (a shared /workspace), and send it a first message. Threads run concurrently; each one's "
            "reply arrives as a message from its thread when it finishes its turn, and your turn continues "
            f"until every thread has replied.\nAgents:\n{listing}",
            "input_schema": {
                "type": "object",
                "properties": {
                    "agent": {"type": "string", "enum": sorted({agent["name"] for agent in roster})},
                    "message": {"type": "string", "description": "The task for the agent."},
                },
                "required": ["agent", "message"],
            },
        },
        {
            "name": MESSAGE,
            "description": "Send a follow-up message to a thread started earlier (it keeps its context).",
            "input_schema": {
                "type": "object",
                "properties": {
                    "session_thread_id": {"type": "string"},
                    "message": {"type": "string"},
                },
                "required": ["session_thread_id", "message"],
            },
        },
    ]


def thread_tool_run(*, session: Session, name: str, tool_input: dict) -> tuple[str, bool]:
    """Run one thread tool for the primary thread `session`: (result text, is_error)."""
    message = tool_input.get("message")
    if not isinstance(message, str) or not message.strip():
        return "message: a non-empty string is required.", True
    content = [{"type": "text", "text": message}]
    try:
        if name == SPAWN:
            wanted = tool_input.get("agent")
            roster = thread_roster(session)
            definition = next((a for a in roster if a["name"] == wanted), None) or next(
                (a for a in roster if a["id"] == wanted), None
            )
            if definition is None:
                names = ", ".join(repr(a["name"]) for a in roster)
                return f"agent: no agent {wanted!r} in the roster ({names}).", True
            child = thread_spawn(primary=session, definition=definition, content=content)
            return (
                f"Started thread {thread_id_of(child.id)} running agent {definition['name']!r}."
                " Its reply will arrive as a message from that thread.",
                False,
            )
        thread_id = tool_input.get("session_thread_id")
        if not isinstance(thread_id, str) or not thread_id.startswith("sthr_"):
            return "session_thread_id: a thread id (sthr_…) is required.", True
        target = thread_message_send(sender=session, target_id=thread_session_id(thread_id), content=content)
        return f"Sent to thread {thread_id_of(target.id)}.", False
    except ThreadRefused as refused:
        return str(refused), True
