"""Webhook endpoints and deliveries: input serializers and Mango's own wire shapes (the hosted
API has no webhook-endpoint API; these live under /v1/mango/). A signing secret is rendered
only in the answer that creates it (create, rotate_secret)."""

from rest_framework import serializers

from core.api import rfc3339
from core.serializers import Array, Bool, InputSerializer, Int, Text, deleted_output, page_output
from webhooks.events import TYPES

URL_MAX_CHARS = 2048
DESCRIPTION_MAX_CHARS = 512
_TYPES = sorted(TYPES)


class EndpointCreateInputSerializer(InputSerializer):
    url = Text(max_length=URL_MAX_CHARS)
    event_types = Array(child=serializers.ChoiceField(choices=_TYPES), required=False, max_length=len(_TYPES))
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_blank=True)


class EndpointUpdateInputSerializer(InputSerializer):
    url = Text(max_length=URL_MAX_CHARS, required=False)
    event_types = Array(child=serializers.ChoiceField(choices=_TYPES), required=False, max_length=len(_TYPES))
    description = Text(max_length=DESCRIPTION_MAX_CHARS, required=False, allow_blank=True)
    disabled = Bool(required=False)


class RotateInputSerializer(InputSerializer):
    overlap_seconds = Int(required=False, min_value=0, max_value=7 * 86400)


class ReplayInputSerializer(InputSerializer):
    delivery_id = Text(max_length=64, required=False)
    created_at_gte = serializers.DateTimeField(required=False)
    created_at_lt = serializers.DateTimeField(required=False)


class EndpointOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["webhook_endpoint"])
    url = serializers.CharField()
    description = serializers.CharField()
    event_types = serializers.ListField(child=serializers.CharField())
    disabled_at = serializers.CharField(allow_null=True)
    disabled_reason = serializers.CharField(allow_null=True)
    previous_secret_expires_at = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    updated_at = serializers.CharField()


class EndpointWithSecretOutputSerializer(EndpointOutputSerializer):
    secret = serializers.CharField(help_text="The whsec_ signing secret: shown only in this answer.")


class AttemptOutputSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.CharField()
    latency_ms = serializers.IntegerField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    response_excerpt = serializers.CharField()


class DeliveryOutputSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The webhook-id header, the same on every attempt.")
    type = serializers.ChoiceField(choices=["webhook_delivery"])
    endpoint_id = serializers.CharField()
    event_id = serializers.CharField()
    event_type = serializers.CharField()
    status = serializers.ChoiceField(choices=["pending", "succeeded", "failed"])
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.CharField(allow_null=True)
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    delivered_at = serializers.CharField(allow_null=True)


class DeliveryDetailOutputSerializer(DeliveryOutputSerializer):
    attempt_log = AttemptOutputSerializer(many=True)


EndpointListOutputSerializer = page_output("WebhookEndpointList", EndpointOutputSerializer)
DeliveryListOutputSerializer = page_output("WebhookDeliveryList", DeliveryOutputSerializer)
EndpointDeletedOutputSerializer = deleted_output("WebhookEndpointDeleted", type="webhook_endpoint_deleted")


class ReplayOutputSerializer(serializers.Serializer):
    scheduled = serializers.IntegerField()


def endpoint_to_wire(endpoint, *, secret: str | None = None) -> dict:
    wire = {
        "id": endpoint.id,
        "type": "webhook_endpoint",
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": list(endpoint.event_types),
        "disabled_at": rfc3339(endpoint.disabled_at),
        "disabled_reason": endpoint.disabled_reason or None,
        "previous_secret_expires_at": rfc3339(endpoint.previous_secret_expires_at),
        "created_at": rfc3339(endpoint.created_at),
        "updated_at": rfc3339(endpoint.updated_at),
    }
    if secret is not None:
        wire["secret"] = secret
    return wire


def delivery_to_wire(delivery, *, attempts=None) -> dict:
    wire = {
        "id": delivery.id,
        "type": "webhook_delivery",
        "endpoint_id": delivery.endpoint_id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": rfc3339(delivery.next_attempt_at) if delivery.status == "pending" else None,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error or None,
        "created_at": rfc3339(delivery.created_at),
        "delivered_at": rfc3339(delivery.delivered_at),
    }
    if attempts is not None:
        wire["attempt_log"] = [
            {
                "number": a.number,
                "started_at": rfc3339(a.started_at),
                "latency_ms": a.latency_ms,
                "status_code": a.status_code,
                "error": a.error or None,
                "response_excerpt": a.response_excerpt,
            }
            for a in attempts
        ]
    return wire
