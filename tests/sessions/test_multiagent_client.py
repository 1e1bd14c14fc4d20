"""Multiagent sessions whose subagents need their client (issue 39): a subagent's custom tool
call, an always_ask confirmation and its own skills. The thread's tool use is on its own log and
cross-posted to the session's with session_thread_id; the session goes idle with requires_action
listing the copies; the client answers on the session (by either id) and the server routes the
answer to the thread, whose report then reaches the coordinator. The SDK with strict response
validation, the scripted model, a real worker and Docker sandbox; the 2.17 session tool runner
answers a subagent's custom tool by itself."""

import asyncio
import threading
import time

import anthropic
import pytest
from anthropic.lib import files_from_dir

from sessions.models import Session
from sessions.runtime.threads import thread_tool_run
from sessions.tasks import session_recover_stuck
from tests.scripted_model import request_system, request_user_texts, text, tool_use
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for
from tests.sessions.test_skills import make_skill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

MODEL = "claude-sonnet-4-5"
TOOLSET = [{"type": "agent_toolset_20260401"}]
LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
}
# The web tools run inside the upstream's model call (nothing to ask before they run): off here.
ASKING_TOOLSET = [
    {
        "type": "agent_toolset_20260401",
        "default_config": {"permission_policy": {"type": "always_ask"}},
        "configs": [{"name": "web_fetch", "enabled": False}, {"name": "web_search", "enabled": False}],
    }
]


def _tool_results(body: dict) -> list[dict]:
    return [
        block
        for message in body.get("messages") or []
        if message["role"] == "user" and not isinstance(message["content"], str)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def _result_text(block: dict) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])


def _tool_names(body: dict) -> list[str]:
    return [
        block["name"]
        for message in body.get("messages") or []
        if message["role"] == "assistant" and not isinstance(message["content"], str)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]


def _coordinating(first_call: dict, after_report=None):
    """The coordinator's model: spawn scout, wait for its report, then answer with it (or make
    `after_report`'s call first). Scout's model is `scout(body)`."""

    def coordinator(body: dict) -> dict:
        reports = [t.split("\n", 1)[1] for t in request_user_texts(body) if t.startswith("[Message from the agent")]
        results = _tool_results(body)
        if not results:
            return tool_use("spawn_agent", {"agent": "scout", "message": "Do your part."})
        if not reports:
            return text("Waiting for scout.")
        if after_report is not None and len(results) < 2:
            return tool_use(*after_report)
        extra = f" Then: {_result_text(results[-1]).split(chr(10))[0]}" if after_report is not None else ""
        return text("Scout reported: " + reports[-1] + extra)

    def decide(body: dict) -> dict:
        if request_system(body).startswith("You coordinate"):
            return coordinator(body)
        results = _tool_results(body)
        if not results:
            return first_call
        return text("scout got: " + _result_text(results[-1]).split("\n")[0].strip())

    return decide


def _session(sdk, scout_config: dict):
    scout = sdk.beta.agents.create(name="scout", model=MODEL, system="You are scout.", **scout_config)
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate scout.",
        tools=TOOLSET,
        multiagent={"type": "coordinator", "agents": [scout.id]},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud", "networking": {"type": "unrestricted"}})
    return sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)


def _go(sdk, session_id: str) -> None:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )


def _idle(sdk, session_id: str, stop: str):
    """The session's events once its newest is a session.status_idle stopped by `stop`."""

    def idle():
        events = list(sdk.beta.sessions.events.list(session_id))
        last = events[-1] if events else None
        return events if last and last.type == "session.status_idle" and last.stop_reason.type == stop else None

    return wait_for(idle, timeout=60)


def _thread(sdk, session_id: str):
    (child,) = [t for t in sdk.beta.sessions.threads.list(session_id) if t.parent_thread_id is not None]
    return child


