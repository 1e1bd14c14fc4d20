"""Multiagent sessions end to end (issue 39, point 2): a coordinator spawns two subagents as
session threads; each runs a bash command writing a file in the session's one sandbox
(/workspace) and reports back; the coordinator answers with both. Real worker, real Docker
sandbox, the scripted model upstream; the SDK with strict response validation."""

import json
import logging
import threading
import time

import anthropic
import pytest

from sandboxes.docker import container_name
from sessions.models import Session
from sessions.runtime.threads import thread_tool_run
from sessions.tasks import session_recover_stuck
from tests.scripted_model import request_system, request_user_texts, text, tool_use, tool_uses
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

logger = logging.getLogger(__name__)

MODEL = "claude-sonnet-4-5"
TOOLSET = [{"type": "agent_toolset_20260401"}]
# Each subagent's command takes this long: run side by side, the two take about one of it.
WORK_SECONDS = 3.0


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


def _decide(body: dict) -> dict:
    """The three agents' models: told apart by their system prompts."""
    system = request_system(body)
    if system.startswith("You coordinate"):
        reports = [t for t in request_user_texts(body) if t.startswith("[Message from the agent")]
        if not _tool_results(body):
            return tool_uses(
                [
                    ("spawn_agent", {"agent": "alpha", "message": "Write alpha into /workspace/alpha.txt."}),
                    ("spawn_agent", {"agent": "beta", "message": "Write beta into /workspace/beta.txt."}),
                ]
            )
        if len(reports) < 2:
            return text("Waiting for the threads.")
        return text("Both done. " + " | ".join(r.split("\n", 1)[1] for r in reports))
    name = "alpha" if "alpha" in system else "beta"
    results = _tool_results(body)
    if not results:
        command = f"sleep {WORK_SECONDS}; echo {name} > /workspace/{name}.txt; cat /workspace/{name}.txt"
        return tool_use("bash", {"command": command})
    return text(f"{name} wrote /workspace/{name}.txt: {_result_text(results[-1]).split()[0]}")


def _collect(stream, until, seen: list) -> None:
    for event in stream:
        seen.append(event)
        if until(event):
            return


