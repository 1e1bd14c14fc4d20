"""Routes under /v1/mango/ (a prefix the hosted API does not use) for webhook endpoints."""

from django.urls import path

from webhooks import apis

urlpatterns = [
    path("mango/webhook_endpoints", apis.EndpointListCreateApi.as_view()),
    path("mango/webhook_endpoints/<str:endpoint_id>", apis.EndpointDetailApi.as_view()),
    path("mango/webhook_endpoints/<str:endpoint_id>/rotate_secret", apis.EndpointRotateApi.as_view()),
    path("mango/webhook_endpoints/<str:endpoint_id>/replay", apis.EndpointReplayApi.as_view()),
    path("mango/webhook_endpoints/<str:endpoint_id>/deliveries", apis.DeliveryListApi.as_view()),
    path("mango/webhook_endpoints/<str:endpoint_id>/deliveries/<str:delivery_id>", apis.DeliveryDetailApi.as_view()),
]
