"""The advisor (issue 39): an agent whose `multiagent` enables the advisor (multiagent_20261001's
`advisor`, or a coordinator's `{type: advisor, model}` roster entry) is offered
`consult_advisor`; a consultation runs as the session's advisor thread (agent
`{type: advisor, model}`, named anthropic.advisor, one per session) on the advisor model, which
reads the question and the conversation; its advice comes back as a thread message, the
consultation's events are thread events, and its usage is the session's. The SDK with strict
response validation, the scripted model, a real worker."""

import time

import pytest

from sessions.events import thread_id_of
from sessions.models import Session
from sessions.tasks import session_recover_stuck
from tests.scripted_model import message, request_system, text, tool_use
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

MODEL = "claude-sonnet-4-5"
ADVISOR = "claude-opus-4-5"
DISABLED = {"type": "disabled"}


def _blocks(body: dict, kind: str) -> list[dict]:
    return [
        block
        for m in body.get("messages") or []
        if m["role"] == "user" and not isinstance(m["content"], str)
        for block in m["content"]
        if block.get("type") == kind
    ]


def _result_text(block: dict) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])


def _decide(body: dict) -> dict:
    if request_system(body).startswith("You are the advisor"):
        asked = _blocks(body, "text")[-1]["text"]
        answer = "Pick the mango." if "Which fruit?" in asked else "Then peel it."
        return message([{"type": "text", "text": answer}], usage={"input_tokens": 100, "output_tokens": 20})
    advice = [b["text"].split("\n", 1)[1] for b in _blocks(body, "text") if b["text"].startswith("[Message from")]
    results = _blocks(body, "tool_result")
    if not results:
        return tool_use("consult_advisor", {"question": " "})  # refused: an error result
    if len(results) == 1:
        return tool_use("consult_advisor", {"question": "Which fruit?"})
    if not advice:
        return text("Waiting for advice.")
    if len(results) == 2:
        return tool_use("consult_advisor", {"question": "And then?"})
    if len(advice) < 2:
        return text("Waiting for more advice.")
    return text("Following advice: " + " ".join(advice))


def _idle(sdk, session_id: str):
    def idle():
        events = list(sdk.beta.sessions.events.list(session_id))
        return events if events and events[-1].type == "session.status_idle" else None

    return wait_for(idle, timeout=60)


@pytest.mark.parametrize(
    "multiagent",
    [
        {"type": "multiagent_20261001", "workflows": DISABLED, "advisor": {"type": "enabled", "model": ADVISOR}},
        {"type": "coordinator", "agents": [{"type": "self"}, {"type": "advisor", "model": ADVISOR}]},
    ],
    ids=["multiagent_20261001", "coordinator"],
)
def test_the_primary_consults_its_advisor(sdk, model, celery_worker, multiagent):
    model.default = _decide
    lead = sdk.beta.agents.create(
        name="lead", model=MODEL, system="You lead.", tools=[{"type": "agent_toolset_20260401"}], multiagent=multiagent
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )
    events = _idle(sdk, session.id)

    assert events[-1].stop_reason.type == "end_turn"
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Following advice: Pick the mango. Then peel it."
    # The empty question was an error result for the model; the two others asked one thread.
    results = [e for e in events if e.type == "agent.tool_result"]
    assert results[0].is_error and "question" in results[0].content[0].text
    assert not results[1].is_error and not results[2].is_error
    threads = list(sdk.beta.sessions.threads.list(session.id))
    (advisor,) = [t for t in threads if t.parent_thread_id is not None]
    assert len(threads) == 2 and advisor.agent.type == "advisor" and advisor.agent.model == ADVISOR
    created = [e for e in events if e.type == "session.thread_created"]
    assert [(e.session_thread_id, e.agent_name) for e in created] == [(advisor.id, "anthropic.advisor")]
    sent = [e for e in events if e.type == "agent.thread_message_sent"]
    assert [e.to_session_thread_id for e in sent] == [advisor.id, advisor.id]
    received = [e for e in events if e.type == "agent.thread_message_received"]
    assert [e.from_session_thread_id for e in received] == [advisor.id, advisor.id]
    # The advisor ran on its model, read the question and the conversation, and offered no tools.
    asked = [r["body"] for r in model.requests if request_system(r["body"]).startswith("You are the advisor")]
    assert [body["model"] for body in asked] == [ADVISOR, ADVISOR]
    first = _blocks(asked[0], "text")[-1]["text"]
    assert "Question: Which fruit?" in first and "User: Go." in first
    assert all(not body.get("tools") for body in asked)
    # Its thread's own log has the consultations and its answers; its usage is the session's.
    own = list(sdk.beta.sessions.threads.events.list(advisor.id, session_id=session.id))
    assert [e.content[0].text for e in own if e.type == "agent.message"] == ["Pick the mango.", "Then peel it."]
    usage = wait_for(lambda: sdk.beta.sessions.threads.retrieve(advisor.id, session_id=session.id).usage)
    assert usage.input_tokens == 200 and usage.output_tokens == 40
    total = sdk.beta.sessions.retrieve(session.id).usage
    primary = next(t for t in threads if t.parent_thread_id is None)
    primary_usage = sdk.beta.sessions.threads.retrieve(primary.id, session_id=session.id).usage
    assert total.input_tokens == primary_usage.input_tokens + 200
    assert total.output_tokens == primary_usage.output_tokens + 40


