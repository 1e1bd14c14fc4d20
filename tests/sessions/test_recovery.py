"""A worker killed mid-turn (SIGKILL to its whole process group) leaves a running session with a
stale lease; sessions.recover_stuck hands it to another worker, which resumes the turn."""

import time

import pytest

from sessions.models import Session
from sessions.runtime.fleet import Reaper
from sessions.tasks import session_recover_stuck
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(120)]


def test_worker_killed_mid_turn_is_recovered(sdk, model, celery_worker):
    agent = sdk.beta.agents.create(name="r", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    env = sdk.beta.environments.create(name="e")
    model.script([tool_use("bash", {"command": "sleep 30"}), text("recovered")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    wait_for(lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(session.id)), 20)
    time.sleep(0.5)  # the sleep runs in the container

    celery_worker.kill()
    row = Session.objects.get(id=session.id)
    assert row.status == "running" and row.runner_token  # stuck with a lease nobody renews
    assert session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS) == []  # lease not stale yet

    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    assert session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS) == [session.id]

    def idle():
        events = list(sdk.beta.sessions.events.list(session.id))
        return events if events[-1].type == "session.status_idle" else None

    events = wait_for(idle, 20)
    types = [e.type for e in events]
    assert types.count("session.status_running") == 2
    error = next(e for e in events if e.type == "session.error")
    assert error.error.type == "unknown_error" and error.error.retry_status.type == "retrying"
    result = next(e for e in events if e.type == "agent.tool_result")
    assert result.is_error and "stopped" in result.content[0].text
    assert events[-2].type == "agent.message" and events[-2].content[0].text == "recovered"
    assert events[-1].stop_reason.type == "end_turn"
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"
    resumed_request = model.requests[-1]["body"]["messages"]
    assert resumed_request[-1]["content"][0]["type"] == "tool_result"
    assert Session.objects.get(id=session.id).runner_token is None


def test_lost_wake_up_is_recovered(sdk, model, celery_worker):
    """Client input committed but its task lost (say, Redis flushed): recover_stuck runs it."""
    from django.db import transaction

    from sessions.services.events import events_append_locked

    agent = sdk.beta.agents.create(name="r", model="claude-sonnet-4-5")
    env = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    model.script([text("picked up")])
    with transaction.atomic():  # appended without enqueuing a run, as if the task vanished
        row = Session.objects.select_for_update().get(id=session.id)
        events_append_locked(
            session=row,
            items=[
                {"type": "user.message", "payload": {"content": [{"type": "text", "text": "hi"}]}, "processed_at": None}
            ],
        )
    time.sleep(0.5)
    assert model.requests == []
    assert session_recover_stuck(stale_seconds=0) == [session.id]

    def idle():
        events = list(sdk.beta.sessions.events.list(session.id))
        return events if events[-1].type == "session.status_idle" else None

    events = wait_for(idle, 20)
    assert events[-2].content[0].text == "picked up"
    assert session_recover_stuck(stale_seconds=0) == []


def test_a_runner_whose_lease_was_taken_over_writes_nothing(sdk):
    """A runner only presumed dead (silent longer than the lease) may wake up after its successor
    took the session: its appends are refused under the session's lock and roll back whole."""
    from sessions.events import EventType
    from sessions.models import SessionEvent
    from sessions.services.events import LeaseLost, runner_fence, session_event_append

    agent = sdk.beta.agents.create(name="f", model="claude-sonnet-4-5")
    env = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    Session.objects.filter(id=session.id).update(runner_token="successor")
    before = Session.objects.get(id=session.id).last_seq

    with runner_fence(session_id=session.id, token="presumed-dead"), pytest.raises(LeaseLost):
        session_event_append(session_id=session.id, type=EventType.AGENT_MESSAGE, payload={"content": []})
    assert Session.objects.get(id=session.id).last_seq == before
    assert not SessionEvent.objects.filter(session_id=session.id, type=EventType.AGENT_MESSAGE).exists()

    with runner_fence(session_id=session.id, token="successor"):  # the lease holder writes
        session_event_append(session_id=session.id, type=EventType.AGENT_MESSAGE, payload={"content": []})
    assert Session.objects.get(id=session.id).last_seq == before + 1


def test_a_late_or_slow_reaper_pass_is_logged(settings, caplog):
    """The reaper's passes log nothing while all is well; one that takes more than twice the
    interval (so every recovery waits as long) says so, with how long it took."""
    settings.MANGO_SESSION_REAPER_SECONDS = 0.05
    passes = []
    reaper = Reaper(lambda: (passes.append(time.monotonic()), time.sleep(0.3 if len(passes) == 2 else 0)))
    reaper.start()
    try:
        wait_for(lambda: len(passes) >= 4, 10)
    finally:
        reaper.stopped.set()
        reaper.join(5)
    slow = [record for record in caplog.records if record.getMessage() == "session reaper pass late or slow"]
    assert len(slow) == 1, [r.getMessage() for r in caplog.records]
    assert slow[0].pass_seconds >= 0.3
