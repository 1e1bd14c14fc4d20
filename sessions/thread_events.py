"""The events of a multiagent session's threads: a child thread's status events (cross-posted
to its primary's log), the copies of its tool uses handed to the client, and the messages
between threads (sessions.events holds the rest of the vocabulary)."""

from core.ids import new_id
from sessions.events import EventType as E
from sessions.events import item, required_action_ids, thread_id_of

# The status events of a session, and of a child thread (on its own log, cross-posted to the
# primary's): session.status_X there is session.thread_status_X here.
THREAD_STATUS_TYPES = {
    E.SESSION_STATUS_RUNNING.value: E.SESSION_THREAD_STATUS_RUNNING.value,
    E.SESSION_STATUS_IDLE.value: E.SESSION_THREAD_STATUS_IDLE.value,
    E.SESSION_STATUS_RESCHEDULED.value: E.SESSION_THREAD_STATUS_RESCHEDULED.value,
    E.SESSION_STATUS_TERMINATED.value: E.SESSION_THREAD_STATUS_TERMINATED.value,
}


def status_item(event_type: str, session, payload: dict | None = None) -> dict:
    """A status event of the session row `session` (a Session: only its id, primary_id and
    thread_agent_name are read): session.status_* for a primary; for a child thread its
    session.thread_status_* naming the thread and its agent, marked to be cross-posted to its
    primary's log (services.events appends the copy)."""
    if getattr(session, "primary_id", None) is None:
        return item(event_type, payload)
    named = {"session_thread_id": thread_id_of(session.id), "agent_name": session.thread_agent_name}
    payload = {**named, **(payload or {})}
    # The copy's id is the original's with a `t` (thread_copy_id), and the original says so
    # (private STATUS_COPY): a copy a crash lost is made again (services.threads).
    event_id = new_id("sevt")
    status = item(
        THREAD_STATUS_TYPES[str(event_type)],
        payload,
        id=event_id,
        crosspost=session.primary_id,
        private={STATUS_COPY: thread_copy_id(event_id)},
    )
    status["crosspost_copy"] = {"id": thread_copy_id(event_id), "payload": status_copy_payload(payload)}
    return status


# The private key of a thread status event whose copy on its primary's log has a known id.
STATUS_COPY = "status_copy"


def status_copy_payload(payload: dict) -> dict:
    """A thread status event's payload as its copy on the primary's log has it: a requires_action
    idle lists the copies of the tool uses it hands over (crosspost_tool_use)."""
    handed = required_action_ids(payload)
    if not handed:
        return payload
    reason = {**payload["stop_reason"], "event_ids": [thread_copy_id(event_id) for event_id in handed]}
    return {**payload, "stop_reason": reason}


# A child thread's tool use handed to the client is cross-posted to its primary's log (where the
# client's tool runner reads it, marked with session_thread_id) under an id derived from its own
# (one character longer than any id new_id makes: no collision), kept in the copy's private
# THREAD_COPY (the child's session id) with the original's id. The client answers either id on
# the session; services.user_events routes the answer to the thread. Copies, and the records of the
# answers routed from the primary's log, are left out of the primary's conversation and tools.
THREAD_COPY = "thread_copy"


def thread_copy_id(event_id: str) -> str:
    return event_id + "t"


def crosspost_tool_use(tool_use: dict, thread) -> dict:
    """`tool_use` (an item with its id set, of the child thread `thread`) marked to be
    cross-posted to the primary's log as a copy naming the thread."""
    copy_payload = {**tool_use["payload"], "session_thread_id": thread_id_of(thread.id)}
    private = {THREAD_COPY: thread.id, "thread_event": tool_use["id"]}
    tool_use["crosspost"] = thread.primary_id
    tool_use["crosspost_copy"] = {"id": thread_copy_id(tool_use["id"]), "payload": copy_payload, "private": private}
    return tool_use


def thread_message_received(*, content: list[dict], from_thread_id: str, from_agent_name: str | None) -> dict:
    """agent.thread_message_received's payload (from_agent_name absent when from the primary)."""
    payload = {"content": content, "from_session_thread_id": from_thread_id}
    if from_agent_name:
        payload["from_agent_name"] = from_agent_name
    return payload


def thread_message_sent(*, content: list[dict], to_thread_id: str, to_agent_name: str | None) -> dict:
    payload = {"content": content, "to_session_thread_id": to_thread_id}
    if to_agent_name:
        payload["to_agent_name"] = to_agent_name
    return payload


def thread_message_model_content(*, content: list[dict], from_thread_id: str, from_agent_name: str | None) -> list:
    """What the receiving agent's model reads of a thread message: who sent it, then its text."""
    sender = f"the agent {from_agent_name!r} (thread {from_thread_id})" if from_agent_name else "the coordinator"
    text = "".join(block.get("text", "") for block in content if block.get("type") == "text")
    return [{"type": "text", "text": f"[Message from {sender}]\n{text}"}]