def test_a_coordinator_runs_two_subagents_side_by_side(sdk, model, celery_worker, docker_client):
    model.default = _decide
    alpha = sdk.beta.agents.create(name="alpha", model=MODEL, system="You are alpha.", tools=TOOLSET)
    beta = sdk.beta.agents.create(name="beta", model=MODEL, system="You are beta.", tools=TOOLSET)
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate alpha and beta.",
        tools=TOOLSET,
        multiagent={"type": "coordinator", "agents": [alpha.id, beta.id]},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud", "networking": {"type": "unrestricted"}})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)

    session_events: list = []
    thread_streams: dict[str, threading.Thread] = {}
    thread_streamed: dict[str, list] = {}

    def follow(thread_id: str) -> None:
        with sdk.beta.sessions.threads.events.stream(thread_id, session_id=session.id) as stream:
            _collect(stream, lambda e: e.type == "session.thread_status_idle", thread_streamed[thread_id])

    def on_session_event(event) -> bool:
        if event.type == "session.thread_created":
            thread_streamed[event.session_thread_id] = []
            reader = threading.Thread(target=follow, args=(event.session_thread_id,), daemon=True)
            thread_streams[event.session_thread_id] = reader
            reader.start()
        return event.type == "session.status_idle"

    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
        )
        started = time.monotonic()
        _collect(stream, on_session_event, session_events)
        wall = time.monotonic() - started

    # The coordinator's answer carries both reports.
    answer = [e for e in session_events if e.type == "agent.message"][-1]
    said = answer.content[0].text
    assert "alpha wrote /workspace/alpha.txt: alpha" in said and "beta wrote /workspace/beta.txt: beta" in said
    idle = session_events[-1]
    assert idle.stop_reason.type == "end_turn"
    assert [e.type for e in session_events].count("session.status_idle") == 1  # one turn, threads included

    # Three threads: the primary and the two it spawned.
    threads = list(sdk.beta.sessions.threads.list(session.id))
    assert len(threads) == 3
    primary, *children = threads
    assert primary.parent_thread_id is None and primary.agent.id == lead.id
    assert sorted(t.agent.name for t in children) == ["alpha", "beta"]
    assert all(t.parent_thread_id == primary.id and t.session_id == session.id for t in children)
    assert all(t.status == "idle" and t.stats.active_seconds > 0 and t.usage.input_tokens > 0 for t in children)
    assert all(t.stats.startup_seconds == 0 for t in children)  # the SDK: zero for child threads
    child_ids = {t.id for t in children}

    # The primary's stream: the spawns, the messages each way and each thread's status, in the
    # SDK's shapes (strict validation parsed every one).
    created = [e for e in session_events if e.type == "session.thread_created"]
    assert {e.session_thread_id for e in created} == child_ids
    assert {e.agent_name for e in created} == {"alpha", "beta"}
    sent = [e for e in session_events if e.type == "agent.thread_message_sent"]
    assert {e.to_session_thread_id for e in sent} == child_ids
    received = [e for e in session_events if e.type == "agent.thread_message_received"]
    assert {e.from_session_thread_id for e in received} == child_ids
    assert {e.from_agent_name for e in received} == {"alpha", "beta"}
    for kind in ("session.thread_status_running", "session.thread_status_idle"):
        assert {e.session_thread_id for e in session_events if e.type == kind} == child_ids, kind
    # The subagents' own work is not on the primary's log.
    assert not [e for e in session_events if e.type == "agent.tool_use" and e.name == "bash"]

    # Each thread's log and stream carry only its own events.
    spans = {}
    for thread in children:
        events = list(sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id))
        types = [e.type for e in events]
        assert types[0] == "agent.thread_message_received" and events[0].from_session_thread_id == primary.id
        assert "session.status_idle" not in types and "session.thread_created" not in types
        bash = [e for e in events if e.type == "agent.tool_use"]
        assert [e.name for e in bash] == ["bash"] and thread.agent.name in bash[0].input["command"]
        result = next(e for e in events if e.type == "agent.tool_result")
        assert not result.is_error and result.content[0].text.split()[0] == thread.agent.name
        (report,) = [e for e in events if e.type == "agent.thread_message_sent"]
        assert report.to_session_thread_id == primary.id
        running = next(e for e in events if e.type == "session.thread_status_running")
        idled = next(e for e in events if e.type == "session.thread_status_idle")
        assert running.session_thread_id == thread.id and idled.stop_reason.type == "end_turn"
        spans[thread.agent.name] = (running.processed_at, idled.processed_at)
        # Its stream (opened when the primary's stream showed the thread created) carried its own
        # events only, up to its idle.
        thread_streams[thread.id].join(10)
        streamed = thread_streamed[thread.id]
        assert streamed and streamed[-1].type == "session.thread_status_idle"
        assert {e.id for e in streamed} <= {e.id for e in events}, [e.type for e in streamed]

    # Concurrency: the two threads' turns overlap; the session's wall is about the slower one.
    (a_start, a_end), (b_start, b_end) = spans["alpha"], spans["beta"]
    each = {name: (end - start).total_seconds() for name, (start, end) in spans.items()}
    overlap = (min(a_end, b_end) - max(a_start, b_start)).total_seconds()
    logger.warning(
        "multiagent concurrency: session wall %.2fs; alpha %.2fs, beta %.2fs (sum %.2fs); overlap %.2fs",
        wall,
        each["alpha"],
        each["beta"],
        sum(each.values()),
        overlap,
    )
    print(f"\nmultiagent concurrency: wall {wall:.2f}s, threads {json.dumps(each)}, overlap {overlap:.2f}s")
    assert overlap > WORK_SECONDS * 0.5
    assert wall < sum(each.values())

    # One sandbox: both files are in the session's /workspace.
    container = docker_client.containers.get(container_name(session.id))  # the primary's: the only one
    listing = container.exec_run(["cat", "/workspace/alpha.txt", "/workspace/beta.txt"]).output.decode()
    assert listing.split() == ["alpha", "beta"]

    # The session's usage covers every thread.
    retrieved = sdk.beta.sessions.retrieve(session.id)
    assert retrieved.usage.input_tokens == sum(t.usage.input_tokens for t in sdk.beta.sessions.threads.list(session.id))

    # A child thread is not a session of its own.
    child_session_id = "sesn_" + children[0].id.split("_", 1)[1]
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.retrieve(child_session_id)
    assert session.id in [s.id for s in sdk.beta.sessions.list()] and child_session_id not in [
        s.id for s in sdk.beta.sessions.list()
    ]

    # Archive stops a thread: archived, then messages to it are refused.
    archived = sdk.beta.sessions.threads.archive(children[0].id, session_id=session.id)
    assert archived.archived_at is not None
    with pytest.raises(anthropic.BadRequestError, match="archive the session"):
        sdk.beta.sessions.threads.archive(primary.id, session_id=session.id)
    # Archived while idle, it is terminated at once, on its stream and the session's.
    assert archived.status == "terminated"
    last = _thread_events(sdk, session.id, children[0].id)[-1]
    assert last.type == "session.thread_status_terminated" and last.session_thread_id == children[0].id
    primary_last = list(sdk.beta.sessions.events.list(session.id))[-1]
    assert primary_last.type == "session.thread_status_terminated" and primary_last.agent_name == children[0].agent.name
    more = {"session_thread_id": children[0].id, "message": "more"}
    refused, is_error = thread_tool_run(
        session=Session.objects.get(id=session.id), name="message_agent", tool_input=more
    )
    assert is_error and "archived" in refused


