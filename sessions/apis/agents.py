"""/v1/agents: create, list, retrieve, update, archive, versions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool, query_int, query_time_range
from core.apiview import BetaApi
from core.schema import time_range_parameters
from sessions.selectors import agent_get, agent_list, agent_version_get, agent_version_list
from sessions.serializers.agents import (
    AgentCreateInputSerializer,
    AgentListOutputSerializer,
    AgentOutputSerializer,
    AgentUpdateInputSerializer,
    agent_to_wire,
    parse_agent_fields,
)
from sessions.services import agents as agent_services

PAGES = Paging(maximum=100, default=20)


class AgentListCreateApi(BetaApi):
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


class AgentDetailApi(BetaApi):
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


class AgentArchiveApi(BetaApi):
    @extend_schema(operation_id="agents_archive", request=None, responses=AgentOutputSerializer)
    def post(self, request, agent_id: str):
        agent, version = agent_services.agent_archive(workspace=request.user, agent_id=agent_id)
        return Response(agent_to_wire(agent, version))


class AgentVersionsApi(BetaApi):
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
