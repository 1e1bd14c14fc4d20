"""Dreams run end to end: a real worker, the scripted model, Docker sandboxes. create_new writes
new versions (by the dream's session) into a new store that starts as a copy and leaves the
input alone; update_existing writes into the input; cancel interrupts; the dream's agent and
environment are not listed; the model's request carries the prompt, the instructions and the
transcripts, and no web tool."""

import pytest

from agents.models import Agent, Environment
from dreams.models import Dream
from memory.models import Memory, MemoryStore, MemoryVersion
from sessions.models import Session
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(240)]

MODEL = "claude-sonnet-4-5"
REWRITE = "cd /mnt/memory/* && cat a.md b.md && printf 'x is 2' > a.md && rm b.md && printf 'new' > c.md"


def _memories(store_id: str) -> dict[str, str]:
    return dict(Memory.objects.filter(store_id=store_id).values_list("path", "content"))


def _setup(sdk, model):
    """An input store with a duplicate, and a session whose transcript says x changed (its turn
    runs on the scripted model: it answers, and goes idle)."""
    store = sdk.beta.memory_stores.create(name="notes", description="What we know.")
    for path, content in (("/a.md", "x is 1"), ("/b.md", "x is 1 (again)")):
        sdk.beta.memory_stores.memories.create(store.id, path=path, content=content)
    agent = sdk.beta.agents.create(name="user agent", model=MODEL)
    env = sdk.beta.environments.create(name="self", config={"type": "self_hosted"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    model.script([text("Noted: x is 2.")])
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "x is now 2"}]}]
    )
    wait_for(lambda: list(sdk.beta.sessions.events.list(session.id))[-1].type == "session.status_idle", timeout=60)
    model.requests.clear()
    return store, session, agent, env


def _ended(sdk, dream_id: str, timeout: float = 90):
    return wait_for(
        lambda: (d := sdk.beta.dreams.retrieve(dream_id)).status in ("completed", "failed", "canceled") and d,
        timeout=timeout,
        interval=0.3,
    )


def test_create_new_writes_a_new_store_and_leaves_the_input(sdk, model, celery_worker):
    store, session, agent, env = _setup(sdk, model)
    model.script([tool_use("bash", {"command": REWRITE}), text("Merged a and b; x is 2.")])
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
        instructions="Prefer one file per topic.",
    )
    done = _ended(sdk, dream.id)
    assert done.status == "completed", done.error
    assert done.ended_at is not None and done.error is None and done.session_id
    (output,) = done.outputs
    assert output.memory_store_id != store.id
    assert _memories(store.id) == {"/a.md": "x is 1", "/b.md": "x is 1 (again)"}  # input unchanged
    assert MemoryVersion.objects.filter(store_id=store.id).count() == 2
    assert _memories(output.memory_store_id) == {"/a.md": "x is 2", "/c.md": "new"}
    by_session = sdk.beta.memory_stores.memory_versions.list(output.memory_store_id, session_id=done.session_id)
    assert sorted((v.operation, v.path) for v in by_session) == [
        ("created", "/c.md"),
        ("deleted", "/b.md"),
        ("modified", "/a.md"),
    ]
    copies = MemoryVersion.objects.filter(store_id=output.memory_store_id, session_id__isnull=True)
    assert sorted(copies.values_list("operation", "path")) == [("created", "/a.md"), ("created", "/b.md")]
    new_store = sdk.beta.memory_stores.retrieve(output.memory_store_id)
    assert new_store.name == f"notes (dream {dream.id})" and new_store.description == "What we know."

    # The model's first request: the dream's prompt and instructions, the transcript, no web tool.
    body = model.requests[0]["body"]
    system = body["system"] if isinstance(body["system"], str) else "".join(b["text"] for b in body["system"])
    assert "You are dreaming" in system and "Prefer one file per topic." in system
    first = body["messages"][0]["content"]
    first_text = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    assert f'<session id="{session.id}">\nUser: x is now 2\nAgent: Noted: x is 2.\n</session>' in first_text
    tool_names = {tool.get("name") for tool in body.get("tools") or []}
    assert "bash" in tool_names and not tool_names & {"web_fetch", "web_search"}

    # usage is the session's; the dream's session is a session of the workspace, its agent and
    # environment are internal: not listed.
    row = Session.objects.get(id=done.session_id)
    assert done.usage.input_tokens == row.usage["input_tokens"] > 0 and done.usage.output_tokens > 0
    assert [a.id for a in sdk.beta.agents.list()] == [agent.id]
    assert [e.id for e in sdk.beta.environments.list()] == [env.id]
    assert Agent.objects.filter(internal=True).count() == Environment.objects.filter(internal=True).count() == 1
    assert row.environment_config["networking"]["type"] == "limited"

    archived = sdk.beta.dreams.archive(dream.id)
    assert archived.archived_at is not None and list(sdk.beta.dreams.list()) == []
    with pytest.raises(Exception, match="is completed and cannot be canceled"):
        sdk.beta.dreams.cancel(dream.id)


