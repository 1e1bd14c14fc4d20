"""Workflow runs (issue 39, point 3): a coordinator whose `multiagent.workflows` is enabled starts
a run with the start_workflow_run tool; its phases run in order, each phase's tasks as threads
side by side in the session's one sandbox, a phase ended once its threads reported, and the run's
result comes back to the coordinator as a message. The workflow_run.* events in the SDK's shapes,
its error kinds (program, thread_limit, max_workflow_runs, timeout, unknown), threads'
workflow_run_id, and a worker killed (kill -9) at each step of a run. Real worker, real Docker
sandbox, the scripted model; the SDK with strict response validation."""

import logging
import time

import pytest

from sessions.events import thread_id_of
from sessions.models import Session, WorkflowRun
from sessions.runtime.threads import thread_tool_run
from sessions.tasks import session_recover_stuck
from tests.scripted_model import request_system, request_user_texts, text, tool_use, tool_uses
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

logger = logging.getLogger(__name__)

MODEL = "claude-sonnet-4-5"
TOOLSET = [{"type": "agent_toolset_20260401"}]
DISABLED = {"type": "disabled"}
WORKFLOW_TYPES = ("workflow_run.",)
PLAN = {
    "name": "fruit",
    "description": "Write two files side by side, then read them.",
    "phases": [
        {
            "name": "write",
            "tasks": [
                {"agent": "writer", "message": "Write alpha."},
                {"inline_agent": {"name": "beta-writer", "system": "You write beta."}, "message": "Write beta."},
            ],
        },
        {"name": "read", "description": "Read both.", "tasks": [{"agent": "reader", "message": "Read the files."}]},
    ],
}


def _results(body: dict) -> list[str]:
    out = []
    for message in body.get("messages") or []:
        if message["role"] == "user" and not isinstance(message["content"], str):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    out.append(content if isinstance(content, str) else "".join(b.get("text", "") for b in content))
    return out


def _worker(body: dict, coordinator) -> dict:
    """The run's agents' models (writer, the inline beta writer, reader), else `coordinator`."""
    system = request_system(body)
    results = _results(body)
    if system.startswith("You write"):
        name = "alpha" if "Write alpha." in request_user_texts(body)[0] else "beta"
        if not results:
            return tool_use("bash", {"command": f"sleep 1; echo {name} > /workspace/{name}.txt; echo wrote {name}"})
        return text(f"{results[-1].strip()}")
    if system.startswith("You read"):
        if not results:
            return tool_use("bash", {"command": "cat /workspace/alpha.txt /workspace/beta.txt | tr '\\n' ' '"})
        return text(f"read: {results[-1].strip()}")
    if system.startswith("You sleep"):
        if not results:
            return tool_use("bash", {"command": "sleep 30"})
        return text("slept")
    return coordinator(body)


def _ran_once(body: dict) -> dict:
    results = _results(body)
    runs = [t for t in request_user_texts(body) if t.startswith("[Message from") and "Workflow run" in t]
    if not results:
        return tool_use("start_workflow_run", PLAN)
    if not runs:
        return text("Waiting for the run.")
    return text("Run done. " + runs[-1].split("\n", 1)[1])


def _lead(sdk, workflows: dict | None = None):
    writer = sdk.beta.agents.create(name="writer", model=MODEL, system="You write files.", tools=TOOLSET)
    reader = sdk.beta.agents.create(name="reader", model=MODEL, system="You read files.", tools=TOOLSET)
    sleeper = sdk.beta.agents.create(name="sleeper", model=MODEL, system="You sleep.", tools=TOOLSET)
    workflows = workflows or {"type": "enabled", "predefined_agents": [writer.id, reader.id, sleeper.id]}
    return sdk.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate workflows.",
        tools=TOOLSET,
        multiagent={"type": "multiagent_20261001", "subagents": DISABLED, "workflows": workflows},
    )


def _session(sdk, lead):
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )
    return session


def _idle(sdk, session_id: str, done, timeout: float = 90):
    """The session's events once it is idle and `done(events)` (its threads' status copies may
    come after the coordinator's idle)."""

    def idle():
        if sdk.beta.sessions.retrieve(session_id).status != "idle":
            return None
        events = list(sdk.beta.sessions.events.list(session_id))
        return events if any(e.type == "session.status_idle" for e in events) and done(events) else None

    return wait_for(idle, timeout=timeout, interval=0.3)


def _last_idle(events):
    return [e for e in events if e.type == "session.status_idle"][-1]


def _workflow(events) -> list:
    return [e for e in events if e.type.startswith(WORKFLOW_TYPES)]


