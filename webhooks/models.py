"""Webhook endpoints of a workspace, and the outbox of deliveries to them.

A delivery row is written in the transaction of the change it reports (webhooks.services.
webhook_event_emit): its `id` is the Standard Webhooks `webhook-id`, the same on every attempt,
and its `body` is the exact bytes signed and sent each time. A worker claims due rows under a
lease (`lease_token`, `lease_until`): a worker killed mid-delivery leaves a lease that expires,
and the row is due again for another.
"""

from django.db import models
from django.db.models import Q

from core.ids import new_id
from core.models import Workspace


def _endpoint_id() -> str:
    return new_id("whep")


def _delivery_id() -> str:
    return new_id("msg")


def _attempt_id() -> str:
    return new_id("whatt")


class WebhookEndpoint(models.Model):
    """A URL that receives a workspace's events. `secret` and `previous_secret` are Fernet tokens
    (core/secrets.py) of `whsec_…` signing secrets; the previous one also signs until
    `previous_secret_expires_at` (the rotation's overlap window)."""

    id = models.CharField(primary_key=True, max_length=64, default=_endpoint_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2048)
    description = models.CharField(max_length=512, blank=True, default="")
    # The event types it receives; empty: every type.
    event_types = models.JSONField(default=list, blank=True)
    secret = models.TextField(editable=False)
    previous_secret = models.TextField(blank=True, default="", editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=512, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["workspace", "-id"], name="whep_ws_id_desc")]

    def __str__(self) -> str:
        return f"{self.url} ({self.id})"


class WebhookDelivery(models.Model):
    """One event for one endpoint: the outbox row, then its delivery log."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # retries exhausted, or the endpoint was deleted or disabled

    id = models.CharField(primary_key=True, max_length=64, default=_delivery_id, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_deliveries")
    # Indexed by whdl_endpoint_created, whose first column it is.
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False)
    event_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=128)
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    lease_token = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=512, blank=True, default="")
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # The claim's per-workspace take (workspaces served in turn).
            models.Index(
                fields=["workspace", "next_attempt_at"], name="whdl_workspace_due", condition=Q(status="pending")
            ),
            # The claim's count of each workspace's deliveries in flight (leased): only those rows.
            models.Index(
                fields=["workspace"], name="whdl_leased", condition=Q(status="pending", lease_until__isnull=False)
            ),
            models.Index(fields=["endpoint", "-created_at"], name="whdl_endpoint_created"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint_id} ({self.id})"


class WebhookAttempt(models.Model):
    """One attempt of a delivery: when, how long, what the receiver answered (bounded)."""

    id = models.CharField(primary_key=True, max_length=64, default=_attempt_id, editable=False)
    # Indexed by whatt_delivery_number, whose first column it is.
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=512, blank=True, default="")
    response_excerpt = models.TextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="whatt_delivery_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"