def test_update_existing_writes_into_the_input_store(sdk, model, celery_worker):
    store, session, _, _ = _setup(sdk, model)
    model.script([tool_use("bash", {"command": REWRITE}), text("Done.")])
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model={"id": MODEL, "speed": "standard"},
        output_behavior={"type": "update_existing", "memory_store_id": store.id},
    )
    done = _ended(sdk, dream.id)
    assert done.status == "completed", done.error
    assert [o.memory_store_id for o in done.outputs] == [store.id]
    assert _memories(store.id) == {"/a.md": "x is 2", "/c.md": "new"}
    assert MemoryStore.objects.count() == 1  # no copy
    assert {v.session_id for v in MemoryVersion.objects.filter(store_id=store.id, operation="modified")} == {
        done.session_id
    }


def test_cancel_interrupts_the_running_dream(sdk, model, celery_worker):
    store, session, _, _ = _setup(sdk, model)
    model.script([tool_use("bash", {"command": "cd /mnt/memory/* && printf partial > p.md && sleep 60"}), text("x")])
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
    )
    running = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream.id)).status == "running" and d, timeout=60)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(running.session_id)), 60)
    canceled = sdk.beta.dreams.cancel(dream.id)
    assert canceled.status == "canceled" and canceled.ended_at is not None and canceled.error is None

    def idle():
        events = list(sdk.beta.sessions.events.list(running.session_id, limit=1000))
        return events[-1].type == "session.status_idle" and events

    events = wait_for(idle, timeout=60)
    assert any(e.type == "user.interrupt" for e in events)
    after = sdk.beta.dreams.retrieve(dream.id)
    assert after.status == "canceled" and after.ended_at == canceled.ended_at  # final: the idle does not move it
    (output,) = canceled.outputs
    assert output.memory_store_id != store.id
    # The canceled dream's store keeps what was written (the interrupted turn's write-back).
    assert _memories(output.memory_store_id) == {"/a.md": "x is 1", "/b.md": "x is 1 (again)", "/p.md": "partial"}
    assert Dream.objects.get(id=dream.id).error is None


def test_a_dream_past_its_time_fails_with_timeout(sdk, model, celery_worker):
    from django.test import override_settings

    from dreams.tasks import sweep

    store, session, _, _ = _setup(sdk, model)
    model.script([tool_use("bash", {"command": "sleep 60"}), text("x")])
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
    )
    running = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream.id)).status == "running" and d, timeout=60)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(running.session_id)), 60)
    assert sweep() == 0  # within its time: left alone
    with override_settings(MANGO_DREAM_TIMEOUT_SECONDS=0):
        assert sweep() == 1
    failed = sdk.beta.dreams.retrieve(dream.id)
    assert failed.status == "failed" and failed.error.type == "timeout" and failed.ended_at is not None
    events = wait_for(
        lambda: (
            (ev := list(sdk.beta.sessions.events.list(running.session_id, limit=1000)))[-1].type
            == "session.status_idle"
            and ev
        ),
        timeout=60,
    )
    assert any(e.type == "user.interrupt" for e in events)
    assert sdk.beta.dreams.retrieve(dream.id).error.type == "timeout"  # final


def test_a_session_that_ends_in_error_fails_the_dream(sdk, model, celery_worker):
    from tests.scripted_model import error

    store, session, _, _ = _setup(sdk, model)
    model.script([error(500), error(500)])  # MANGO_MODEL_MAX_RETRIES=1 in the test worker: exhausted
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
    )
    done = _ended(sdk, dream.id)
    assert done.status == "failed" and done.ended_at is not None
    assert done.error.type == "internal_error" and "retries_exhausted" in done.error.message
    events = list(sdk.beta.sessions.events.list(done.session_id, limit=1000))
    assert events[-1].type == "session.status_idle" and events[-1].stop_reason.type == "retries_exhausted"
    # What the dream wrote before it stopped stays: here nothing, its store is the copy.
    assert _memories(done.outputs[0].memory_store_id) == {"/a.md": "x is 1", "/b.md": "x is 1 (again)"}


def test_a_dream_stops_at_its_budget(sdk, model, celery_worker, settings):
    from tests.scripted_model import message

    settings.MANGO_DREAM_MAX_LIST_COST_CENTS = 2  # read at create (in this process), kept on the dream
    store, session, _, _ = _setup(sdk, model)
    # The first call costs 3.3 cents at claude-sonnet-4-5's list price: over the two-cent cap.
    usage = {"input_tokens": 1000, "output_tokens": 1000, "cache_creation_input_tokens": 4000,
             "cache_read_input_tokens": 0}  # fmt: skip
    call = [{"type": "tool_use", "id": "toolu_d", "name": "bash", "input": {"command": "ls"}}]
    model.script([message(call, "tool_use", usage=usage), text("never requested")])
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
    )
    done = _ended(sdk, dream.id)
    assert done.status == "failed" and done.error.type == "budget_reached", done.error
    assert len(model.requests) == 1  # the cap stopped the dream before a second request
    row = Session.objects.get(id=done.session_id)
    assert row.budget == {"type": "limit", "max_list_cost": {"amount": "2", "currency": "USD"}}
    assert sdk.beta.sessions.retrieve(done.session_id).usage.list_cost.amount == "4"
    assert done.usage.input_tokens == 1000 and done.usage.output_tokens == 1000
