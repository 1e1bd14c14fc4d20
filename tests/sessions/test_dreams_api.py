"""client.beta.dreams through the official SDK, strictly validating every response: create's
400s naming the field, the 409 of a second update_existing dream on one store, the pending
shape, cancel and archive rules, list (newest first, filters, pages), workspace isolation.
No worker runs these dreams' start (they stay pending unless canceled): their tasks go to a queue
no worker reads (no_turns), even when an earlier test of the run started the run-wide worker."""

import anthropic
import pytest

from dreams.models import Dream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_turns")]


@pytest.fixture
def inputs(sdk):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    env = sdk.beta.environments.create(name="self", config={"type": "self_hosted"})
    sessions = [sdk.beta.sessions.create(agent=agent.id, environment_id=env.id) for _ in range(3)]
    store = sdk.beta.memory_stores.create(name="notes")
    return store, [s.id for s in sessions]


def _inputs(store_id: str, session_ids: list[str]) -> list[dict]:
    return [{"type": "memory_store", "memory_store_id": store_id}, {"type": "sessions", "session_ids": session_ids}]


def _refused(sdk, **body) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.dreams.create(**body)
    return caught.value.body["error"]["message"]


def test_create_refuses_what_cannot_be_acted_on(sdk, inputs):
    store, ids = inputs
    ok = {"inputs": _inputs(store.id, ids[:1]), "model": "claude-sonnet-4-5"}
    assert _refused(sdk, **{**ok, "inputs": ok["inputs"][:1]}).startswith("inputs: must hold exactly one sessions")
    assert _refused(sdk, **{**ok, "inputs": ok["inputs"][1:]}).startswith("inputs: must hold exactly one memory_store")
    two = [*ok["inputs"], {"type": "memory_store", "memory_store_id": store.id}]
    assert _refused(sdk, **{**ok, "inputs": two}).startswith("inputs[2]: inputs must hold exactly one memory_store")
    assert _refused(sdk, **{**ok, "inputs": _inputs(store.id, [])}).startswith("inputs[1].session_ids: must be")
    many = [f"sesn_{n}" for n in range(101)]
    assert _refused(sdk, **{**ok, "inputs": _inputs(store.id, many)}).startswith("inputs[1].session_ids: must be")
    twice = _inputs(store.id, [ids[0], ids[0]])
    assert _refused(sdk, **{**ok, "inputs": twice}) == "inputs[1].session_ids: must not repeat a session id."
    unknown = _refused(sdk, **{**ok, "inputs": _inputs(store.id, [ids[0], "sesn_nope"])})
    assert unknown == "inputs: session 'sesn_nope' not found."
    assert _refused(sdk, **{**ok, "inputs": _inputs("memstore_nope", ids)}) == (
        "inputs: memory store 'memstore_nope' not found."
    )
    bad_type = [{"type": "files", "file_ids": []}, *ok["inputs"]]
    assert _refused(sdk, **{**ok, "inputs": bad_type}).startswith("inputs[0].type:")
    assert _refused(sdk, **{**ok, "model": {"id": "claude-sonnet-4-5", "speed": "fast"}}).startswith("model.speed:")
    assert _refused(sdk, **{**ok, "model": ""}).startswith("model: must be a model id")
    assert _refused(sdk, **{**ok, "instructions": ""}).startswith("instructions: must be a string of 1 to 4096")
    assert _refused(sdk, **{**ok, "instructions": "x" * 4097}).startswith("instructions:")
    other = sdk.beta.memory_stores.create(name="other")
    behavior = {"type": "update_existing", "memory_store_id": other.id}
    assert _refused(sdk, **ok, output_behavior=behavior).startswith("output_behavior.memory_store_id:")
    assert _refused(sdk, **ok, output_behavior={"type": "merge"}).startswith("output_behavior.type:")
    assert _refused(sdk, **ok, extra_body={"priority": "high"}) == "priority: is not a field of a dream."
    sdk.beta.memory_stores.archive(other.id)
    archived = _refused(sdk, **{**ok, "inputs": _inputs(other.id, ids)})
    assert archived == f"inputs: memory store {other.id!r} is archived."
    assert Dream.objects.count() == 0


