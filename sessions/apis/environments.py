"""/v1/environments: create, list, retrieve, update, delete, archive."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool
from core.apiview import BetaApi
from sessions.selectors import environment_get, environment_list
from sessions.serializers.environments import (
    EnvironmentCreateInputSerializer,
    EnvironmentDeletedOutputSerializer,
    EnvironmentListOutputSerializer,
    EnvironmentOutputSerializer,
    EnvironmentUpdateInputSerializer,
    environment_to_wire,
    parse_environment_changes,
    parse_environment_create,
)
from sessions.services import environments as environment_services

PAGES = Paging(maximum=1000, default=20)


class EnvironmentListCreateApi(BetaApi):
    @extend_schema(
        operation_id="environments_create",
        request=EnvironmentCreateInputSerializer,
        responses=EnvironmentOutputSerializer,
    )
    def post(self, request):
        environment = environment_services.environment_create(
            workspace=request.user, **parse_environment_create(request.data)
        )
        return Response(environment_to_wire(environment))

    @extend_schema(
        operation_id="environments_list",
        parameters=[*PAGES.parameters(), OpenApiParameter("include_archived", bool)],
        responses=EnvironmentListOutputSerializer,
    )
    def get(self, request):
        rows, next_page = environment_list(
            workspace=request.user,
            **PAGES.read(request),
            include_archived=query_bool(request, "include_archived"),
        )
        return Response({"data": [environment_to_wire(row) for row in rows], "next_page": next_page})


class EnvironmentDetailApi(BetaApi):
    @extend_schema(operation_id="environments_retrieve", responses=EnvironmentOutputSerializer)
    def get(self, request, environment_id: str):
        return Response(environment_to_wire(environment_get(workspace=request.user, environment_id=environment_id)))

    @extend_schema(
        operation_id="environments_update",
        request=EnvironmentUpdateInputSerializer,
        responses=EnvironmentOutputSerializer,
    )
    def post(self, request, environment_id: str):
        environment = environment_services.environment_update(
            workspace=request.user, environment_id=environment_id, changes=parse_environment_changes(request.data)
        )
        return Response(environment_to_wire(environment))

    @extend_schema(operation_id="environments_delete", responses={200: EnvironmentDeletedOutputSerializer})
    def delete(self, request, environment_id: str):
        environment_services.environment_delete(workspace=request.user, environment_id=environment_id)
        return Response({"id": environment_id, "type": "environment_deleted"})


class EnvironmentArchiveApi(BetaApi):
    @extend_schema(operation_id="environments_archive", request=None, responses=EnvironmentOutputSerializer)
    def post(self, request, environment_id: str):
        environment = environment_services.environment_archive(workspace=request.user, environment_id=environment_id)
        return Response(environment_to_wire(environment))
