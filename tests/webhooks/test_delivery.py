"""Deliveries to a real loopback receiver by a real worker and beat, verified with the SDK's
`client.beta.webhooks.unwrap`; the receiver down then up, a worker killed mid-delivery, a
private address refused, secret rotation, and one tenant's 50 failing endpoints against another's."""

import json
import secrets
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from core.services import api_key_create
from sessions.services.events import events_append
from tests.webhooks.conftest import wait_for
from webhooks.models import WebhookDelivery
from webhooks.services import endpoint_create, endpoint_delete, endpoint_secret_rotate, webhook_event_emit

MODEL = "claude-sonnet-4-5"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _loopback_allowed(settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]


def _unwrap(sdk, headers: dict, body: str, key: str):
    return sdk.beta.webhooks.unwrap(body, headers=headers, key=key)


def test_session_events_arrive_signed_and_the_sdk_verifies_them(sdk, api_key, receiver, delivery_fleet):
    delivery_fleet()
    endpoint, secret = endpoint_create(workspace=api_key.workspace, url=receiver.url)
    agent = sdk.beta.agents.create(name="a", model=MODEL)
    environment = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    events_append(
        session_id=session.id,
        items=[
            {"type": "session.status_idle", "payload": {"stop_reason": {"type": "requires_action", "event_ids": []}}}
        ],
    )
    sdk.beta.sessions.archive(session.id)
    sdk.beta.sessions.delete(session.id)
    wanted = {
        "session.created", "session.status_idled", "session.requires_action", "session.archived", "session.deleted",
        "session.status_terminated",  # archive terminates the session (issue 42)
    }  # fmt: skip
    wait_for(lambda: {json.loads(body)["data"]["type"] for _, body in receiver.received} >= wanted)

    # The agent's and the environment's own events (agent.created, environment.created) come too.
    sessions = [(h, b) for h, b in receiver.received if json.loads(b)["data"]["type"].startswith("session.")]
    for headers, body in sessions:
        event = _unwrap(sdk, headers, body, secret)
        assert event.type == "event" and event.data.id == session.id
        assert event.data.workspace_id == api_key.workspace.id
        assert type(event.data).__name__.startswith("BetaWebhookSession")  # the SDK's own data type
    headers, body = sessions[0]
    with pytest.raises(WebhookVerificationError, match="signature"):
        _unwrap(sdk, headers, body.replace(session.id, "sesn_forged"), secret)
    # A correctly signed delivery whose timestamp is 10 minutes old is refused too.
    old = datetime.now(UTC) - timedelta(minutes=10)
    stale = {**headers, "webhook-timestamp": str(int(old.timestamp()))}
    stale["webhook-signature"] = Webhook(secret).sign(headers["webhook-id"], old, body)
    with pytest.raises(WebhookVerificationError, match="too old"):
        _unwrap(sdk, stale, body, secret)
    # The delivery log, through the API (the worker records an attempt after the receiver answered).
    wait_for(lambda: not WebhookDelivery.objects.filter(endpoint=endpoint).exclude(status="succeeded").exists())
    log = sdk.get(f"/v1/mango/webhook_endpoints/{endpoint.id}/deliveries", cast_to=object)
    assert {row["status"] for row in log["data"]} == {"succeeded"}
    assert sorted(row["event_type"] for row in log["data"]) == sorted([*wanted, "agent.created", "environment.created"])
    one = sdk.get(f"/v1/mango/webhook_endpoints/{endpoint.id}/deliveries/{log['data'][0]['id']}", cast_to=object)
    assert one["attempt_log"][0]["status_code"] == 200 and one["attempt_log"][0]["response_excerpt"] == "ok"


