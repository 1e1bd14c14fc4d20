"""/v1/mango/webhook_endpoints: Mango's own API for a workspace's webhook endpoints and their
delivery log (the hosted API manages endpoints in its console only)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging
from core.apiview import BetaApi
from core.serializers import validated
from webhooks import services
from webhooks.selectors import delivery_attempts, delivery_get, delivery_list, endpoint_get, endpoint_list
from webhooks.serializers import (
    DeliveryDetailOutputSerializer,
    DeliveryListOutputSerializer,
    EndpointCreateInputSerializer,
    EndpointDeletedOutputSerializer,
    EndpointListOutputSerializer,
    EndpointOutputSerializer,
    EndpointUpdateInputSerializer,
    EndpointWithSecretOutputSerializer,
    ReplayInputSerializer,
    ReplayOutputSerializer,
    RotateInputSerializer,
    delivery_to_wire,
    endpoint_to_wire,
)

PAGES = Paging(maximum=100, default=20)
_STATUS = OpenApiParameter("status", str, enum=["pending", "succeeded", "failed"])


class WebhooksApi(BetaApi):
    """Base: Mango's own routes ask for no beta header."""

    betas = ()


class EndpointListCreateApi(WebhooksApi):
    @extend_schema(
        operation_id="webhook_endpoints_create",
        request=EndpointCreateInputSerializer,
        responses=EndpointWithSecretOutputSerializer,
    )
    def post(self, request):
        data = validated(EndpointCreateInputSerializer, request.data)
        endpoint, secret = services.endpoint_create(workspace=request.user, **data)
        return Response(endpoint_to_wire(endpoint, secret=secret))

    @extend_schema(
        operation_id="webhook_endpoints_list", parameters=PAGES.parameters(), responses=EndpointListOutputSerializer
    )
    def get(self, request):
        rows, next_page = endpoint_list(workspace=request.user, **PAGES.read(request))
        return Response({"data": [endpoint_to_wire(row) for row in rows], "next_page": next_page})


class EndpointDetailApi(WebhooksApi):
    @extend_schema(operation_id="webhook_endpoints_retrieve", responses=EndpointOutputSerializer)
    def get(self, request, endpoint_id: str):
        return Response(endpoint_to_wire(endpoint_get(workspace=request.user, endpoint_id=endpoint_id)))

    @extend_schema(
        operation_id="webhook_endpoints_update",
        request=EndpointUpdateInputSerializer,
        responses=EndpointOutputSerializer,
    )
    def post(self, request, endpoint_id: str):
        changes = validated(EndpointUpdateInputSerializer, request.data)
        endpoint = services.endpoint_update(workspace=request.user, endpoint_id=endpoint_id, changes=changes)
        return Response(endpoint_to_wire(endpoint))

    @extend_schema(operation_id="webhook_endpoints_delete", responses={200: EndpointDeletedOutputSerializer})
    def delete(self, request, endpoint_id: str):
        services.endpoint_delete(workspace=request.user, endpoint_id=endpoint_id)
        return Response({"id": endpoint_id, "type": "webhook_endpoint_deleted"})


class EndpointRotateApi(WebhooksApi):
    @extend_schema(
        operation_id="webhook_endpoints_rotate_secret",
        request=RotateInputSerializer,
        responses=EndpointWithSecretOutputSerializer,
    )
    def post(self, request, endpoint_id: str):
        data = validated(RotateInputSerializer, request.data)
        endpoint, secret = services.endpoint_secret_rotate(workspace=request.user, endpoint_id=endpoint_id, **data)
        return Response(endpoint_to_wire(endpoint, secret=secret))


class EndpointReplayApi(WebhooksApi):
    @extend_schema(
        operation_id="webhook_endpoints_replay", request=ReplayInputSerializer, responses=ReplayOutputSerializer
    )
    def post(self, request, endpoint_id: str):
        data = validated(ReplayInputSerializer, request.data)
        count = services.deliveries_replay(workspace=request.user, endpoint_id=endpoint_id, **data)
        return Response({"scheduled": count})


class DeliveryListApi(WebhooksApi):
    @extend_schema(
        operation_id="webhook_deliveries_list",
        parameters=[*PAGES.parameters(), _STATUS],
        responses=DeliveryListOutputSerializer,
    )
    def get(self, request, endpoint_id: str):
        rows, next_page = delivery_list(
            workspace=request.user,
            endpoint_id=endpoint_id,
            status=request.query_params.get("status"),
            **PAGES.read(request),
        )
        return Response({"data": [delivery_to_wire(row) for row in rows], "next_page": next_page})


class DeliveryDetailApi(WebhooksApi):
    @extend_schema(operation_id="webhook_deliveries_retrieve", responses=DeliveryDetailOutputSerializer)
    def get(self, request, endpoint_id: str, delivery_id: str):
        delivery = delivery_get(workspace=request.user, endpoint_id=endpoint_id, delivery_id=delivery_id)
        return Response(delivery_to_wire(delivery, attempts=delivery_attempts(delivery=delivery)))
