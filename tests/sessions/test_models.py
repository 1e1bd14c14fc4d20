"""/v1/models through the official SDK (strict response validation): the models this server
knows — the price table's and the operator's MANGO_MODEL_LIST_PRICES — listed, paged and
retrieved in the SDK's ModelInfo shape; an unknown model is a 404."""

import anthropic
import pytest

from sessions.pricing import LIST_PRICES

pytestmark = pytest.mark.django_db(transaction=True)


def test_models_list_and_retrieve(sdk, settings):
    settings.MANGO_MODEL_LIST_PRICES = '{"claude-haiku-5-5": [1, 1.25, 2, 0.1, 5]}'
    listed = [model.id for model in sdk.models.list(limit=5)]  # every page, five at a time
    assert listed == ["claude-haiku-5-5", *LIST_PRICES]
    assert [model.id for model in sdk.beta.models.list()] == listed
    first = sdk.models.list(limit=3)
    assert [m.id for m in first.data] == listed[:3] and first.has_more and first.last_id == listed[2]
    second = sdk.models.list(limit=3, after_id=first.last_id)
    assert [m.id for m in second.data] == listed[3:6] and second.first_id == listed[3]
    assert [m.id for m in sdk.models.list(limit=2, before_id=listed[3]).data] == listed[1:3]

    model = sdk.models.retrieve("claude-sonnet-4-5-20250929")
    assert (model.id, model.type, model.display_name, model.lifecycle) == (
        "claude-sonnet-4-5-20250929",
        "model",
        "Claude Sonnet 4.5 (20250929)",
        "active",
    )
    assert model.created_at.year == 1970 and model.capabilities is None  # release date not known here
    assert sdk.beta.models.retrieve("claude-haiku-5-5").display_name == "Claude Haiku 5.5"
    with pytest.raises(anthropic.NotFoundError, match="not known to this server"):
        sdk.models.retrieve("claude-unknown-1")


def test_models_list_filters_by_lifecycle(sdk):
    # No silent drop: the filter is acted on (every model this server knows is active).
    everything = [model.id for model in sdk.beta.models.list()]
    assert [model.id for model in sdk.beta.models.list(lifecycle=["active", "retired"])] == everything
    assert list(sdk.beta.models.list(lifecycle=["deprecated", "retired"])) == []
    with pytest.raises(anthropic.BadRequestError, match="lifecycle: must be one of"):
        sdk.get("/v1/models", cast_to=object, options={"params": {"lifecycle[]": "ancient"}})