def test_pending_shape_cancel_archive_list_and_isolation(sdk, inputs, live_server, other_api_key):
    store, ids = inputs
    first = sdk.beta.dreams.create(
        inputs=_inputs(store.id, [ids[2], ids[0], ids[1]]),
        model="claude-sonnet-4-5",
        instructions="Keep it short.",
    )
    assert first.id.startswith("drm_") and first.type == "dream" and first.status == "pending"
    assert first.inputs[1].session_ids == sorted(ids) and first.inputs[0].memory_store_id == store.id
    assert first.model.id == "claude-sonnet-4-5" and first.model.speed == "standard"
    assert first.output_behavior.type == "create_new" and first.outputs == [] and first.session_id is None
    assert first.instructions == "Keep it short." and first.error is None and first.ended_at is None
    assert first.usage.input_tokens == first.usage.output_tokens == 0 and first.archived_at is None

    update = {"type": "update_existing", "memory_store_id": store.id}
    second = sdk.beta.dreams.create(
        inputs=_inputs(store.id, ids[:1]), model={"id": "claude-sonnet-4-5"}, output_behavior=update
    )
    assert second.output_behavior.type == "update_existing" and second.output_behavior.memory_store_id == store.id
    assert second.outputs == []  # pending: empty, as the SDK says
    with pytest.raises(anthropic.ConflictError):
        sdk.beta.dreams.create(inputs=_inputs(store.id, ids[:1]), model="claude-sonnet-4-5", output_behavior=update)

    with pytest.raises(anthropic.BadRequestError, match="cancel it before archiving"):
        sdk.beta.dreams.archive(second.id)
    canceled = sdk.beta.dreams.cancel(second.id)
    assert canceled.status == "canceled" and canceled.ended_at is not None
    assert sdk.beta.dreams.cancel(second.id).ended_at == canceled.ended_at  # unchanged
    archived = sdk.beta.dreams.archive(second.id)
    assert archived.archived_at is not None and sdk.beta.dreams.archive(second.id).archived_at == archived.archived_at
    assert sdk.beta.dreams.retrieve(second.id).archived_at == archived.archived_at
    # Its store is free again for update_existing.
    third = sdk.beta.dreams.create(inputs=_inputs(store.id, ids[:1]), model="claude-sonnet-4-5", output_behavior=update)

    assert [d.id for d in sdk.beta.dreams.list()] == [third.id, first.id]
    assert [d.id for d in sdk.beta.dreams.list(include_archived=True)] == [third.id, second.id, first.id]
    assert [d.id for d in sdk.beta.dreams.list(include_archived=True, statuses=["canceled"])] == [second.id]
    assert [d.id for d in sdk.beta.dreams.list(statuses=["pending", "completed"])] == [third.id, first.id]
    page = sdk.beta.dreams.list(limit=1, include_archived=True)
    assert len(page.data) == 1 and page.next_page
    assert [d.id for d in page] == [third.id, second.id, first.id]  # the SDK follows next_page
    assert [d.id for d in sdk.beta.dreams.list(created_at_gt=first.created_at)] == [third.id]
    with pytest.raises(anthropic.BadRequestError, match="statuses"):
        sdk.beta.dreams.list(statuses=["sleeping"])

    Dream.objects.filter(id=first.id).update(status="completed")
    with pytest.raises(anthropic.BadRequestError, match="is completed and cannot be canceled"):
        sdk.beta.dreams.cancel(first.id)

    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    for call in (other.beta.dreams.retrieve, other.beta.dreams.cancel, other.beta.dreams.archive):
        with pytest.raises(anthropic.NotFoundError):
            call(first.id)
    assert list(other.beta.dreams.list()) == []
    with pytest.raises(anthropic.BadRequestError, match="not found"):  # the foreign store and sessions
        other.beta.dreams.create(inputs=_inputs(store.id, ids[:1]), model="claude-sonnet-4-5")


def test_a_workspace_has_at_most_its_limit_of_dreams_at_work(sdk, inputs, settings):
    """Each dream runs a session: past MANGO_WORKSPACE_MAX_DREAMS pending or running at once, one
    more is a 429 naming the setting, and nothing is stored; one that ends makes room."""
    settings.MANGO_WORKSPACE_MAX_DREAMS = 2
    store, ids = inputs
    first, _ = (sdk.beta.dreams.create(inputs=_inputs(store.id, ids), model="claude-sonnet-4-5") for _ in range(2))
    with pytest.raises(anthropic.RateLimitError, match="MANGO_WORKSPACE_MAX_DREAMS"):
        sdk.beta.dreams.create(inputs=_inputs(store.id, ids), model="claude-sonnet-4-5")
    assert Dream.objects.count() == 2
    sdk.beta.dreams.cancel(first.id)
    assert sdk.beta.dreams.create(inputs=_inputs(store.id, ids), model="claude-sonnet-4-5").status == "pending"


def test_a_dream_is_budget_priced_at_create(sdk, inputs, settings):
    # Its budget is MANGO_DREAM_MAX_LIST_COST_CENTS at create; a model with no list price cannot
    # be held to it (a 400 naming model), unless the operator turned dream budgets off (0).
    store, ids = inputs
    body = {"inputs": _inputs(store.id, ids[:1]), "model": "claude-unpriced-1"}
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.dreams.create(**body)
    assert caught.value.body["error"]["message"].startswith("model: 'claude-unpriced-1' has no public list price")
    assert caught.value.body["error"]["details"]["error_code"] == "model_not_budgetable"
    settings.MANGO_DREAM_MAX_LIST_COST_CENTS = 250
    priced = sdk.beta.dreams.create(**{**body, "model": "claude-sonnet-4-5"})
    assert Dream.objects.get(id=priced.id).max_list_cost_cents == 250
    settings.MANGO_DREAM_MAX_LIST_COST_CENTS = 0
    sdk.beta.dreams.cancel(priced.id)
    unbounded = sdk.beta.dreams.create(**body)
    assert Dream.objects.get(id=unbounded.id).max_list_cost_cents is None
