"""Delivery over hours and days without waiting for them: the real claim and attempt code
(webhooks.tasks.deliver_due, in this process) against a real loopback receiver, with the default
backoff (MANGO_WEBHOOK_RETRY_BASE_SECONDS=5, max delay 3600 s, 3 days). Time is moved, not slept:
`advance(seconds)` moves every stored instant of the outbox (created_at, next_attempt_at, attempt
times, delivered_at) back by that much, which is what the worker sees when the clock moves
forward, since it compares timezone.now() with those instants only. A pass runs whenever the
earliest pending attempt is due, as beat's deliver_due would run within its poll interval."""

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from webhooks.services import webhook_event_emit
from webhooks.tasks import deliver_due

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

BASE = "/v1/mango/webhook_endpoints"


class Clock:
    """The simulated time elapsed since the test began, moved forward by advance()."""

    def __init__(self):
        self.elapsed = 0.0

    def advance(self, seconds: float) -> None:
        if seconds <= 0:
            return
        delta = timedelta(seconds=seconds)
        WebhookDelivery.objects.update(created_at=F("created_at") - delta, next_attempt_at=F("next_attempt_at") - delta)
        WebhookDelivery.objects.filter(delivered_at__isnull=False).update(delivered_at=F("delivered_at") - delta)
        WebhookAttempt.objects.update(started_at=F("started_at") - delta)
        WebhookEndpoint.objects.filter(disabled_at__isnull=False).update(disabled_at=F("disabled_at") - delta)
        self.elapsed += seconds

    def to_next_attempt(self) -> None:
        due = WebhookDelivery.objects.filter(status="pending").order_by("next_attempt_at").first()
        if due is not None:
            self.advance((due.next_attempt_at - timezone.now()).total_seconds() + 0.01)


@pytest.fixture
def loopback(settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    settings.MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS = 1.0
    settings.MANGO_WEBHOOK_TIMEOUT_SECONDS = 2.0


def _endpoint(api, url: str) -> str:
    return api.post(BASE, {"url": url}, content_type="application/json").json()["id"]


def test_a_two_minute_outage_loses_nothing_and_retries_share_their_id(api, api_key, receiver, loopback):
    endpoint_id = _endpoint(api, receiver.url)
    receiver.stop()  # down from t=0 to t=120 s (connections refused)
    events = 20
    for n in range(events):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id=f"sesn_{n}")
    clock, restarted = Clock(), False
    while WebhookDelivery.objects.filter(status="pending").exists():
        deliver_due()
        if not restarted:
            due = WebhookDelivery.objects.filter(status="pending").order_by("next_attempt_at").first()
            if clock.elapsed + (due.next_attempt_at - timezone.now()).total_seconds() >= 120:
                clock.advance(120 - clock.elapsed)  # the outage ends at t=120 s
                receiver.start()
                restarted = True
        clock.to_next_attempt()
        assert clock.elapsed < 3600, "not delivered within an hour of simulated time"

    deliveries = list(WebhookDelivery.objects.filter(endpoint_id=endpoint_id))
    assert len(deliveries) == events and {d.status for d in deliveries} == {"succeeded"}
    # Every event arrived once (a 2xx ends a delivery), under the id it had on every attempt.
    received = [headers["webhook-id"] for headers, _ in receiver.received]
    assert sorted(received) == sorted(d.id for d in deliveries)
    for delivery in deliveries:
        attempts = list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number"))
        # Failures at 0, 5, 15, 35, 75 s (base 5 s doubling), the first success at 155 s (each
        # pass's own real seconds add to the simulated ones: within 3 s).
        offsets = [(a.started_at - delivery.created_at).total_seconds() for a in attempts]
        assert all(abs(o - e) <= 3 for o, e in zip(offsets, [0, 5, 15, 35, 75, 155], strict=True)), offsets
        assert [a.status_code for a in attempts] == [None] * 5 + [200]
        assert all(a.error for a in attempts[:5])
    print(f"outage: receiver down 120 s of simulated time; {events} events delivered at ~155 s")


def test_an_endpoint_failing_for_three_days_is_disabled_saying_why(api, api_key, receiver, loopback):
    receiver.status = 500
    failing = _endpoint(api, receiver.url)
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id="sesn_1")
    clock = Clock()
    while WebhookDelivery.objects.filter(status="pending").exists():
        deliver_due()
        clock.to_next_attempt()
        assert clock.elapsed < 5 * 86400
    (delivery,) = WebhookDelivery.objects.filter(endpoint_id=failing)
    assert delivery.status == "failed" and delivery.last_status_code == 500
    assert 3 * 86400 <= clock.elapsed < 3 * 86400 + 3600 + 60, clock.elapsed
    # Backoff doubles from 5 s to the hour, then hourly: 10 doublings and ~70 hourly attempts.
    assert 75 <= delivery.attempts <= 90, delivery.attempts
    endpoint = api.get(f"{BASE}/{failing}").json()
    assert endpoint["disabled_at"] is not None and "every delivery failed for 72 h" in endpoint["disabled_reason"]
    # Disabled: the workspace's next events write nothing for it.
    assert webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id="sesn_2") == 0


def test_a_failing_endpoint_with_a_success_in_the_window_stays_enabled(api, api_key, receiver, loopback):
    """The 3 days are counted from the last success: one 2xx on day 2 keeps the endpoint enabled
    when an older delivery gives up on day 3."""
    endpoint_id = _endpoint(api, receiver.url)
    receiver.status = 500
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id="sesn_old")
    clock, answered = Clock(), False
    while WebhookDelivery.objects.filter(status="pending").exists():
        deliver_due()  # the old event's attempt: its next one is an hour away
        if not answered and clock.elapsed >= 2 * 86400:
            receiver.status = 200  # one pass answers: only the new event is due in it
            webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id="sesn_new")
            deliver_due()
            receiver.status, answered = 500, True
        clock.to_next_attempt()
    statuses = dict(WebhookDelivery.objects.filter(endpoint_id=endpoint_id).values_list("event_id", "status"))
    assert sorted(statuses.values()) == ["failed", "succeeded"]
    assert WebhookEndpoint.objects.get(id=endpoint_id).disabled_at is None
