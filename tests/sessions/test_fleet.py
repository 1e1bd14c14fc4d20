"""Workers as a fleet (threads pool, as `make run` starts them): two worker processes with their
own hostnames share one queue; one killed with SIGKILL mid-turn has its turn resumed by the
other within the lease time (its reaper, no beat needed) with no duplicate or missing event; one
draining on SIGTERM hands its turn back at a safe point and loses nothing; and an interrupt stops
a turn within 2 s while 200 turns run on one worker.

Times are taken from the server's own event timestamps (processed_at: when the worker or the API
committed the event), not from when this test's polling noticed, so a loaded machine slows the
polling without loosening what is asserted. The bounds, with FLEET_LEASE_SECONDS = L and
REAPER_SECONDS = R:

* resume after SIGKILL: the survivor's resume event is committed no earlier than 7/8 L after the
  kill (the dead worker's last renewal is at most L/8 old: nobody steals a live lease) and no later
  than L + R + HANDOFF_SECONDS (the lease goes stale, the reaper's next pass enqueues the session,
  the survivor picks the task up and takes the lease; HANDOFF_SECONDS is the allowance for that
  pick-up on a loaded 2-core machine);
* interrupt: the session.status_idle that ends the interrupted turn is committed ≤ 2 s after the
  client began sending user.interrupt.
"""

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.conf import settings as django_settings

from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for, worker_env
from tests.worker import CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

# A lease of their own: long enough that a worker starved on a loaded machine keeps its leases
# (renewed every L/8), short enough that the kill test stays short.
FLEET_LEASE_SECONDS = 6
REAPER_SECONDS = 1
HANDOFF_SECONDS = 3


@pytest.fixture
def fleet_queue(settings):
    """A queue of this test's own: the run's shared worker never takes these turns."""
    queue = f"mango-fleet-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.MANGO_SESSIONS_QUEUE = queue
    yield queue
    redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)


@pytest.fixture
def fleet(scripted_model, fleet_queue):
    workers: list[CeleryWorker] = []

    def start(name: str, concurrency: int = 8) -> CeleryWorker:
        env = {
            **worker_env(scripted_model),
            "MANGO_SANDBOX": "local_process",
            "MANGO_SESSIONS_QUEUE": fleet_queue,
            "MANGO_SESSION_REAPER_SECONDS": str(REAPER_SECONDS),
            "MANGO_SESSION_LEASE_SECONDS": str(FLEET_LEASE_SECONDS),
            # One workspace's 200 turns at once: capacity, not fair shares (test_fairness.py).
            "MANGO_WORKSPACE_MAX_RUNNING_TURNS": "0",
        }
        worker = CeleryWorker(env=env, queues=fleet_queue, pool="threads", concurrency=concurrency, name=name)
        workers.append(worker.start(timeout=120))  # a loaded CI machine starts workers slowly
        return worker

    yield start
    for worker in workers:
        worker.kill()


def _send(sdk, session_id: str, value: str = "go") -> None:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": value}]}]
    )


def _events(sdk, session_id: str) -> list:
    return list(sdk.beta.sessions.events.list(session_id, limit=1000))


def _idle_events(sdk, session_id: str, timeout: float, workers=()):
    def idle():
        events = _events(sdk, session_id)
        return events if events and events[-1].type == "session.status_idle" else None

    try:
        return wait_for(idle, timeout)
    except AssertionError:
        raise AssertionError(_diagnosis(sdk, session_id, workers)) from None


def _diagnosis(sdk, session_id: str, workers) -> str:
    """What the session's log and the workers' logs say, for a failure message."""
    lines = [f"session {session_id}: {[e.type for e in _events(sdk, session_id)]}"]
    for worker in workers:
        text = worker.log_path.read_text(errors="replace").splitlines()
        lines.append(f"--- {worker.name} ({worker.log_path}):")
        lines.extend(line[:300] for line in text if '"level": "INFO"' not in line[:120])
    return "\n".join(lines[:200])


def _committed(event) -> float:
    """When the server committed the event (epoch seconds; same clock as this test's)."""
    return event.processed_at.timestamp()


def _assert_log_whole(events) -> None:
    """Ordered without gaps, nothing twice, every tool use answered exactly once."""
    from sessions.models import SessionEvent

    ids = [e.id for e in events]
    assert len(ids) == len(set(ids))
    seqs = list(SessionEvent.objects.filter(id__in=ids).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    uses = [e.id for e in events if e.type == "agent.tool_use"]
    answered = [e.tool_use_id for e in events if e.type == "agent.tool_result"]
    assert sorted(answered) == sorted(uses)


@pytest.fixture
def bash_agent(sdk):
    return sdk.beta.agents.create(name="f", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])


@pytest.fixture
def environment(sdk):
    return sdk.beta.environments.create(name="e")


