"""A real turn (the runner on a real worker, the scripted model) produces the status webhooks:
session.running, then session.status_idled with session.idled, each verified by the SDK."""

import json

import pytest

from tests.webhooks.conftest import wait_for
from webhooks.services import endpoint_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_turn_sends_running_then_idled(sdk, api_key, model, celery_worker, receiver, delivery_fleet, settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    delivery_fleet()
    _, secret = endpoint_create(
        workspace=api_key.workspace,
        url=receiver.url,
        event_types=["session.running", "session.status_idled", "session.idled", "session.requires_action"],
    )
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    environment = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}]
    )

    def types():
        return [json.loads(body)["data"]["type"] for _, body in receiver.received]

    wait_for(lambda: len(types()) >= 3, timeout=60)
    events = [sdk.beta.webhooks.unwrap(body, headers=headers, key=secret) for headers, body in receiver.received]
    assert {e.data.id for e in events} == {session.id}
    assert sorted(e.data.type for e in events) == ["session.idled", "session.running", "session.status_idled"]
    # The session's own log agrees: it ran and went idle at the end of its turn.
    log = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    assert "session.status_running" in log and log[-1] == "session.status_idle"