def test_receiver_down_then_failing_then_up_loses_nothing_and_retries_keep_their_id(api_key, receiver, delivery_fleet):
    endpoint, secret = endpoint_create(workspace=api_key.workspace, url=receiver.url)
    receiver.stop()  # connection refused
    delivery_fleet()
    for n in range(5):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id=f"sesn_{n}")
    ids = set(WebhookDelivery.objects.filter(endpoint=endpoint).values_list("id", flat=True))
    assert len(ids) == 5
    wait_for(lambda: all(d.attempts >= 2 for d in WebhookDelivery.objects.filter(endpoint=endpoint)))
    receiver.status = 503  # up, but failing: the same ids come again
    receiver.start()
    wait_for(lambda: all(sum(h["webhook-id"] == i for h, _ in receiver.received) >= 2 for i in ids))
    receiver.status = 200
    wait_for(lambda: WebhookDelivery.objects.filter(endpoint=endpoint, status="succeeded").count() == 5)

    assert {h["webhook-id"] for h, _ in receiver.received} == ids
    for delivery_id in ids:
        bodies = {body for h, body in receiver.received if h["webhook-id"] == delivery_id}
        assert len(bodies) == 1  # every retry sends the same bytes
        Webhook(secret).verify(bodies.pop(), next(h for h, _ in receiver.received if h["webhook-id"] == delivery_id))
    delivery = WebhookDelivery.objects.filter(endpoint=endpoint).first()
    log = list(delivery.attempt_log.order_by("number"))
    assert len(log) >= 4 and log[-1].status_code == 200
    assert log[0].status_code is None and log[0].error  # refused while down
    assert any(a.status_code == 503 for a in log)


def test_a_worker_killed_mid_delivery_has_it_completed_by_another(api_key, receiver, delivery_fleet):
    endpoint, secret = endpoint_create(workspace=api_key.workspace, url=receiver.url)
    # The first worker dies (SIGKILL) after the receiver has the request, before it records it.
    fleet = delivery_fleet(MANGO_TEST_CRASH_POINT="webhooks.after_post")
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id="sesn_k")
    wait_for(lambda: fleet.worker.process.poll() is not None)
    assert len(receiver.received) == 1
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == "pending" and delivery.lease_token  # leased by the dead worker
    fleet.start_worker()
    wait_for(lambda: WebhookDelivery.objects.get(id=delivery.id).status == "succeeded")
    # At least once: the successor sent it again, under the same webhook-id.
    assert [h["webhook-id"] for h, _ in receiver.received] == [delivery.id, delivery.id]
    for headers, body in receiver.received:
        Webhook(secret).verify(body, headers)
    assert WebhookDelivery.objects.get(id=delivery.id).attempts == 1


def test_a_private_address_is_refused_at_delivery(api_key, receiver, delivery_fleet):
    endpoint, _ = endpoint_create(workspace=api_key.workspace, url=receiver.url)
    delivery_fleet(MANGO_OUTBOUND_PRIVATE_HOSTS="")  # the worker allows no private host
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id="sesn_p")
    wait_for(lambda: WebhookDelivery.objects.get(endpoint=endpoint).attempts >= 1)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == "pending" and "private address" in delivery.last_error
    assert receiver.received == []


def test_an_endpoint_url_and_its_token_stay_out_of_the_worker_log(api_key, receiver, delivery_fleet):
    """A receiver's URL may carry a token in its query: the worker sends it there and writes it
    to no log line (httpx2's per-request INFO line is off, core/logging.py)."""
    token = "tok_" + secrets.token_hex(12)
    endpoint, _ = endpoint_create(workspace=api_key.workspace, url=f"{receiver.url}?token={token}")
    fleet = delivery_fleet()
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id="sesn_log")
    wait_for(lambda: WebhookDelivery.objects.get(endpoint=endpoint).status == "succeeded")
    assert len(receiver.received) == 1
    log = fleet.worker.log_path.read_text()
    assert "webhooks.deliver_due" in log  # the worker's INFO lines are in it
    assert token not in log and "/hook?" not in log


def test_a_burst_of_commits_sends_a_task_only_while_no_loop_runs(api_key, receiver, delivery_fleet, monkeypatch):
    """30 events committed one by one over ~1.5 s while the worker's loop delivers (each delivery
    takes 0.3 s): the first commit sends a webhooks.deliver_due task, the others find the loop
    running in the worker (webhooks.wakeup) and send none; every event arrives, once."""
    from webhooks import services

    receiver.slow_markers, receiver.slow_seconds = ("slow",), 0.3
    endpoint, _ = endpoint_create(workspace=api_key.workspace, url=receiver.url + "?slow")
    delivery_fleet()
    sent, send = [], services.deliver_due_send

    def counted_send():
        sent.append(time.monotonic())
        send()

    monkeypatch.setattr(services, "deliver_due_send", counted_send)
    for n in range(30):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id=f"sesn_burst{n}")
        time.sleep(0.05)
    wait_for(lambda: WebhookDelivery.objects.filter(endpoint=endpoint, status="succeeded").count() == 30, timeout=30)
    ids = [headers["webhook-id"] for headers, _ in receiver.received]
    assert len(ids) == len(set(ids)) == 30
    assert 1 <= len(sent) <= 3, len(sent)