# --- a crash, an interrupt, a budget (issue 39, point 3) ----------------------------------------


def _team(sdk, names: tuple[str, ...]):
    agents = [
        sdk.beta.agents.create(name=name, model=MODEL, system=f"You are {name}.", tools=TOOLSET) for name in names
    ]
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate " + " and ".join(names) + ".",
        tools=TOOLSET,
        multiagent={"type": "coordinator", "agents": [agent.id for agent in agents]},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud", "networking": {"type": "unrestricted"}})
    return lead, env


def _spawning(names: tuple[str, ...], command: str, *, usage: dict | None = None):
    """Models: the coordinator spawns `names` then waits for every report and sums them up;
    each subagent runs `command` once (its response billed `usage`), then reports."""

    def decide(body: dict) -> dict:
        system = request_system(body)
        if system.startswith("You coordinate"):
            reports = [t for t in request_user_texts(body) if t.startswith("[Message from the agent")]
            if not _tool_results(body):
                return tool_uses([("spawn_agent", {"agent": name, "message": f"Work, {name}."}) for name in names])
            if len(reports) < len(names):
                return text("Waiting.")
            return text("Done: " + " | ".join(r.split("\n", 1)[1] for r in reports))
        name = system.removeprefix("You are ").rstrip(".")
        results = _tool_results(body)
        if not results:
            response = tool_use("bash", {"command": command})
            if usage:
                response["usage"] = usage
            return response
        return text(f"{name}: {_result_text(results[-1])[:60]}")

    return decide


def _thread_events(sdk, session_id: str, thread_id: str) -> list:
    return list(sdk.beta.sessions.threads.events.list(thread_id, session_id=session_id))


def _children(sdk, session_id: str) -> list:
    return [t for t in sdk.beta.sessions.threads.list(session_id) if t.parent_thread_id is not None]


def _go(sdk, session_id: str) -> None:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )


def _session_idle(sdk, session_id: str):
    events = list(sdk.beta.sessions.events.list(session_id))
    return events if events[-1].type == "session.status_idle" else None