def _assert_completed_run(sdk, session_id: str, events) -> str:
    """The two-phase run ran once, in the SDK's order, and the coordinator answered with its result."""
    flow = _workflow(events)
    assert [e.type.split(".", 1)[1] for e in flow] == [
        "created",
        "status_running",
        "phase_started",
        "phase_ended",
        "phase_started",
        "phase_ended",
        "status_ended",
    ]
    created = flow[0]
    run_id = created.workflow_run_id
    assert all(e.workflow_run_id == run_id for e in flow)
    assert (created.name, created.description) == ("fruit", PLAN["description"])
    assert [(p.name, p.description) for p in created.phases] == [("write", None), ("read", "Read both.")]
    write, read = created.phases
    assert [e.workflow_run_phase_id for e in flow[2:6]] == [write.id, write.id, read.id, read.id]
    assert flow[3].phase_started_id == flow[2].id and flow[5].phase_started_id == flow[4].id
    assert flow[6].result.type == "completed"
    # Phase 1's two threads were created in phase 1, phase 2's one after phase 1 ended.
    order = [e.id for e in events]
    made = [e for e in events if e.type == "session.thread_created"]
    assert [e.agent_name for e in made] == ["writer", "beta-writer", "reader"]
    assert all(e.workflow_run_id == run_id for e in made)
    assert order.index(flow[2].id) < order.index(made[1].id) < order.index(flow[3].id) < order.index(made[2].id)
    threads = list(sdk.beta.sessions.threads.list(session_id))
    ran = [t for t in threads if t.workflow_run_id == run_id]
    assert len(threads) == 4 and len(ran) == 3
    assert {t.agent.type for t in ran} == {"agent", "inline"}
    # The reader read both files the writers left in the shared /workspace.
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert "completed" in answer and "read: alpha beta" in answer, answer
    assert _last_idle(events).stop_reason.type == "end_turn"
    assert WorkflowRun.objects.filter(session_id=session_id).count() == 1
    return run_id


def test_a_two_phase_workflow_run_end_to_end(sdk, model, celery_worker):
    model.default = lambda body: _worker(body, _ran_once)
    lead = _lead(sdk)
    session = _session(sdk, lead)
    started = time.monotonic()
    events = _idle(sdk, session.id, lambda e: "Run done." in _said(e))
    logger.info("a two-phase workflow run took %.1f s", time.monotonic() - started)
    run_id = _assert_completed_run(sdk, session.id, events)
    assert [e.type for e in events].count("session.status_idle") == 1  # the coordinator's turn waited
    # The run's threads: retrieve shows workflow_run_id; the phase-2 thread read phase 1's reports.
    (reader,) = [t for t in sdk.beta.sessions.threads.list(session.id) if getattr(t.agent, "name", None) == "reader"]
    assert sdk.beta.sessions.threads.retrieve(reader.id, session_id=session.id).workflow_run_id == run_id
    own = list(sdk.beta.sessions.threads.events.list(reader.id, session_id=session.id))
    first = next(e for e in own if e.type == "agent.thread_message_received").content[0].text
    assert "Reports of the earlier phases" in first and "wrote alpha" in first and "wrote beta" in first
    offered = {tool["name"] for tool in model.requests[0]["body"].get("tools") or []}
    assert "start_workflow_run" in offered and "spawn_agent" not in offered  # subagents disabled
    # A run's thread takes no message: its report is the run's.
    primary = Session.objects.get(id=session.id)
    said, is_error = thread_tool_run(
        session=primary, name="message_agent", tool_input={"session_thread_id": reader.id, "message": "More."}
    )
    assert is_error and f"workflow run {run_id}" in said