def test_a_subagents_custom_tool_is_answered_by_the_client_on_the_session(sdk, model, celery_worker):
    model.default = _coordinating(tool_use("lookup", {"word": "mango"}))
    session = _session(sdk, {"tools": [LOOKUP]})
    _go(sdk, session.id)

    events = _idle(sdk, session.id, "requires_action")
    thread = _thread(sdk, session.id)
    # The session waits on its client: idle, its idle listing the thread's call as cross-posted.
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"
    (copy,) = [e for e in events if e.type == "agent.custom_tool_use"]
    assert copy.name == "lookup" and copy.input == {"word": "mango"} and copy.session_thread_id == thread.id
    assert events[-1].stop_reason.event_ids == [copy.id]
    # The thread's own log: its call (no session_thread_id there), and its idle listing it.
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    (call,) = [e for e in own if e.type == "agent.custom_tool_use"]
    assert call.id != copy.id and call.session_thread_id is None and call.input == {"word": "mango"}
    thread_idle = [e for e in own if e.type == "session.thread_status_idle"][-1]
    assert thread_idle.stop_reason.type == "requires_action" and thread_idle.stop_reason.event_ids == [call.id]
    # Cross-posted, the thread's idle names the copy the client sees on the session.
    posted = [e for e in events if e.type == "session.thread_status_idle"][-1]
    assert posted.session_thread_id == thread.id and posted.stop_reason.event_ids == [copy.id]
    # The coordinator's model never saw the thread's call as its own.
    coordinator_calls = [r["body"] for r in model.requests if request_system(r["body"]).startswith("You coordinate")]
    assert all("lookup" not in _tool_names(body) for body in coordinator_calls)

    sent = sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": copy.id,
                "content": [{"type": "text", "text": "a tropical fruit"}],
            }
        ],
    )
    (recorded,) = sent.data
    assert recorded.type == "user.custom_tool_result" and recorded.session_thread_id == thread.id
    assert recorded.custom_tool_use_id == copy.id

    events = _idle(sdk, session.id, "end_turn")
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Scout reported: scout got: a tropical fruit"
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    (routed,) = [e for e in own if e.type == "user.custom_tool_result"]
    assert routed.custom_tool_use_id == call.id and routed.session_thread_id == thread.id
    # Every answer went to the thread: the coordinator's requests hold no tool result of lookup's.
    coordinator_calls = [r["body"] for r in model.requests if request_system(r["body"]).startswith("You coordinate")]
    assert all("tropical" not in _result_text(block) for body in coordinator_calls for block in _tool_results(body))
    # An answer naming no tool use of the session or of its threads is a 400.
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.events.send(
            session.id,
            events=[
                {"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope", "content": []},
            ],
        )


def test_a_subagents_always_ask_call_runs_in_the_shared_sandbox_once_confirmed(sdk, model, celery_worker):
    command = "echo scouted > /workspace/scout.txt; cat /workspace/scout.txt"
    model.default = _coordinating(
        tool_use("bash", {"command": command}), after_report=("bash", {"command": "cat /workspace/scout.txt"})
    )
    session = _session(sdk, {"tools": ASKING_TOOLSET})
    _go(sdk, session.id)

    events = _idle(sdk, session.id, "requires_action")
    thread = _thread(sdk, session.id)
    (copy,) = [e for e in events if e.type == "agent.tool_use" and e.session_thread_id]
    assert copy.evaluated_permission == "ask" and copy.session_thread_id == thread.id
    assert events[-1].stop_reason.event_ids == [copy.id]
    (call,) = [
        e for e in sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id) if e.type == "agent.tool_use"
    ]
    # Answered by the thread's own id, read from the thread's log: routed all the same.
    sent = sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.tool_confirmation", "tool_use_id": call.id, "result": "allow"}]
    )
    assert sent.data[0].session_thread_id == thread.id

    events = _idle(sdk, session.id, "end_turn")
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    # The thread's command ran in the session's one sandbox: the coordinator reads its file.
    assert answer == "Scout reported: scout got: scouted Then: scouted"
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    assert [e.type for e in own if e.type in ("user.tool_confirmation", "agent.tool_result")] == [
        "user.tool_confirmation",
        "agent.tool_result",
    ]
    # The primary ran nothing of the thread's: its only tool results are its own two calls'.
    primary_results = [e for e in events if e.type == "agent.tool_result"]
    assert len(primary_results) == 2


def test_a_denied_subagent_call_is_an_error_result_for_the_subagent(sdk, model, celery_worker):
    model.default = _coordinating(tool_use("bash", {"command": "echo never > /workspace/never.txt"}))
    session = _session(sdk, {"tools": ASKING_TOOLSET})
    _go(sdk, session.id)
    events = _idle(sdk, session.id, "requires_action")
    (copy,) = [e for e in events if e.type == "agent.tool_use" and e.session_thread_id]
    sdk.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.tool_confirmation", "tool_use_id": copy.id, "result": "deny", "deny_message": "No."}],
    )
    events = _idle(sdk, session.id, "end_turn")
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Scout reported: scout got: No."