def test_a_worker_killed_during_a_subagent_turn_resumes_it_on_another(sdk, model, celery_worker):
    lead, env = _team(sdk, ("alpha",))
    model.default = _spawning(("alpha",), "sleep 30")
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)

    def child_in_command():
        children = _children(sdk, session.id)
        if children and any(e.type == "agent.tool_use" for e in _thread_events(sdk, session.id, children[0].id)):
            return children[0]
        return None

    child = wait_for(child_in_command, 30)
    time.sleep(0.5)  # the sleep runs in the sandbox
    celery_worker.kill()  # SIGKILL: the coordinator's and the subagent's runners die together
    child_row = Session.objects.get(id="sesn_" + child.id.split("_", 1)[1])
    assert child_row.status == "running" and child_row.runner_token  # its own lease, nobody renewing it

    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    assert set(session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS)) == {session.id, child_row.id}

    events = wait_for(lambda: _session_idle(sdk, session.id), 40)
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer.startswith("Done: alpha: The worker running this tool stopped"), answer
    thread_events = _thread_events(sdk, session.id, child.id)
    types = [e.type for e in thread_events]
    assert types.count("session.thread_status_running") == 2  # its turn, resumed
    error = next(e for e in thread_events if e.type == "session.error")
    assert error.error.retry_status.type == "retrying"
    result = next(e for e in thread_events if e.type == "agent.tool_result")
    assert result.is_error and "stopped" in result.content[0].text
    assert types[-1] == "session.thread_status_idle"
    assert Session.objects.get(id=child_row.id).runner_token is None


def test_an_interrupt_stops_every_thread(sdk, model, celery_worker):
    lead, env = _team(sdk, ("alpha", "beta"))
    model.default = _spawning(("alpha", "beta"), "sleep 60")
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)

    def both_in_command():
        children = _children(sdk, session.id)
        busy = [c for c in children if any(e.type == "agent.tool_use" for e in _thread_events(sdk, session.id, c.id))]
        return children if len(busy) == 2 else None

    children = wait_for(both_in_command, 30)
    asked = len(model.requests)
    started = time.monotonic()
    sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
    events = wait_for(lambda: _session_idle(sdk, session.id), 15)
    for child in children:
        wait_for(
            lambda child=child: sdk.beta.sessions.threads.retrieve(child.id, session_id=session.id).status == "idle"
        )
    stopped = time.monotonic() - started
    assert stopped < 10, stopped  # not the 60 s of the commands
    assert events[-1].stop_reason.type == "end_turn"
    for child in children:
        thread_events = _thread_events(sdk, session.id, child.id)
        assert thread_events[-1].type == "session.thread_status_idle"
        assert any(e.type == "user.interrupt" for e in thread_events)
        # Interrupted: no report to the coordinator.
        assert not any(e.type == "agent.thread_message_sent" for e in thread_events), [
            (e.type, getattr(e, "stop_reason", None), getattr(e, "content", None)) for e in thread_events
        ]
    time.sleep(1)
    # The coordinator made no model request after the interrupt, and started no turn. (A
    # subagent may: the interrupt's kill ends every command in the one sandbox, and a thread
    # whose flag shows a moment later can take its next model call first — not a turn more.)
    coordinating = [r for r in model.requests[asked:] if request_system(r["body"]).startswith("You coordinate")]
    assert coordinating == []
    primary_types = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    assert primary_types[primary_types.index("user.interrupt") :].count("session.status_running") == 0
    # A thread may be interrupted alone: the primary is then not.
    other = sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.interrupt", "session_thread_id": children[0].id}]
    )
    assert other.data[0].type == "user.interrupt"
    with pytest.raises(anthropic.BadRequestError, match="session_thread_id"):
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.interrupt", "session_thread_id": "sthr_unknown"}]
        )