def test_a_worker_killed_mid_turn_is_resumed_by_the_other_within_the_lease(sdk, model, fleet, bash_agent, environment):
    model.script([tool_use("bash", {"command": "sleep 60"}), text("finished elsewhere")])
    first = fleet("fleet-a")
    session = sdk.beta.sessions.create(agent=bash_agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in _events(sdk, session.id)), 30)
    second = fleet("fleet-b")
    time.sleep(0.5)  # the command runs on the first worker

    first.kill()
    killed_at = time.time()
    events = _idle_events(sdk, session.id, FLEET_LEASE_SECONDS + REAPER_SECONDS + 60, [first, second])
    try:
        _assert_log_whole(events)
        types = [e.type for e in events]
        assert types.count("agent.tool_use") == 1 and types.count("agent.message") == 1
        assert types.count("session.status_idle") == 1 and types.count("session.status_running") == 2
        resumed = next(e for e in events if e.type == "session.error")
        assert resumed.error.retry_status.type == "retrying"
        result = next(e for e in events if e.type == "agent.tool_result")
        assert result.is_error and "stopped" in result.content[0].text  # the killed command's answer
        assert events[-2].type == "agent.message" and events[-2].content[0].text == "finished elsewhere"
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(sdk, session.id, [first, second])}") from None
    # Resumed by the survivor's reaper once the lease went stale, not before (module docstring).
    after = _committed(resumed) - killed_at
    print(f"resumed {after:.2f} s after the kill (lease {FLEET_LEASE_SECONDS} s, reaper {REAPER_SECONDS} s)")
    reaper = [line for line in second.log_path.read_text().splitlines() if "reaper" in line or "recovering" in line]
    assert FLEET_LEASE_SECONDS * 7 / 8 - 0.5 <= after <= FLEET_LEASE_SECONDS + REAPER_SECONDS + HANDOFF_SECONDS, (
        f"resumed {after:.2f} s after the kill; the survivor's reaper said: {reaper[-10:]}"
    )
    assert session.id in second.log_path.read_text()  # the survivor ran it


def test_a_draining_worker_hands_its_turn_back_without_losing_events(sdk, model, fleet, bash_agent, environment):
    model.script([tool_use("bash", {"command": "echo one"}, delay=3), text("done after the drain", delay=0.5)])
    first = fleet("drain-a")
    session = sdk.beta.sessions.create(agent=bash_agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    model.wait_for_requests(1, 30)
    first.terminate()  # SIGTERM: warm shutdown while the model call is in flight
    assert first.process.wait(60) == 0  # drained and exited on its own
    assert model.remaining == 1, _diagnosis(sdk, session.id, [first])  # handed back, not finished
    second = fleet("drain-b")
    events = _idle_events(sdk, session.id, 60, [first, second])
    try:
        _assert_log_whole(events)
        types = [e.type for e in events]
        assert types.count("agent.tool_use") == 1 and types.count("agent.message") == 1
        result = next(e for e in events if e.type == "agent.tool_result")
        assert not result.is_error and "one" in result.content[0].text  # ran to completion before the hand-back
        assert events[-2].type == "agent.message" and events[-2].content[0].text == "done after the drain"
        assert events[-1].stop_reason.type == "end_turn"
        # Handed back at the safe point after the tool ran; the other worker resumed the turn.
        assert "handing the session to another runner" in first.log_path.read_text()
        assert types.count("session.status_running") == 2
        assert second.process.poll() is None
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnosis(sdk, session.id, [first, second])}") from None


@pytest.mark.timeout(600)
def test_interrupt_within_two_seconds_under_200_concurrent_turns(sdk, model, fleet, environment):
    count = 200
    model.default = text("too slow to wait for", delay=120)
    fleet("busy", concurrency=count + 10)
    agent = sdk.beta.agents.create(name="t", model="claude-sonnet-4-5")
    sessions = [sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id) for _ in range(count)]
    # Sent 16 at a time, each checked: 200 at once wait on the live server's 8 pooled database
    # connections, and under a whole suite's load some waited out the pool (503, no retry here),
    # leaving their sessions unstarted.
    with ThreadPoolExecutor(16) as senders:
        list(senders.map(lambda s: _send(sdk, s.id), sessions))
    model.wait_for_requests(count, 240)  # every turn is waiting on the upstream

    latencies = []
    for session in sessions[:3]:
        started = time.time()
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        events = _idle_events(sdk, session.id, 30)
        assert events[-1].stop_reason.type == "end_turn"
        assert not any(e.type == "agent.message" for e in events)  # stopped, not answered
        latencies.append(_committed(events[-1]) - started)
    print(f"interrupt → idle committed, under {count} concurrent turns: {[round(x, 3) for x in latencies]} s")
    assert max(latencies) <= 2.0
    for session in sessions[3:]:  # end the rest
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