def test_a_subagents_skills_are_in_the_shared_sandbox(sdk, model, celery_worker, tmp_path):
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path, name="scout-notes")))
    seen_systems: list[str] = []

    def first_call(body: dict) -> dict:
        return tool_use("bash", {"command": "cat /mnt/skills/scout-notes/scripts/hello.sh"})

    decide = _coordinating(None)

    def recording(body: dict) -> dict:
        seen_systems.append(request_system(body))
        if not request_system(body).startswith("You coordinate") and not _tool_results(body):
            return first_call(body)
        return decide(body)

    model.default = recording
    session = _session(sdk, {"tools": TOOLSET, "skills": [{"type": "custom", "skill_id": skill.id}]})
    (entry,) = session.agent.multiagent.agents
    assert [s.skill_id for s in entry.skills] == [skill.id]
    _go(sdk, session.id)
    events = _idle(sdk, session.id, "end_turn")
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Scout reported: scout got: echo hello from the skill"
    scout_system = next(s for s in seen_systems if s.startswith("You are scout"))
    assert "/mnt/skills/scout-notes" in scout_system
    lead_system = next(s for s in seen_systems if s.startswith("You coordinate"))
    assert "scout-notes" not in lead_system


def test_the_sdk_session_tool_runner_answers_a_subagents_custom_tool(sdk, model, celery_worker, live_server, api_key):
    model.default = _coordinating(tool_use("lookup", {"word": "mango"}))
    session = _session(sdk, {"tools": [LOOKUP]})

    @anthropic.beta_async_tool
    async def lookup(word: str) -> str:
        """Look a word up."""
        return f"{word}: a tropical fruit"

    calls = []

    async def serve() -> None:
        client = anthropic.AsyncAnthropic(base_url=live_server.url, api_key=str(api_key), max_retries=0)
        async for call in client.beta.sessions.events.tool_runner(session.id, tools=[lookup], max_idle=3):
            calls.append(call)

    runner = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    _go(sdk, session.id)
    runner.start()
    events = _idle(sdk, session.id, "end_turn")
    runner.join(timeout=30)
    assert not runner.is_alive()
    thread = _thread(sdk, session.id)
    (call,) = calls
    assert call.name == "lookup" and call.posted and not call.is_error
    assert call.event.session_thread_id == thread.id
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Scout reported: scout got: mango: a tropical fruit"


def test_a_copy_lost_to_kill_9_after_the_threads_commit_is_made_again(sdk, model, celery_worker):
    """The worker dies (kill -9, at crash point thread_tool_use_crosspost) after the subagent's
    commit of its custom tool use and requires_action idle, before their copies reached the
    session's log: the resumed coordinator appends the lost copy before its idle lists it, the
    client answers it, and the coordinator gets the report."""
    model.default = _coordinating(tool_use("lookup", {"word": "mango"}))
    celery_worker.kill()
    crashing = celery_worker.start_new(MANGO_TEST_CRASH_POINT="thread_tool_use_crosspost")
    session = _session(sdk, {"tools": [LOOKUP]})
    _go(sdk, session.id)
    wait_for(lambda: crashing.process.poll() is not None, timeout=60)
    assert crashing.process.returncode == -9  # killed itself at the crash point
    thread = _thread(sdk, session.id)
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    (call,) = [e for e in own if e.type == "agent.custom_tool_use"]  # committed on the thread's log
    assert not [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.custom_tool_use"]

    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    assert session.id in set(session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS))
    events = _idle(sdk, session.id, "requires_action")
    (copy,) = [e for e in events if e.type == "agent.custom_tool_use"]
    assert copy.session_thread_id == thread.id and copy.id == call.id + "t"
    assert events[-1].stop_reason.event_ids == [copy.id]
    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": copy.id,
                "content": [{"type": "text", "text": "a tropical fruit"}],
            }
        ],
    )
    events = _idle(sdk, session.id, "end_turn")
    assert [e for e in events if e.type == "agent.message"][-1].content[0].text == (
        "Scout reported: scout got: a tropical fruit"
    )
    assert len([e for e in events if e.type == "agent.custom_tool_use"]) == 1  # made again once


