"""The admin: endpoints listed, disabled and enabled by action, no secret on any page; a
delivery's page shows its attempts."""

import pytest
from django.utils import timezone

from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from webhooks.services import endpoint_create, webhook_event_emit

pytestmark = pytest.mark.django_db


def test_endpoints_and_the_delivery_log_in_the_admin(admin_client, api_key):
    endpoint, secret = endpoint_create(workspace=api_key.workspace, url="https://hooks.example.invalid/in")
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.idled", object_id="sesn_admin")
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    WebhookAttempt.objects.create(
        delivery=delivery, number=1, started_at=timezone.now(), latency_ms=12, status_code=502,
        error="the endpoint answered 502", response_excerpt="bad gateway from the receiver",
    )  # fmt: skip

    listing = admin_client.get("/admin/webhooks/webhookendpoint/")
    assert listing.status_code == 200 and endpoint.id in listing.content.decode()
    page = admin_client.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert endpoint.url in page
    for html in (listing.content.decode(), page):
        assert secret not in html and endpoint.secret not in html

    disabled = admin_client.post(
        "/admin/webhooks/webhookendpoint/", {"action": "disable", "_selected_action": [endpoint.pk]}
    )
    assert disabled.status_code == 302
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).disabled_reason == "disabled in the admin"
    admin_client.post("/admin/webhooks/webhookendpoint/", {"action": "enable", "_selected_action": [endpoint.pk]})
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).disabled_at is None

    log = admin_client.get(f"/admin/webhooks/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert "bad gateway from the receiver" in log and "the endpoint answered 502" in log
    assert "sesn_admin" in log  # the body as sent
