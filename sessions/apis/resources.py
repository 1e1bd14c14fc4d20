"""/v1/sessions/{id}/resources: add, list, retrieve, update (refused), delete."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from core.api import Paging
from core.errors import InvalidRequest
from core.serializers import validated
from sessions.apis.base import AgentsApi
from sessions.selectors import session_get, session_resource_page
from sessions.selectors.memory import session_memory_stores
from sessions.serializers.sessions import (
    ResourceDeletedOutputSerializer,
    ResourceListOutputSerializer,
    ResourceOutputSerializer,
    ResourceParamSerializer,
    memory_store_resource_to_wire,
    resource_to_wire,
)
from sessions.services import resources as resource_services

PAGES = Paging(maximum=1000, default=None)


class SessionResourcesApi(AgentsApi):
    @extend_schema(
        operation_id="sessions_resources_add", request=ResourceParamSerializer, responses=ResourceOutputSerializer
    )
    def post(self, request, session_id: str):
        param = validated(ResourceParamSerializer, request.data)
        row = resource_services.resource_add(workspace=request.user, session_id=session_id, param=param)
        return Response(resource_to_wire(row))

    @extend_schema(
        operation_id="sessions_resources_list",
        parameters=PAGES.parameters(),
        responses=ResourceListOutputSerializer,
    )
    def get(self, request, session_id: str):
        session = session_get(workspace=request.user, session_id=session_id)
        # No limit: every resource (api-contract.md §5).
        rows, next_page = session_resource_page(
            session=session,
            **PAGES.read(request),
        )
        data = [resource_to_wire(row) for row in rows]
        if next_page is None:  # memory stores (at most 8, without ids) close the last page
            data += [memory_store_resource_to_wire(row) for row in session_memory_stores(session=session)]
        return Response({"data": data, "next_page": next_page})


class SessionResourceDetailApi(AgentsApi):
    @extend_schema(operation_id="sessions_resources_retrieve", responses=ResourceOutputSerializer)
    def get(self, request, session_id: str, resource_id: str):
        row = resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response(resource_to_wire(row))

    @extend_schema(
        operation_id="sessions_resources_update",
        description="File resources cannot be updated: always a 400 (404 for an unknown resource).",
        request=OpenApiTypes.OBJECT,
        responses={400: OpenApiResponse(description="Always: file resources cannot be updated.")},
    )
    def post(self, request, session_id: str, resource_id: str):
        resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        raise InvalidRequest("Only github_repository resources can be updated (authorization_token rotation).")

    @extend_schema(operation_id="sessions_resources_delete", responses={200: ResourceDeletedOutputSerializer})
    def delete(self, request, session_id: str, resource_id: str):
        resource_services.resource_delete(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response({"id": resource_id, "type": "session_resource_deleted"})
