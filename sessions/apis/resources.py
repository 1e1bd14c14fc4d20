"""/v1/sessions/{id}/resources: add, list, retrieve, update (a repository's token), delete."""

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework.response import Response

from core.api import Paging
from core.apiview import AgentsApi
from core.errors import InvalidRequest
from core.serializers import validated
from sessions.selectors import session_get, session_memory_stores, session_resource_page
from sessions.serializers.resources import (
    RepositoryResourceParamSerializer,
    ResourceDeletedOutputSerializer,
    ResourceListOutputSerializer,
    ResourceParamSerializer,
    ResourceUpdateInputSerializer,
    memory_store_resource_to_wire,
    parse_resource_add,
    resource_output,
    resource_to_wire,
)
from sessions.services import repositories as repository_services
from sessions.services import resources as resource_services

ADD_REQUEST = PolymorphicProxySerializer(
    component_name="ResourceAddParam",
    serializers=[ResourceParamSerializer, RepositoryResourceParamSerializer],
    resource_type_field_name="type",
)

PAGES = Paging(maximum=1000, default=None)


class SessionResourcesApi(AgentsApi):
    @extend_schema(operation_id="sessions_resources_add", request=ADD_REQUEST, responses=resource_output())
    def post(self, request, session_id: str):
        param = parse_resource_add(request.data)
        if param["type"] == "github_repository":
            row = repository_services.repository_add(workspace=request.user, session_id=session_id, param=param)
        else:
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
    @extend_schema(operation_id="sessions_resources_retrieve", responses=resource_output())
    def get(self, request, session_id: str, resource_id: str):
        row = resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response(resource_to_wire(row))

    @extend_schema(
        operation_id="sessions_resources_update",
        description="Rotates a github_repository resource's authorization_token (file resources: a 400).",
        request=ResourceUpdateInputSerializer,
        responses=resource_output(),
    )
    def post(self, request, session_id: str, resource_id: str):
        row = resource_services.resource_get(workspace=request.user, session_id=session_id, resource_id=resource_id)
        if row.type != "github_repository":
            raise InvalidRequest("Only github_repository resources can be updated (authorization_token rotation).")
        data = validated(ResourceUpdateInputSerializer, request.data)
        row = repository_services.repository_token_rotate(row=row, token=data["authorization_token"])
        return Response(resource_to_wire(row))

    @extend_schema(operation_id="sessions_resources_delete", responses={200: ResourceDeletedOutputSerializer})
    def delete(self, request, session_id: str, resource_id: str):
        resource_services.resource_delete(workspace=request.user, session_id=session_id, resource_id=resource_id)
        return Response({"id": resource_id, "type": "session_resource_deleted"})