def test_a_budget_reached_in_a_subagent_stops_the_session(sdk, model, celery_worker):
    lead, env = _team(sdk, ("alpha",))
    # The subagent's first response is billed a million input tokens: well over a one-cent cap.
    model.default = _spawning(("alpha",), "echo hi", usage={"input_tokens": 1_000_000, "output_tokens": 5})
    session = sdk.beta.sessions.create(
        agent=lead.id,
        environment_id=env.id,
        budget={"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}},
    )
    _go(sdk, session.id)
    events = wait_for(lambda: _session_idle(sdk, session.id), 40)
    assert events[-1].stop_reason.type == "budget_reached"
    (child,) = _children(sdk, session.id)
    thread_events = _thread_events(sdk, session.id, child.id)
    idle = [e for e in thread_events if e.type == "session.thread_status_idle"][-1]
    assert idle.stop_reason.type == "budget_reached"
    retrieved = sdk.beta.sessions.retrieve(session.id)
    assert retrieved.usage.input_tokens >= 1_000_000  # the thread's spend counts in the session's
    assert float(retrieved.usage.list_cost.amount) >= 1


def test_the_thread_cap_refuses_a_spawn_past_it(sdk, settings, no_turns):
    """MANGO_SESSION_THREADS_MAX counts the primary: past it, the spawn is an error result for
    the coordinator's model (the service refuses; nothing is created)."""
    lead, env = _team(sdk, ("alpha",))
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    primary = Session.objects.get(id=session.id)
    settings.MANGO_SESSION_THREADS_MAX = 2
    spawn = {"agent": "alpha", "message": "Work."}
    text_value, is_error = thread_tool_run(session=primary, name="spawn_agent", tool_input=spawn)
    assert not is_error and text_value.startswith("Started thread sthr_")
    text_value, is_error = thread_tool_run(session=primary, name="spawn_agent", tool_input=spawn)
    assert is_error and "already has 2 threads" in text_value
    assert len(list(sdk.beta.sessions.threads.list(session.id))) == 2
    text_value, is_error = thread_tool_run(session=primary, name="spawn_agent", tool_input={**spawn, "agent": "x"})
    assert is_error and "no agent 'x' in the roster" in text_value
    inline = {"inline_agent": {"system": "You improvise."}, "message": "Work."}
    text_value, is_error = thread_tool_run(session=primary, name="spawn_agent", tool_input=inline)
    assert is_error and "cannot define inline agents" in text_value  # a coordinator roster has none
    gone = {"session_thread_id": "sthr_unknown", "message": "hello"}
    text_value, is_error = thread_tool_run(session=primary, name="message_agent", tool_input=gone)
    assert is_error and "No thread 'sthr_unknown'" in text_value


def test_a_coordinator_waiting_for_its_threads_lends_them_its_turn_slot(sdk, model, celery_worker):
    """With a workspace cap of one running turn, the coordinator holds the slot when it spawns;
    waiting for its thread it lends the slot, so the thread runs (else neither would finish)."""
    celery_worker.current.stop()
    celery_worker.start_new(MANGO_WORKSPACE_MAX_RUNNING_TURNS="1")
    try:
        lead, env = _team(sdk, ("alpha",))
        model.default = _spawning(("alpha",), "echo lent")
        session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
        _go(sdk, session.id)
        events = wait_for(lambda: _session_idle(sdk, session.id), 40)
        answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
        assert answer.startswith("Done: alpha: lent"), answer
        assert events[-1].stop_reason.type == "end_turn"
    finally:
        celery_worker.current.stop()
        celery_worker.start_new()


def test_an_inline_agent_runs_as_a_thread(sdk, model, celery_worker):
    """multiagent_20261001 with its defaults (but workflows): the coordinator defines an agent
    when it spawns the thread; the thread runs it (the coordinator's model and toolset, the
    given system prompt) and reports back."""

    def decide(body: dict) -> dict:
        system = request_system(body)
        if system.startswith("You coordinate"):
            if not _tool_results(body):
                inline = {"name": "scribe", "system": "You are scribe, defined inline."}
                return tool_use("spawn_agent", {"inline_agent": inline, "message": "Write scribe.txt."})
            reports = [t for t in request_user_texts(body) if t.startswith("[Message from the agent")]
            return text("Done: " + reports[0].split("\n", 1)[1]) if reports else text("Waiting.")
        if not _tool_results(body):
            return tool_use("bash", {"command": "echo scribe > /workspace/scribe.txt; cat /workspace/scribe.txt"})
        return text(f"scribe: {_result_text(_tool_results(body)[-1]).split()[0]}")

    model.default = decide
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate.",
        tools=TOOLSET,
        multiagent={"type": "multiagent_20261001", "workflows": {"type": "disabled"}},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud", "networking": {"type": "unrestricted"}})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    assert session.agent.multiagent.subagents.inline_agents.type == "enabled"
    _go(sdk, session.id)
    events = wait_for(lambda: _session_idle(sdk, session.id), 40)
    assert [e for e in events if e.type == "agent.message"][-1].content[0].text == "Done: scribe: scribe"
    (child,) = _children(sdk, session.id)
    assert child.agent.type == "inline" and child.agent.name == "scribe"
    assert child.agent.system == "You are scribe, defined inline." and child.agent.model.id == MODEL
    assert [t.type for t in child.agent.tools] == ["agent_toolset_20260401"]
    created = next(e for e in events if e.type == "session.thread_created")
    assert created.agent_name == "scribe" and created.session_thread_id == child.id
    # The spawn tool offered the model the inline form.
    spawn_tool = next(t for t in model.requests[0]["body"]["tools"] if t["name"] == "spawn_agent")
    assert "inline_agent" in spawn_tool["input_schema"]["properties"]


def test_archiving_a_running_thread_stops_and_terminates_it(sdk, model, celery_worker):
    lead, env = _team(sdk, ("alpha",))
    model.default = _spawning(("alpha",), "sleep 60")
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)

    def in_command():
        children = _children(sdk, session.id)
        if children and any(e.type == "agent.tool_use" for e in _thread_events(sdk, session.id, children[0].id)):
            return children[0]
        return None

    child = wait_for(in_command, 30)
    started = time.monotonic()
    archived = sdk.beta.sessions.threads.archive(child.id, session_id=session.id)
    assert archived.archived_at is not None
    thread = sdk.beta.sessions.threads
    wait_for(lambda: thread.retrieve(child.id, session_id=session.id).status == "terminated", 15)
    assert time.monotonic() - started < 10  # not the command's 60 s
    types = [e.type for e in _thread_events(sdk, session.id, child.id)]
    assert types[-2:] == ["session.thread_status_idle", "session.thread_status_terminated"], types
    assert "agent.thread_message_sent" not in types  # stopped, it reports nothing

    # The coordinator no longer waits for it: its turn ends (or had ended, when no worker thread
    # was free to wait in: the thread's events cross-posted after its idle then end its log).
    def coordinator_idle():
        statuses = [e for e in sdk.beta.sessions.events.list(session.id) if e.type.startswith("session.status_")]
        return statuses if statuses[-1].type == "session.status_idle" else None

    statuses = wait_for(coordinator_idle, 15)
    assert statuses[-1].stop_reason.type == "end_turn"
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"


