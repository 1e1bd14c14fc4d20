"""A real turn (the runner on a real worker, the scripted model) produces the status webhooks:
session.pending when the message reaches the idle session, session.status_run_started and
session.running when a worker begins the run, then session.status_idled with session.idled, each
verified by the SDK's unwrap and validated strictly against its data type, in the order of their
commits."""

import json

import pytest

from tests.webhooks.conftest import strict_event, wait_for
from webhooks.models import WebhookDelivery
from webhooks.services import endpoint_create

# What the turn sends, in the order of their commits, and the SDK's data class of each.
SENT = {
    "session.pending": "BetaWebhookSessionPendingEventData",
    "session.status_run_started": "BetaWebhookSessionStatusRunStartedEventData",
    "session.running": "BetaWebhookSessionRunningEventData",
    "session.status_idled": "BetaWebhookSessionStatusIdledEventData",
    "session.idled": "BetaWebhookSessionIdledEventData",
}
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_turn_sends_pending_run_started_running_then_idled(
    sdk, api_key, model, celery_worker, receiver, delivery_fleet, settings
):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    delivery_fleet()
    _, secret = endpoint_create(
        workspace=api_key.workspace,
        url=receiver.url,
        event_types=[*SENT, "session.requires_action"],
    )
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    environment = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}]
    )

    def types():
        return [json.loads(body)["data"]["type"] for _, body in receiver.received]

    wait_for(lambda: len(types()) >= 5, timeout=60)
    events = [sdk.beta.webhooks.unwrap(body, headers=headers, key=secret) for headers, body in receiver.received]
    assert {e.data.id for e in events} == {session.id}
    classes = {strict_event(body).data.type: type(strict_event(body).data).__name__ for _, body in receiver.received}
    assert classes == SENT
    # Each was written in the transaction of its change, in this order.
    written = WebhookDelivery.objects.order_by("created_at", "id").values_list("event_type", flat=True)
    assert list(written) == list(SENT)
    # The session's own log agrees: it ran and went idle at the end of its turn.
    log = [e.type for e in sdk.beta.sessions.events.list(session.id)]
    assert "session.status_running" in log and log[-1] == "session.status_idle"
