"""Nothing lost, nothing twice, for dreams: a worker SIGKILLed at each step of a dream's start
(the sweep re-sends it to a new worker), and one SIGKILLed while the dream's session runs (the
sessions' recovery resumes it): each dream ends completed with one output store and one session."""

import time

import pytest
from django.test import override_settings

from dreams.models import Dream
from dreams.tasks import sweep
from memory.models import Memory, MemoryStore
from sessions.models import Session
from sessions.tasks import session_recover_stuck
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import TEST_LEASE_SECONDS, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "claude-sonnet-4-5"
REWRITE = "cd /mnt/memory/* && printf 'x is 2' > a.md"


def _dream(sdk):
    store = sdk.beta.memory_stores.create(name="notes")
    sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="x is 1")
    agent = sdk.beta.agents.create(name="user agent", model=MODEL)
    env = sdk.beta.environments.create(name="self", config={"type": "self_hosted"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    dream = sdk.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store.id},
            {"type": "sessions", "session_ids": [session.id]},
        ],
        model=MODEL,
    )
    return store, dream


def _once(sdk, store, dream_id: str) -> None:
    done = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream_id)).status != "pending" and d, timeout=60)
    done = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream_id)).status == "completed" and d, timeout=90)
    copies = MemoryStore.objects.filter(metadata__dream_id=dream_id)
    assert copies.count() == 1 and [o.memory_store_id for o in done.outputs] == [copies.get().id]
    assert Session.objects.filter(metadata__dream_id=dream_id).count() == 1
    assert done.session_id == Session.objects.get(metadata__dream_id=dream_id).id
    assert dict(Memory.objects.filter(store=copies.get()).values_list("path", "content")) == {"/a.md": "x is 2"}
    assert dict(Memory.objects.filter(store_id=store.id).values_list("path", "content")) == {"/a.md": "x is 1"}


@pytest.mark.parametrize(
    "point",
    ["dreams.start.store_copied", "dreams.start.store_committed", "dreams.start.session_created",
     "dreams.start.committed"],
)  # fmt: skip
def test_start_killed_at_each_step_runs_once(sdk, model, celery_worker, point):
    celery_worker.kill()
    crashing = celery_worker.start_new(MANGO_TEST_CRASH_POINT=point)
    model.script([tool_use("bash", {"command": REWRITE}), text("Done.")])
    store, dream = _dream(sdk)
    wait_for(lambda: crashing.process.poll() is not None, timeout=30)  # SIGKILLed at the point
    row = Dream.objects.get(id=dream.id)
    if point in ("dreams.start.store_copied",):
        assert row.output_store_id is None and not MemoryStore.objects.filter(metadata__dream_id=dream.id).exists()
    if point in ("dreams.start.store_committed", "dreams.start.session_created"):
        assert row.output_store_id and row.session_id is None and row.status == "pending"
        assert not Session.objects.filter(metadata__dream_id=dream.id).exists()
    if point == "dreams.start.committed":
        assert row.session_id and row.status == "running"
    celery_worker.start_new()
    with override_settings(MANGO_DREAM_START_RETRY_SECONDS=0):
        sweep()  # re-sends the start of a dream still pending; a running one is left alone
    if point == "dreams.start.committed":
        # The session was committed with its wake-up lost with the worker: its recovery runs it.
        time.sleep(TEST_LEASE_SECONDS + 0.5)
        session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS)
    _once(sdk, store, dream.id)


def test_worker_killed_while_the_dream_runs_resumes_and_completes_once(sdk, model, celery_worker):
    model.script([tool_use("bash", {"command": "sleep 30"}), tool_use("bash", {"command": REWRITE}), text("Done.")])
    store, dream = _dream(sdk)
    running = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream.id)).status == "running" and d, timeout=60)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(running.session_id)), 60)
    time.sleep(0.5)  # the sleep runs in the container
    celery_worker.kill()
    assert Session.objects.get(id=running.session_id).status == "running"
    celery_worker.start_new()
    time.sleep(TEST_LEASE_SECONDS + 0.5)
    assert session_recover_stuck(stale_seconds=TEST_LEASE_SECONDS) == [running.session_id]
    _once(sdk, store, dream.id)
    types = [e.type for e in sdk.beta.sessions.events.list(running.session_id, limit=1000)]
    assert types.count("session.status_running") == 2 and types[-1] == "session.status_idle"


def test_cancel_killed_between_its_commit_and_the_interrupt(sdk, model, celery_worker, api_key, tmp_path):
    # A real API server SIGKILLed after the cancel committed and before it interrupted the
    # session: the interrupt owed is committed with the cancel, and the sweep sends it, once.
    import anthropic

    from tests.files.server import GunicornServer

    model.script([tool_use("bash", {"command": "sleep 60"}), text("never requested")])
    _, dream = _dream(sdk)
    running = wait_for(lambda: (d := sdk.beta.dreams.retrieve(dream.id)).status == "running" and d, timeout=60)
    wait_for(lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(running.session_id)), 60)
    server = GunicornServer(log_path=tmp_path / "api.log", env={"MANGO_TEST_CRASH_POINT": "dreams.cancel.committed"})
    server.start()
    try:
        crashing = anthropic.Anthropic(base_url=server.url, api_key=str(api_key), max_retries=0, timeout=30)
        with pytest.raises(anthropic.APIConnectionError):
            crashing.beta.dreams.cancel(dream.id)
    finally:
        server.stop()

    def interrupts() -> int:
        events = sdk.beta.sessions.events.list(running.session_id, limit=1000)
        return sum(1 for e in events if e.type == "user.interrupt")

    row = Dream.objects.get(id=dream.id)
    assert row.status == "canceled" and row.interrupt_owed  # committed; the interrupt was not sent
    assert interrupts() == 0 and Session.objects.get(id=running.session_id).status == "running"
    sweep()
    sweep()  # nothing owed any more: no second interrupt
    assert not Dream.objects.get(id=dream.id).interrupt_owed
    wait_for(lambda: list(sdk.beta.sessions.events.list(running.session_id, limit=1000))[-1].type
             == "session.status_idle", timeout=60)  # fmt: skip
    assert interrupts() == 1
    after = sdk.beta.dreams.retrieve(dream.id)
    assert after.status == "canceled" and after.ended_at == row.ended_at and after.error is None
    assert len(model.requests) == 1  # the interrupted turn asked the model nothing more
    assert Session.objects.filter(metadata__dream_id=dream.id).count() == 1
