"""/v1/mango/webhook_endpoints through the API, the operator's command, and the outbox written
in the transaction of the change it reports."""

import io
from datetime import UTC, datetime

import anthropic
import pytest
from django.core.management import call_command
from django.db import connection, transaction

from core import secrets
from sessions.models import Session
from sessions.services.events import events_append
from sessions.signals import session_changed
from tests.factories import make_session
from webhooks.delivery import signed_headers
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import webhook_event_emit

BASE = "/v1/mango/webhook_endpoints"
URL = "https://hooks.example.invalid/in"  # does not resolve: passes the create-time check


def _create(api, **body):
    return api.post(BASE, {"url": URL, **body}, content_type="application/json")


def test_endpoint_lifecycle_and_the_secret_shown_once(api, other_api_key, client):
    created = _create(api, event_types=["session.created", "session.deleted"], description="ci")
    assert created.status_code == 200, created.content
    body = created.json()
    secret = body["secret"]
    assert secret.startswith("whsec_") and body["event_types"] == ["session.created", "session.deleted"]
    endpoint_id = body["id"]

    # Encrypted at rest: the row holds no trace of it, and no later answer carries it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_webhookendpoint WHERE id = %s", [endpoint_id])
        (stored,) = cursor.fetchone()
    assert secret not in stored and secret[6:] not in stored
    listed = api.get(BASE)
    assert [row["id"] for row in listed.json()["data"]] == [endpoint_id]
    retrieved = api.get(f"{BASE}/{endpoint_id}")
    assert "secret" not in retrieved.json() and secret not in retrieved.content.decode()

    updated = api.post(f"{BASE}/{endpoint_id}", {"disabled": True, "event_types": []}, content_type="application/json")
    assert updated.json()["disabled_at"] is not None and updated.json()["event_types"] == []
    enabled = api.post(f"{BASE}/{endpoint_id}", {"disabled": False}, content_type="application/json")
    assert enabled.json()["disabled_at"] is None

    rotated = api.post(f"{BASE}/{endpoint_id}/rotate_secret", {"overlap_seconds": 60}, content_type="application/json")
    assert rotated.json()["secret"].startswith("whsec_") and rotated.json()["secret"] != secret
    assert rotated.json()["previous_secret_expires_at"] is not None

    # Another workspace sees the same not-found as for a missing id.
    foreign = client.get(f"{BASE}/{endpoint_id}", headers={"authorization": f"Bearer {other_api_key}"})
    assert foreign.status_code == 404
    assert api.get(f"{BASE}/whep_missing").status_code == 404

    deleted = api.delete(f"{BASE}/{endpoint_id}")
    assert deleted.json() == {"id": endpoint_id, "type": "webhook_endpoint_deleted"}
    assert api.get(f"{BASE}/{endpoint_id}").status_code == 404


