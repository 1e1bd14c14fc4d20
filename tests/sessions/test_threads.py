"""Session threads (issue 27, point 4): every session has its primary thread, which carries all
of its events; the SDK's 5 thread methods with strict response validation."""

import anthropic
import pytest

from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

MODEL = "claude-sonnet-4-5"


def test_the_primary_thread_through_the_sdk(sdk, live_server, other_api_key, model, celery_worker):
    agent = sdk.beta.agents.create(
        name="t",
        model=MODEL,
        tools=[{"type": "custom", "name": "ping", "description": "Ping.", "input_schema": {"type": "object"}}],
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    (thread,) = list(sdk.beta.sessions.threads.list(session.id))
    assert thread.type == "session_thread" and thread.session_id == session.id and thread.parent_thread_id is None
    assert thread.status == "idle" and thread.agent.id == agent.id
    # As the SDK documents them: no stats before the thread's first status transition, no usage
    # before its first idle.
    assert thread.stats is None and thread.usage is None
    assert sdk.beta.sessions.threads.retrieve(thread.id, session_id=session.id).id == thread.id
    assert list(sdk.beta.sessions.threads.list(session.id, statuses=["running"])) == []

    model.script([tool_use("ping", {}), text("pong")])
    with sdk.beta.sessions.threads.events.stream(thread.id, session_id=session.id) as stream:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
        )
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                break
    use = next(e for e in seen if e.type == "agent.custom_tool_use")
    # The primary thread's own events name no thread (the field is for subagent cross-posts).
    assert use.session_thread_id is None
    listed = [e.id for e in sdk.beta.sessions.threads.events.list(thread.id, session_id=session.id)]
    assert listed == [e.id for e in sdk.beta.sessions.events.list(session.id)]
    wait_for(lambda: sdk.beta.sessions.retrieve(session.id).status == "idle")
    idled = sdk.beta.sessions.threads.retrieve(thread.id, session_id=session.id)
    assert idled.stats.active_seconds > 0 and idled.stats.duration_seconds >= idled.stats.active_seconds
    running = next(e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.status_running")
    startup = running.processed_at - session.created_at  # a server event is processed when made
    assert idled.stats.startup_seconds == pytest.approx(startup.total_seconds(), abs=0.002)
    assert idled.usage.input_tokens == sdk.beta.sessions.retrieve(session.id).usage.input_tokens > 0

    with pytest.raises(anthropic.BadRequestError, match="archive the session"):
        sdk.beta.sessions.threads.archive(thread.id, session_id=session.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.threads.retrieve("sthr_unknown", session_id=session.id)
    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        other.beta.sessions.threads.retrieve(thread.id, session_id=session.id)
    with pytest.raises(anthropic.NotFoundError):
        other.beta.sessions.threads.events.list(thread.id, session_id=session.id)

    # An interrupt may name the session's thread (the primary one: all there is), and no other.
    with pytest.raises(anthropic.BadRequestError, match="session_thread_id") as refused:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.interrupt", "session_thread_id": "sthr_" + "0" * 26}]
        )
    assert "sthr_" in refused.value.message
    sent = sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.interrupt", "session_thread_id": thread.id}]
    )
    assert [event.type for event in sent.data] == ["user.interrupt"]
