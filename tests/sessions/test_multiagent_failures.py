"""A child thread whose turn fails for good terminates, as the SDK's child threads do: its last
session.error says `retry_status: terminal` (the first, while the call is retried, `retrying`),
its idle (`retries_exhausted`) is followed by session.thread_status_terminated, the coordinator
has its report and answers, and the terminated thread takes no more messages. A primary's failed
turn stays `exhausted` (tests/sessions/test_runtime.py). Real worker and sandbox, the scripted
model; the SDK with strict response validation."""

import pytest

from sessions.models import Session
from sessions.services.threads import ThreadRefused, thread_message_send
from tests.scripted_model import error, request_system
from tests.sessions.conftest import wait_for
from tests.sessions.test_multiagent import _children, _go, _session_idle, _spawning, _team, _thread_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_subagent_whose_model_fails_for_good_terminates(sdk, model, celery_worker):
    lead, env = _team(sdk, ("alpha",))
    spawning = _spawning(("alpha",), "echo hi")
    # MANGO_MODEL_MAX_RETRIES=1 in the test worker: alpha's call fails, is retried, fails again.
    model.default = lambda body: error(500) if request_system(body).startswith("You are alpha") else spawning(body)
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    _go(sdk, session.id)

    events = wait_for(lambda: _session_idle(sdk, session.id), 60)
    (child,) = _children(sdk, session.id)
    thread_events = _thread_events(sdk, session.id, child.id)
    errors = [e.error for e in thread_events if e.type == "session.error"]
    assert [(e.type, e.retry_status.type) for e in errors] == [
        ("model_request_failed_error", "retrying"),
        ("model_request_failed_error", "terminal"),
    ], errors
    types = [e.type for e in thread_events]
    assert types[-2:] == ["session.thread_status_idle", "session.thread_status_terminated"], types
    idle = [e for e in thread_events if e.type == "session.thread_status_idle"][-1]
    assert idle.stop_reason.type == "retries_exhausted"
    assert sdk.beta.sessions.threads.retrieve(child.id, session_id=session.id).status == "terminated"

    # The coordinator had the thread's report and finished its turn; its own session goes on.
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer.startswith("Done: ") and "retries_exhausted" in answer, answer
    assert events[-1].stop_reason.type == "end_turn"
    primary = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.status_terminated"]
    assert primary == [] and sdk.beta.sessions.retrieve(session.id).status == "idle"

    # Terminated, it takes no more messages (the coordinator's model gets an error result).
    row = Session.objects.get(id=session.id)
    child_row = Session.objects.get(primary_id=session.id)
    with pytest.raises(ThreadRefused, match="is terminated"):
        thread_message_send(sender=row, target_id=child_row.id, content=[{"type": "text", "text": "again"}])