def test_without_an_advisor_there_is_no_consult_tool(sdk, model, celery_worker):
    model.default = lambda body: text("No advisor here.")
    alone = sdk.beta.agents.create(name="alone", model=MODEL, system="You work alone.")
    lead = sdk.beta.agents.create(
        name="lead", model=MODEL, system="You lead.", multiagent={"type": "coordinator", "agents": [alone.id]}
    )
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )
    _idle(sdk, session.id)
    offered = {tool["name"] for tool in model.requests[-1]["body"].get("tools") or []}
    assert {"spawn_agent", "message_agent"} <= offered and "consult_advisor" not in offered


def test_a_worker_killed_during_a_consultation_resumes_it_on_another(sdk, model, celery_worker):
    """kill -9 while the advisor's model call is in flight: the advisor thread's turn resumes on
    the next worker (its own lease, like any thread) and the coordinator still gets its advice."""

    def decide(body: dict) -> dict:
        if request_system(body).startswith("You are the advisor"):
            return message([{"type": "text", "text": "Pick the mango."}], delay=3.0)
        advice = [b["text"].split("\n", 1)[1] for b in _blocks(body, "text") if b["text"].startswith("[Message from")]
        if not _blocks(body, "tool_result"):
            return tool_use("consult_advisor", {"question": "Which fruit?"})
        return text("Following advice: " + " ".join(advice)) if advice else text("Waiting for advice.")

    model.default = decide
    advisor = {"type": "enabled", "model": ADVISOR}
    multiagent = {"type": "multiagent_20261001", "workflows": DISABLED, "advisor": advisor}
    lead = sdk.beta.agents.create(name="lead", model=MODEL, system="You lead.", multiagent=multiagent)
    env = sdk.beta.environments.create(name="e", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=lead.id, environment_id=env.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
    )

    def advisor_asking():
        rows = Session.objects.filter(primary_id=session.id)
        child = rows.first()
        if child is None:
            return None
        own = list(sdk.beta.sessions.threads.events.list(thread_id_of(child.id), session_id=session.id))
        return child if any(e.type == "span.model_request_start" for e in own) else None

    child = wait_for(advisor_asking, 30)
    celery_worker.kill()  # SIGKILL: the coordinator's and the advisor's runners die together
    assert Session.objects.get(id=child.id).status == "running"
    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    assert set(session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS)) == {session.id, child.id}

    events = wait_for(lambda: (e := _idle(sdk, session.id)) and e[-1].stop_reason.type == "end_turn" and e, 60)
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Following advice: Pick the mango."
    own = list(sdk.beta.sessions.threads.events.list(thread_id_of(child.id), session_id=session.id))
    assert [e.type for e in own].count("session.thread_status_running") == 2  # its turn, resumed
    assert [e.content[0].text for e in own if e.type == "agent.message"] == ["Pick the mango."]
    assert Session.objects.filter(primary_id=session.id).count() == 1  # one advisor thread still
