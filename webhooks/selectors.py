"""Reads, scoped to the caller's workspace: a foreign id is the same not-found as a missing one."""

from core.errors import NotFound
from core.pagination import keyset_page
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint


def endpoint_get(*, workspace, endpoint_id: str, for_update: bool = False) -> WebhookEndpoint:
    rows = WebhookEndpoint.objects.filter(workspace=workspace, id=endpoint_id)
    if for_update:
        rows = rows.select_for_update()
    endpoint = rows.first()
    if endpoint is None:
        raise NotFound(f"No webhook endpoint {endpoint_id!r}.")
    return endpoint


def endpoint_list(*, workspace, limit: int, page: str | None) -> tuple[list[WebhookEndpoint], str | None]:
    rows, next_page, _ = keyset_page(
        WebhookEndpoint.objects.filter(workspace=workspace),
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="webhook_endpoints",
    )
    return rows, next_page


def delivery_list(
    *, workspace, endpoint_id: str, limit: int, page: str | None, status: str | None = None
) -> tuple[list[WebhookDelivery], str | None]:
    endpoint_get(workspace=workspace, endpoint_id=endpoint_id)
    rows = WebhookDelivery.objects.filter(workspace=workspace, endpoint_id=endpoint_id).defer("body")
    if status:
        rows = rows.filter(status=status)
    rows, next_page, _ = keyset_page(
        rows, key="id", descending=True, limit=limit, page=page, purpose="webhook_deliveries"
    )
    return rows, next_page


def delivery_get(*, workspace, endpoint_id: str, delivery_id: str) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.filter(workspace=workspace, endpoint_id=endpoint_id, id=delivery_id).first()
    if delivery is None:
        raise NotFound(f"No webhook delivery {delivery_id!r}.")
    return delivery


def delivery_attempts(*, delivery: WebhookDelivery) -> list[WebhookAttempt]:
    return list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number")[:100])