def test_workflow_run_errors(sdk, model, celery_worker):
    """program_error and max_workflow_runs_error create no run (workflow_run_id null);
    thread_limit_error ends a run whose phase would pass its thread limit; timeout_error one past
    its time limit (its thread archived); unknown_error one whose thread the client archived."""
    celery_worker.kill()
    celery_worker.start_new(MANGO_WORKFLOW_RUN_THREADS_MAX="2", MANGO_SESSION_MAX_WORKFLOW_RUNS="1")
    sleeping = {"name": "nap", "phases": [{"name": "p", "tasks": [{"agent": "sleeper", "message": "Sleep."}]}]}

    def coordinate(body: dict) -> dict:
        results = _results(body)
        if not results:
            three = [{"agent": "writer", "message": "Write alpha."}] * 3
            return tool_uses(
                [
                    ("start_workflow_run", {"phases": [{"name": "p", "tasks": [{"agent": "nobody", "message": "x"}]}]}),
                    ("start_workflow_run", {"name": "big", "phases": [{"name": "p", "tasks": three}]}),
                ]
            )
        if len(results) == 2:
            return tool_uses(
                [
                    ("start_workflow_run", {**sleeping, "timeout_seconds": 2}),
                    ("start_workflow_run", sleeping),
                ]
            )
        runs = [t for t in request_user_texts(body) if "Workflow run" in t]
        return text("Timed out." if runs else "Waiting.")

    model.default = lambda body: _worker(body, coordinate)
    lead = _lead(sdk)
    session = _session(sdk, lead)
    events = _idle(sdk, session.id, lambda e: "Timed out." in _said(e))
    flow = _workflow(events)
    results = [e for e in events if e.type == "agent.tool_result"]
    # 1. A plan naming no workflow agent: program_error, no run.
    refused = flow[0]
    assert (refused.type, refused.workflow_run_id, refused.error.type) == ("workflow_run.error", None, "program_error")
    assert results[0].is_error and "phases[0].tasks[0].agent" in results[0].content[0].text
    # 2. Three tasks in a phase, two threads per run: created, then ended with thread_limit_error.
    big = flow[1].workflow_run_id
    assert [(e.type, e.workflow_run_id) for e in flow[1:5]] == [
        ("workflow_run.created", big),
        ("workflow_run.status_running", big),
        ("workflow_run.error", big),
        ("workflow_run.status_ended", big),
    ]
    assert flow[3].error.type == "thread_limit_error" and flow[4].result.error.type == "thread_limit_error"
    assert results[1].is_error and "thread_limit_error" in results[1].content[0].text
    # 3. One open run at most: the second start of the response is refused.
    (too_many,) = [e for e in flow if e.type == "workflow_run.error" and e.error.type == "max_workflow_runs_error"]
    assert too_many.workflow_run_id is None
    assert results[3].is_error and "max_workflow_runs_error" in results[3].content[0].text
    # 4. The first run passed its 2 s limit: its phase ended, timeout_error, its thread archived.
    nap = flow[5].workflow_run_id
    ran = [e.type.split(".", 1)[1] for e in flow if e.workflow_run_id == nap]
    assert ran == ["created", "status_running", "phase_started", "phase_ended", "error", "status_ended"]
    ended = [e for e in flow if e.workflow_run_id == nap][-1]
    assert ended.result.type == "error" and ended.result.error.type == "timeout_error"
    (napper,) = [t for t in sdk.beta.sessions.threads.list(session.id) if t.workflow_run_id == nap]
    assert wait_for(lambda: sdk.beta.sessions.threads.retrieve(napper.id, session_id=session.id).archived_at)
    told = [t for r in model.requests for t in request_user_texts(r["body"]) if "Workflow run" in t]
    assert told and f"Workflow run {nap}" in told[-1] and "timeout_error" in told[-1]

    # 5. A run whose thread the client archives mid-task: unknown_error (no message: the client knows).
    def once(body: dict) -> dict:
        return tool_use("start_workflow_run", sleeping) if not _results(body) else text("Waiting.")

    model.default = lambda body: _worker(body, once)
    other = _session(sdk, lead)

    def sleeping_thread():
        row = Session.objects.filter(primary_id=other.id, status="running").first()
        return row if row is not None and _command_started(sdk, other.id, row) else None

    thread = wait_for(sleeping_thread, 60)
    sdk.beta.sessions.threads.archive(thread_id_of(thread.id), session_id=other.id)
    events = _idle(sdk, other.id, lambda e: any(x.type == "workflow_run.status_ended" for x in e), timeout=60)
    flow = _workflow(events)
    assert [e.type.split(".", 1)[1] for e in flow] == [
        "created",
        "status_running",
        "phase_started",
        "phase_ended",
        "error",
        "status_ended",
    ]
    assert flow[4].error.type == "unknown_error" and flow[5].result.error.type == "unknown_error"
    celery_worker.kill()
    celery_worker.start_new()


def _said(events) -> str:
    return "\n".join(e.content[0].text for e in events if e.type == "agent.message")


def _command_started(sdk, session_id: str, row) -> bool:
    own = sdk.beta.sessions.threads.events.list(thread_id_of(row.id), session_id=session_id)
    return any(e.type == "agent.tool_use" for e in own)


@pytest.mark.parametrize(
    "point",
    [
        "workflow_run_created",  # the coordinator's tool: the run's row committed, phase 1 not opened
        "workflow_run_phase_started",  # phase 1 opened with its threads, the tool's result not written
        "workflow_run_reported",  # a thread's report committed, the run not advanced, its idle not written
        "workflow_run_phase_ended",  # phase 1 ended, phase 2 not opened (the reaper or the coordinator opens it)
    ],
)
def test_a_worker_killed_at_each_step_of_a_run_resumes_it_on_another(sdk, model, celery_worker, point):
    """kill -9 at each step: the successor (after the reaper) finishes the run; every step once —
    one run, three threads, each phase started and ended once, one result."""
    model.default = lambda body: _worker(body, _ran_once)
    celery_worker.kill()
    crashing = celery_worker.start_new(MANGO_TEST_CRASH_POINT=point)
    lead = _lead(sdk)
    session = _session(sdk, lead)
    wait_for(lambda: crashing.process.poll() is not None, timeout=60)
    assert crashing.process.returncode == -9  # killed itself at the crash point
    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS)
    events = _idle(sdk, session.id, lambda e: "Run done." in _said(e))
    _assert_completed_run(sdk, session.id, events)
    run = WorkflowRun.objects.get(session_id=session.id)
    assert len(run.reports) == 3 and run.threads_created == 3
    assert Session.objects.filter(primary_id=session.id).count() == 3  # nothing spawned twice