def test_rotation_both_secrets_sign_during_the_overlap_then_only_the_new(sdk, api_key, receiver, delivery_fleet):
    endpoint, old = endpoint_create(workspace=api_key.workspace, url=receiver.url)
    delivery_fleet()
    _, new = endpoint_secret_rotate(workspace=api_key.workspace, endpoint_id=endpoint.id, overlap_seconds=3600)
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id="sesn_r1")
    wait_for(lambda: len(receiver.received) == 1)
    headers, body = receiver.received[0]
    assert _unwrap(sdk, headers, body, old).data.id == "sesn_r1"
    assert _unwrap(sdk, headers, body, new).data.id == "sesn_r1"

    _, newest = endpoint_secret_rotate(workspace=api_key.workspace, endpoint_id=endpoint.id, overlap_seconds=0)
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id="sesn_r2")
    wait_for(lambda: len(receiver.received) == 2)
    headers, body = receiver.received[1]
    assert _unwrap(sdk, headers, body, newest).data.id == "sesn_r2"
    for stale in (old, new):
        with pytest.raises(WebhookVerificationError, match="signature"):
            _unwrap(sdk, headers, body, stale)


def _refusing_url() -> str:
    """A loopback port bound by nobody (bound, then closed): connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/hook"


def test_one_tenants_50_failing_endpoints_do_not_delay_another(api_key, receiver, delivery_fleet, settings):
    """Tenant A has 50 endpoints that fail: 17 hang past the worker's read timeout (2 s), 17
    answer 500, 16 refuse the connection, all retried every 0.5-2 s. A worker of one task slot
    with the default delivery threads and per-workspace cap delivers them; tenant B's events,
    each emitted right after one of A's (A's 50 rows are due before B's one), must each reach B's
    receiver within a second of their commit."""
    receiver.slow_markers, receiver.slow_seconds = ("hang",), 4.0
    receiver.status_markers = {"fail": 500}
    settings.MANGO_WEBHOOK_ENDPOINTS_MAX = 50
    other, _ = api_key_create(workspace_name="tenant-b")
    refusing = _refusing_url()
    kinds = [receiver.url + "?tenant=a&hang", receiver.url + "?tenant=a&fail", refusing]
    urls = [kinds[n % 3] for n in range(50)]
    a_endpoints = [endpoint_create(workspace=api_key.workspace, url=url)[0].id for url in urls]
    b_endpoint, _ = endpoint_create(workspace=other.workspace, url=receiver.url + "?tenant=b")
    delivery_fleet(1)
    cap = settings.MANGO_WEBHOOK_INFLIGHT_MAX
    for n in range(2):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id=f"sesn_a{n}")
    time.sleep(1.5)  # A's hanging deliveries hold their threads, the others are failing and retrying

    latencies, a_in_flight = [], []
    for n in range(8):
        webhook_event_emit(workspace_id=api_key.workspace.id, type="session.running", object_id=f"sesn_a{n + 2}")
        sent = time.monotonic()
        webhook_event_emit(workspace_id=other.workspace.id, type="session.running", object_id=f"sesn_b{n}")
        delivery = WebhookDelivery.objects.get(endpoint=b_endpoint, body__contains=f'"sesn_b{n}"')
        arrived = wait_for(lambda d=delivery: receiver.arrived.get(d.id), timeout=10)
        latencies.append(arrived - sent)
        a_in_flight.append(WebhookDelivery.objects.filter(workspace=api_key.workspace, lease_token__gt="").count())
        time.sleep(0.5)

    errors = list(WebhookDelivery.objects.filter(workspace=api_key.workspace).values_list("last_error", flat=True))
    endpoints_deleted = [endpoint_delete(workspace=api_key.workspace, endpoint_id=e) for e in a_endpoints]
    assert len(endpoints_deleted) == 50  # the worker's loop ends once A's deliveries are gone
    assert max(latencies) < 1.0, latencies
    assert max(a_in_flight) <= cap and max(a_in_flight) > 0
    # A's endpoints really failed in the three ways.
    assert any("Timeout" in e for e in errors), set(errors)
    assert any("answered 500" in e for e in errors), set(errors)
    assert any("ConnectError" in e for e in errors), set(errors)
