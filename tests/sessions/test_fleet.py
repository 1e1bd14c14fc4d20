"""Workers as a fleet (threads pool, as `make run` starts them): two worker processes with their
own hostnames share one queue; one killed with SIGKILL mid-turn has its turn resumed by the
other within the lease time (its reaper, no beat needed) with no duplicate or missing event; one
draining on SIGTERM hands its turn back at a safe point and loses nothing; and an interrupt stops
a turn within 2 s while 200 turns run on one worker."""

import os
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings as django_settings

from tests.scripted_model import text, tool_use
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for, worker_env
from tests.worker import CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

REAPER_SECONDS = 1


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


def _idle_events(sdk, session_id: str, timeout: float):
    def idle():
        events = _events(sdk, session_id)
        return events if events and events[-1].type == "session.status_idle" else None

    return wait_for(idle, timeout)


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
    model.script([tool_use("bash", {"command": "sleep 30"}), text("finished elsewhere")])
    first = fleet("fleet-a")
    session = sdk.beta.sessions.create(agent=bash_agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in _events(sdk, session.id)), 20)
    second = fleet("fleet-b")
    time.sleep(0.5)  # the command runs on the first worker

    first.kill()
    killed_at = time.monotonic()
    events = _idle_events(sdk, session.id, TEST_LEASE_SECONDS + REAPER_SECONDS + 20)
    resumed = next(e for e in events if e.type == "session.error")
    assert resumed.error.retry_status.type == "retrying"
    # Resumed once the lease went stale (plus one reaper interval and the turn's own work).
    assert time.monotonic() - killed_at < TEST_LEASE_SECONDS + REAPER_SECONDS + 8
    _assert_log_whole(events)
    types = [e.type for e in events]
    assert types.count("agent.tool_use") == 1 and types.count("agent.message") == 1
    assert types.count("session.status_idle") == 1 and types.count("session.status_running") == 2
    result = next(e for e in events if e.type == "agent.tool_result")
    assert result.is_error and "stopped" in result.content[0].text  # the killed command's answer
    assert events[-2].content[0].text == "finished elsewhere"
    assert session.id in second.log_path.read_text()  # the survivor ran it


def test_a_draining_worker_hands_its_turn_back_without_losing_events(sdk, model, fleet, bash_agent, environment):
    model.script([tool_use("bash", {"command": "echo one"}, delay=3), text("done after the drain", delay=0.5)])
    first = fleet("drain-a")
    session = sdk.beta.sessions.create(agent=bash_agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    model.wait_for_requests(1, 10)
    first.terminate()  # SIGTERM: warm shutdown while the model call is in flight
    assert first.process.wait(30) == 0  # drained and exited on its own
    assert model.remaining == 1  # it handed the turn back instead of finishing it
    second = fleet("drain-b")
    events = _idle_events(sdk, session.id, 30)
    _assert_log_whole(events)
    types = [e.type for e in events]
    assert types.count("agent.tool_use") == 1 and types.count("agent.message") == 1
    result = next(e for e in events if e.type == "agent.tool_result")
    assert not result.is_error and "one" in result.content[0].text  # ran to completion before the hand-back
    assert events[-2].content[0].text == "done after the drain"
    assert events[-1].stop_reason.type == "end_turn"
    # Handed back at the safe point after the tool ran; the other worker resumed the turn.
    assert "handing the session to another runner" in first.log_path.read_text()
    assert types.count("session.status_running") == 2
    assert second.process.poll() is None


def test_interrupt_within_two_seconds_under_200_concurrent_turns(sdk, model, fleet, environment):
    count = 200
    model.default = text("too slow to wait for", delay=60)
    fleet("busy", concurrency=count + 10)
    agent = sdk.beta.agents.create(name="t", model="claude-sonnet-4-5")
    sessions = [sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id) for _ in range(count)]
    senders = [threading.Thread(target=_send, args=(sdk, s.id)) for s in sessions]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    model.wait_for_requests(count, 90)  # every turn is waiting on the upstream

    latencies = []
    for session in sessions[:3]:
        started = time.monotonic()
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        _idle_events(sdk, session.id, 10)
        latencies.append(time.monotonic() - started)
    print(f"interrupt latencies under {count} concurrent turns: {[round(x, 3) for x in latencies]}")
    assert max(latencies) <= 2.0
    for session in sessions[3:]:  # end the rest
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
