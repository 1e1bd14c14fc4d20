"""Webhook endpoints (enable/disable; secrets are never fields) and the delivery log."""

from django.contrib import admin

from core.adminkit import ReadOnlyInline, ReadOnlyModelAdmin
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from webhooks.services import endpoints_set_disabled


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyModelAdmin):
    """Endpoints are created through the API or `manage.py create_webhook_endpoint` (the secret
    is shown once there); here they are seen, disabled, enabled and deleted."""

    list_display = ("id", "url", "workspace", "event_types", "disabled_at", "disabled_reason", "created_at")
    list_filter = ("workspace",)
    search_fields = ("id", "url")
    readonly_fields = (
        "id", "workspace", "url", "description", "event_types", "previous_secret_expires_at", "disabled_at",
        "disabled_reason", "created_at", "updated_at",
    )  # fmt: skip
    actions = ["disable", "enable"]

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    @admin.action(description="Disable the selected endpoints")
    def disable(self, request, queryset):
        endpoints_set_disabled(
            endpoint_ids=list(queryset.values_list("id", flat=True)), disabled=True, reason="disabled in the admin"
        )

    @admin.action(description="Enable the selected endpoints")
    def enable(self, request, queryset):
        endpoints_set_disabled(endpoint_ids=list(queryset.values_list("id", flat=True)), disabled=False)


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ("number", "started_at", "latency_ms", "status_code", "error", "response_excerpt")
    readonly_fields = fields


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "event_type", "endpoint", "workspace", "status", "attempts", "last_status_code", "created_at")
    list_filter = ("status", "workspace")
    search_fields = ("id", "event_id")
    readonly_fields = (
        "id", "workspace", "endpoint", "event_id", "event_type", "body", "status", "attempts", "next_attempt_at",
        "last_status_code", "last_error", "created_at", "delivered_at",
    )  # fmt: skip
    exclude = ("lease_token", "lease_until")
    inlines = [WebhookAttemptInline]