def test_an_inline_agent_has_the_custom_tools_and_mcp_servers_it_names(sdk, model, celery_worker):
    """An inline agent names some of the coordinator's custom tools and MCP servers: they are its
    own (its custom tool's call reaches the client through the session; its turn connects to its
    MCP server, here an unreachable one: a session.error naming it on its log); a name the
    coordinator does not have is an error result naming the field."""

    def decide(body: dict) -> dict:
        if request_system(body).startswith("You coordinate"):
            reports = [t.split("\n", 1)[1] for t in request_user_texts(body) if t.startswith("[Message from the agent")]
            if not _tool_results(body):
                inline = {
                    "name": "scout",
                    "system": "You are scout.",
                    "custom_tools": ["lookup"],
                    "mcp_servers": ["docs"],
                }
                return tool_use("spawn_agent", {"inline_agent": inline, "message": "Look mango up."})
            return text("Scout reported: " + reports[-1]) if reports else text("Waiting for scout.")
        results = _tool_results(body)
        if not results:
            return tool_use("lookup", {"word": "mango"})
        return text("scout got: " + _result_text(results[-1]))

    model.default = decide
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate scout.",
        tools=[*TOOLSET, LOOKUP, {"type": "mcp_toolset", "mcp_server_name": "docs"}],
        mcp_servers=[{"type": "url", "name": "docs", "url": "https://mcp.invalid/mcp"}],
        multiagent={"type": "multiagent_20261001", "workflows": {"type": "disabled"}},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud", "networking": {"type": "unrestricted"}})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)
    events = _idle(sdk, session.id, "requires_action")
    thread = _thread(sdk, session.id)
    assert thread.agent.type == "inline" and [s.name for s in thread.agent.mcp_servers] == ["docs"]
    assert [t.type for t in thread.agent.tools] == ["agent_toolset_20260401", "mcp_toolset", "custom"]
    (copy,) = [e for e in events if e.type == "agent.custom_tool_use"]
    assert copy.name == "lookup" and copy.session_thread_id == thread.id
    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": copy.id,
                "content": [{"type": "text", "text": "a fruit"}],
            }
        ],
    )
    events = _idle(sdk, session.id, "end_turn")
    assert [e for e in events if e.type == "agent.message"][-1].content[0].text == "Scout reported: scout got: a fruit"
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    assert any(e.type == "session.error" and "docs" in e.error.message for e in own)
    scout_calls = [r["body"] for r in model.requests if request_system(r["body"]).startswith("You are scout")]
    assert "lookup" in {tool["name"] for tool in scout_calls[0].get("tools") or []}

    primary = Session.objects.get(id=session.id)
    for spec, field in (
        ({"system": "x", "custom_tools": ["nope"]}, "inline_agent.custom_tools[0]"),
        ({"system": "x", "mcp_servers": ["nope"]}, "inline_agent.mcp_servers[0]"),
    ):
        said, is_error = thread_tool_run(
            session=primary, name="spawn_agent", tool_input={"inline_agent": spec, "message": "m"}
        )
        assert is_error and said.startswith(f"{field}: "), said


def test_a_thread_status_copy_lost_to_kill_9_is_made_again(sdk, model, celery_worker):
    """The worker dies (kill -9, at crash point thread_status_crosspost) after a subagent's
    thread_status_running committed on its own log, before its copy reached the session's log:
    the reaper's pass makes the copy again (its id the original's with a `t`), and every status
    event of the thread has exactly one copy on the session's log."""
    model.default = _coordinating(tool_use("bash", {"command": "echo scouted"}))
    celery_worker.kill()
    crashing = celery_worker.start_new(MANGO_TEST_CRASH_POINT="thread_status_crosspost")
    session = _session(sdk, {"tools": TOOLSET})
    _go(sdk, session.id)
    wait_for(lambda: crashing.process.poll() is not None, timeout=60)
    assert crashing.process.returncode == -9  # killed itself at the crash point
    thread = _thread(sdk, session.id)
    own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
    (running,) = [e for e in own if e.type == "session.thread_status_running"]
    assert running.id + "t" not in {e.id for e in sdk.beta.sessions.events.list(session.id)}

    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS)
    events = _idle(sdk, session.id, "end_turn")
    assert [e for e in events if e.type == "agent.message"][-1].content[0].text == "Scout reported: scout got: scouted"

    def copied():  # every status event of the thread has its copy, once (the last may still come)
        own = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
        statuses = sorted(e.id + "t" for e in own if e.type.startswith("session.thread_status_"))
        copies = [e for e in sdk.beta.sessions.events.list(session.id) if e.type.startswith("session.thread_status_")]
        return copies if statuses == sorted(e.id for e in copies) else None

    copies = wait_for(copied, 15)
    assert len(copies) >= 3 and all(e.session_thread_id == thread.id for e in copies)