def test_private_and_unknown_are_refused(api, settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    private = api.post(BASE, {"url": "http://127.0.0.1:9/hook"}, content_type="application/json")
    assert private.status_code == 400 and "private address" in private.json()["error"]["message"]
    link_local = api.post(BASE, {"url": "http://169.254.169.254/latest"}, content_type="application/json")
    assert link_local.status_code == 400
    assert _create(api, event_types=["session.nope"]).status_code == 400
    assert api.post(BASE, {"url": "ftp://x.example/"}, content_type="application/json").status_code == 400


def test_endpoints_per_workspace_are_capped(api, settings):
    settings.MANGO_WEBHOOK_ENDPOINTS_MAX = 2
    assert _create(api).status_code == 200 and _create(api).status_code == 200
    third = _create(api)
    assert third.status_code == 400 and "MANGO_WEBHOOK_ENDPOINTS_MAX" in third.json()["error"]["message"]


@pytest.mark.django_db
def test_command_prints_the_secret_last():
    out = io.StringIO()
    call_command("create_webhook_endpoint", "--workspace", "ops", "--url", URL, "--events", "session.idled", stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("whsec_")
    endpoint = WebhookEndpoint.objects.get(workspace__name="ops")
    assert endpoint.event_types == ["session.idled"] and last not in endpoint.secret


def test_the_outbox_row_commits_and_rolls_back_with_the_change(api, api_key):
    endpoint_id = _create(api, event_types=["session.archived"]).json()["id"]
    workspace_id = api_key.workspace.id

    def announce():
        session_changed.send(
            sender=Session, workspace_id=workspace_id, session_id="sesn_x", change="session.archived", payload={}
        )

    with pytest.raises(RuntimeError), transaction.atomic():
        announce()
        assert WebhookDelivery.objects.filter(endpoint_id=endpoint_id).count() == 1
        raise RuntimeError("the change fails")
    assert WebhookDelivery.objects.filter(endpoint_id=endpoint_id).count() == 0
    with transaction.atomic():
        announce()
        announce_other = session_changed.send  # a type the endpoint does not subscribe to
        announce_other(
            sender=Session, workspace_id=workspace_id, session_id="sesn_x", change="session.deleted", payload={}
        )
    assert list(WebhookDelivery.objects.filter(endpoint_id=endpoint_id).values_list("event_type", flat=True)) == [
        "session.archived"
    ]


def test_replay_one_delivery_or_a_time_range(api, api_key):
    endpoint_id = _create(api).json()["id"]
    for n in range(3):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id=f"sesn_{n}")
    WebhookDelivery.objects.filter(endpoint_id=endpoint_id).update(status="failed")
    one = WebhookDelivery.objects.filter(endpoint_id=endpoint_id).first()
    replayed = api.post(f"{BASE}/{endpoint_id}/replay", {"delivery_id": one.id}, content_type="application/json")
    assert replayed.json() == {"scheduled": 1}
    assert WebhookDelivery.objects.get(id=one.id).status == "pending"
    ranged = api.post(
        f"{BASE}/{endpoint_id}/replay", {"created_at_gte": "2000-01-01T00:00:00Z"}, content_type="application/json"
    )
    assert ranged.json() == {"scheduled": 3}
    log = api.get(f"{BASE}/{endpoint_id}/deliveries", {"status": "pending"}).json()
    assert len(log["data"]) == 3 and {row["id"] for row in log["data"]} >= {one.id}
    assert api.get(f"{BASE}/{endpoint_id}/deliveries/{one.id}").json()["attempt_log"] == []


def test_every_session_type_sent_is_the_sdks_own_shape(api, api_key):
    """The outbox bodies of a session's life, signed as a delivery is and unwrapped by the SDK
    (strict types: each data is the SDK's class of its type)."""
    secret = _create(api).json()["secret"]
    session = make_session(api_key.workspace)
    thread = {"session_thread_id": "sthr_child", "agent_name": "helper"}
    events_append(
        session_id=session.id,
        items=[
            {"type": "session.status_running", "payload": {}},
            {"type": "session.thread_created", "payload": {**thread, "workflow_run_id": None}},
            {"type": "session.thread_status_idle", "payload": {**thread, "stop_reason": {"type": "end_turn"}}},
            {"type": "session.thread_status_terminated", "payload": thread},
            {"type": "span.outcome_evaluation_end", "payload": {"outcome_id": "outc_x"}},
            {"type": "session.status_idle", "payload": {"stop_reason": {"type": "budget_reached"}}},
            {"type": "session.status_idle", "payload": {"stop_reason": {"type": "end_turn"}}},
            {"type": "session.status_terminated", "payload": {}},
        ],
    )
    client = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")
    seen = {}
    deliveries = WebhookDelivery.objects.filter(workspace=api_key.workspace, event_type__startswith="session.")
    for delivery in deliveries.order_by("created_at", "id"):
        headers = signed_headers(delivery_id=delivery.id, body=delivery.body, secrets=[secret], now=datetime.now(UTC))
        event = client.beta.webhooks.unwrap(delivery.body, headers=headers, key=secret)
        assert event.data.id == session.id and event.data.type == delivery.event_type
        seen[event.data.type] = type(event.data).__name__
        if "thread" in event.data.type:
            assert event.data.session_thread_id == "sthr_child"
    assert seen == {
        "session.created": "BetaWebhookSessionCreatedEventData",
        "session.running": "BetaWebhookSessionRunningEventData",
        "session.thread_created": "BetaWebhookSessionThreadCreatedEventData",
        "session.thread_idled": "BetaWebhookSessionThreadIdledEventData",
        "session.thread_terminated": "BetaWebhookSessionThreadTerminatedEventData",
        "session.outcome_evaluation_ended": "BetaWebhookSessionOutcomeEvaluationEndedEventData",
        "session.status_idled": "BetaWebhookSessionStatusIdledEventData",
        "session.budget_reached": "BetaWebhookSessionBudgetReachedEventData",
        "session.idled": "BetaWebhookSessionIdledEventData",
        "session.status_terminated": "BetaWebhookSessionStatusTerminatedEventData",
    }


def test_a_claim_leases_under_one_token_and_only_its_holder_records(api, api_key):
    from webhooks import wakeup
    from webhooks.models import WebhookAttempt
    from webhooks.services import Outcome, deliveries_claim, deliveries_record, deliveries_replay

    endpoint_id = _create(api).json()["id"]
    for n in range(3):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id=f"sesn_{n}")
    leases = deliveries_claim(limit=8, threads=8)
    assert len(leases) == 3 and len({lease.token for lease in leases}) == 1
    stored = WebhookDelivery.objects.get(id=leases[0].delivery_id)
    assert (leases[0].body, leases[0].endpoint_id, leases[0].attempts) == (stored.body, endpoint_id, 0)
    assert leases[0].url == stored.endpoint.url and leases[0].secrets == (secrets.decrypt(stored.endpoint.secret),)
    assert leases[0].secrets[0] not in repr(leases[0])  # a lease logged shows no signing secret
    assert deliveries_claim(limit=8, threads=8) == []  # all leased
    first, second, third = leases
    now = datetime.now(UTC)

    def record(*pairs):
        outcomes = [Outcome(lease=lease, started_at=now, latency_ms=5, status_code=code) for lease, code in pairs]
        return deliveries_record(outcomes=outcomes)

    assert record((first, 200)) == {first.delivery_id}
    done = WebhookDelivery.objects.get(id=first.delivery_id)
    assert (done.status, done.attempts, done.lease_token, done.delivered_at is not None) == ("succeeded", 1, "", True)
    deliveries_replay(workspace=api_key.workspace, endpoint_id=endpoint_id, delivery_id=second.delivery_id)
    # In one batch: recorded once (its lease is gone), replayed meanwhile (the late holder records
    # nothing), and a failure, rescheduled.
    assert record((first, 200), (second, 200), (third, 500)) == {third.delivery_id}
    retry = WebhookDelivery.objects.get(id=third.delivery_id)
    assert (retry.status, retry.attempts, retry.last_status_code, retry.last_error) == ("pending", 1, 500, "")
    assert retry.next_attempt_at > now and retry.lease_until is None
    assert sorted(WebhookAttempt.objects.values_list("delivery_id", "number", "status_code")) == sorted(
        [(first.delivery_id, 1, 200), (third.delivery_id, 1, 500)]
    )
    # The replayed one is due again, the failed one later: the next claim takes only the first.
    assert [lease.delivery_id for lease in deliveries_claim(limit=8, threads=8)] == [second.delivery_id]

    # A commit in a process whose delivery loop runs only sets the loop's flag (no task).
    wakeup.wanted.clear()
    assert not wakeup.wake_running_loop() and wakeup.wanted.is_set()
    with wakeup.loop:
        assert wakeup.wake_running_loop()
    wakeup.wanted.clear()
    # One in a process without a loop asks a loop that runs elsewhere (by Redis), which claims
    # again before it stops; with no loop anywhere its caller sends a task.
    assert not wakeup.wake_loop_elsewhere()
    looping = wakeup.Looping()
    assert wakeup.wake_loop_elsewhere()
    assert looping.stop()  # asked for meanwhile: it claims again
    assert not looping.stop() and not wakeup.wake_loop_elsewhere()
    assert looping.stop()  # the last ask (while nothing looped) is taken by the next loop's stop