def test_a_report_waits_for_the_client_when_the_coordinator_handed_it_a_tool(sdk, model, celery_worker):
    """The coordinator spawns a thread and hands a custom tool to its client in one response:
    its turn ends requires_action. The thread's report does not start a turn over the open tool
    use; the client's answer does, and the model reads both."""

    def decide(body: dict) -> dict:
        system = request_system(body)
        if system.startswith("You coordinate"):
            if not _tool_results(body):
                return tool_uses([("spawn_agent", {"agent": "alpha", "message": "Work."}), ("ask", {"q": "ok?"})])
            reports = [t for t in request_user_texts(body) if t.startswith("[Message from the agent")]
            answers = [_result_text(r) for r in _tool_results(body)]
            return text(f"reports={len(reports)} answers={answers}")
        return text("alpha: done")

    model.default = decide
    alpha = sdk.beta.agents.create(name="alpha", model=MODEL, system="You are alpha.", tools=TOOLSET)
    ask = {"type": "custom", "name": "ask", "description": "Ask.", "input_schema": {"type": "object"}}
    lead = sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate alpha.",
        tools=[*TOOLSET, ask],
        multiagent={"type": "coordinator", "agents": [alpha.id]},
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)

    def idles() -> list:
        return [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.status_idle"]

    (handed,) = wait_for(idles, 30)
    assert handed.stop_reason.type == "requires_action"
    (use_id,) = handed.stop_reason.event_ids
    # The thread's report reaches the coordinator's log (and its idle after it, cross-posted)...
    wait_for(
        lambda: [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.thread_status_idle"], 30
    )
    received = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.thread_message_received"]
    assert received[0].from_agent_name == "alpha"
    time.sleep(1.5)  # ... and starts no turn (one would show by now)
    types = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    assert types.count("session.status_running") == 1 and len(idles()) == 1
    answer = [{"type": "text", "text": "yes"}]
    result = {"type": "user.custom_tool_result", "custom_tool_use_id": use_id, "content": answer}
    sdk.beta.sessions.events.send(session.id, events=[result])
    wait_for(lambda: len(idles()) == 2, 30)
    events = list(sdk.beta.sessions.events.list(session.id))
    said = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert said.startswith("reports=1 answers=[") and "'yes'" in said, said
    assert idles()[-1].stop_reason.type == "end_turn"


def test_a_thread_keeps_its_context_for_a_follow_up(sdk, model, celery_worker):
    """message_agent: the coordinator sends a follow-up to the thread it spawned; the thread's
    second turn reads its first (threads are persistent), and reports again."""

    def decide(body: dict) -> dict:
        system = request_system(body)
        if system.startswith("You coordinate"):
            results = [_result_text(r) for r in _tool_results(body)]
            reports = [t.split("\n", 1)[1] for t in request_user_texts(body) if t.startswith("[Message from the agent")]
            if not results:
                return tool_use("spawn_agent", {"agent": "alpha", "message": "one"})
            if len(results) == 1:
                if not reports:
                    return text("Waiting.")
                thread_id = results[0].split()[2]  # "Started thread sthr_… running …"
                return tool_use("message_agent", {"session_thread_id": thread_id, "message": "two"})
            if len(reports) < 2:
                return text("Waiting.")
            return text(" / ".join(reports))
        told = [t.split("\n", 1)[1] for t in request_user_texts(body) if t.startswith("[Message from the coordinator]")]
        return text(f"alpha has been told {told}")

    model.default = decide
    lead, env = _team(sdk, ("alpha",))
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)
    events = wait_for(lambda: _session_idle(sdk, session.id), 40)
    said = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert said == "alpha has been told ['one'] / alpha has been told ['one', 'two']", said
    (child,) = _children(sdk, session.id)
    sent = [e for e in events if e.type == "agent.thread_message_sent"]
    assert [e.to_session_thread_id for e in sent] == [child.id, child.id]
    types = [e.type for e in _thread_events(sdk, session.id, child.id)]
    assert types.count("session.thread_status_running") == 2 and types.count("agent.thread_message_received") == 2


def test_a_coordinator_past_its_wait_goes_idle_and_a_report_starts_its_next_turn(sdk, model, celery_worker):
    """MANGO_COORDINATOR_WAIT_SECONDS bounds how long a coordinator keeps its worker thread for
    its threads: past it the turn ends idle, and the thread's report starts the next turn."""
    celery_worker.current.stop()
    celery_worker.start_new(MANGO_COORDINATOR_WAIT_SECONDS="0.5")
    try:
        lead, env = _team(sdk, ("alpha",))
        model.default = _spawning(("alpha",), "sleep 3; echo late")
        session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
        _go(sdk, session.id)

        def two_idles():
            idles = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.status_idle"]
            return idles if len(idles) == 2 else None

        first, second = wait_for(two_idles, 40)
        assert first.stop_reason.type == second.stop_reason.type == "end_turn"
        events = list(sdk.beta.sessions.events.list(session.id))
        types = [e.type for e in events]
        # The first idle came before the report, which started the second turn.
        assert types.index("session.status_idle") < types.index("agent.thread_message_received")
        assert types.count("session.status_running") == 2
        said = [e for e in events if e.type == "agent.message"][-1].content[0].text
        assert said.startswith("Done: alpha: late"), said
    finally:
        celery_worker.current.stop()
        celery_worker.start_new()
