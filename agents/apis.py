"""/v1/agents: create, list, retrieve, update, archive, versions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from agents import services as agent_services
from agents.selectors import (
    agent_get,
    agent_list,
    agent_version_get,
    agent_version_list,
    environment_get,
    environment_list,
)
from agents.serializers import (
    AgentCreateInputSerializer,
    AgentListOutputSerializer,
    AgentOutputSerializer,
    AgentUpdateInputSerializer,
    EnvironmentCreateInputSerializer,
    EnvironmentDeletedOutputSerializer,
    EnvironmentListOutputSerializer,
    EnvironmentOutputSerializer,
    EnvironmentUpdateInputSerializer,
    agent_to_wire,
    environment_to_wire,
    parse_agent_fields,
    parse_environment_changes,
    parse_environment_create,
)
from core.api import Paging, query_bool, query_int, query_time_range
from core.apiview import AgentsApi
from core.schema import time_range_parameters

PAGES = Paging(maximum=100, default=20)


class AgentListCreateApi(AgentsApi):
    @extend_schema(operation_id="agents_create", request=AgentCreateInputSerializer, responses=AgentOutputSerializer)
    def post(self, request):
        fields, _ = parse_agent_fields(request.data, partial=False)
        agent, version = agent_services.agent_create(workspace=request.user, fields=fields)
        return Response(agent_to_wire(agent, version))

    @extend_schema(
        operation_id="agents_list",
        parameters=[
            *PAGES.parameters(),
            OpenApiParameter("include_archived", bool),
            *time_range_parameters(),
        ],
        responses=AgentListOutputSerializer,
    )
    def get(self, request):
        rows, next_page = agent_list(
            workspace=request.user,
            **PAGES.read(request),
            include_archived=query_bool(request, "include_archived"),
            created=query_time_range(request, "created_at"),
        )
        return Response({"data": [agent_to_wire(a, v) for a, v in rows], "next_page": next_page})


class AgentDetailApi(AgentsApi):
    @extend_schema(
        operation_id="agents_retrieve",
        parameters=[OpenApiParameter("version", int, description="A past version; default the latest.")],
        responses=AgentOutputSerializer,
    )
    def get(self, request, agent_id: str):
        agent = agent_get(workspace=request.user, agent_id=agent_id)
        version = agent_version_get(agent=agent, version=query_int(request, "version", minimum=1))
        return Response(agent_to_wire(agent, version))

    @extend_schema(operation_id="agents_update", request=AgentUpdateInputSerializer, responses=AgentOutputSerializer)
    def post(self, request, agent_id: str):
        fields, expected = parse_agent_fields(request.data, partial=True)
        agent, version = agent_services.agent_update(
            workspace=request.user, agent_id=agent_id, fields=fields, expected_version=expected
        )
        return Response(agent_to_wire(agent, version))


class AgentArchiveApi(AgentsApi):
    @extend_schema(operation_id="agents_archive", request=None, responses=AgentOutputSerializer)
    def post(self, request, agent_id: str):
        agent, version = agent_services.agent_archive(workspace=request.user, agent_id=agent_id)
        return Response(agent_to_wire(agent, version))


class AgentVersionsApi(AgentsApi):
    @extend_schema(
        operation_id="agents_versions_list",
        parameters=PAGES.parameters(),
        responses=AgentListOutputSerializer,
    )
    def get(self, request, agent_id: str):
        agent = agent_get(workspace=request.user, agent_id=agent_id)
        rows, next_page = agent_version_list(
            agent=agent,
            **PAGES.read(request),
        )
        return Response({"data": [agent_to_wire(agent, row) for row in rows], "next_page": next_page})


PAGES = Paging(maximum=1000, default=20)


class EnvironmentListCreateApi(AgentsApi):
    @extend_schema(
        operation_id="environments_create",
        request=EnvironmentCreateInputSerializer,
        responses=EnvironmentOutputSerializer,
    )
    def post(self, request):
        environment = agent_services.environment_create(
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


class EnvironmentDetailApi(AgentsApi):
    @extend_schema(operation_id="environments_retrieve", responses=EnvironmentOutputSerializer)
    def get(self, request, environment_id: str):
        return Response(environment_to_wire(environment_get(workspace=request.user, environment_id=environment_id)))

    @extend_schema(
        operation_id="environments_update",
        request=EnvironmentUpdateInputSerializer,
        responses=EnvironmentOutputSerializer,
    )
    def post(self, request, environment_id: str):
        environment = agent_services.environment_update(
            workspace=request.user, environment_id=environment_id, changes=parse_environment_changes(request.data)
        )
        return Response(environment_to_wire(environment))

    @extend_schema(operation_id="environments_delete", responses={200: EnvironmentDeletedOutputSerializer})
    def delete(self, request, environment_id: str):
        agent_services.environment_delete(workspace=request.user, environment_id=environment_id)
        return Response({"id": environment_id, "type": "environment_deleted"})


class EnvironmentArchiveApi(AgentsApi):
    @extend_schema(operation_id="environments_archive", request=None, responses=EnvironmentOutputSerializer)
    def post(self, request, environment_id: str):
        environment = agent_services.environment_archive(workspace=request.user, environment_id=environment_id)
        return Response(environment_to_wire(environment))
