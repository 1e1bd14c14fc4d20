"""/v1/sessions: create, list, retrieve, update, delete, archive."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool, query_int, query_list, query_time_range
from core.apiview import AgentsApi, query_order
from core.errors import InvalidRequest
from core.schema import time_range_parameters
from sessions.selectors import (
    session_family_usage,
    session_get,
    session_list,
    session_memory_stores_by_session,
    session_outcome_evaluations,
    session_parts,
    session_resources_by_session,
)
from sessions.serializers.resources import memory_store_resource_to_wire, resource_to_wire
from sessions.serializers.sessions import (
    SESSION_STATUSES,
    SessionCreateInputSerializer,
    SessionDeletedOutputSerializer,
    SessionListOutputSerializer,
    SessionOutputSerializer,
    SessionUpdateInputSerializer,
    parse_session_changes,
    parse_session_create,
    session_to_wire,
)
from sessions.services import sessions as session_services

PAGES = Paging(maximum=1000, default=20)


def sessions_wire(sessions: list) -> list[dict]:
    """Sessions as the API renders them, with their resources and outcome evaluations: one
    statement says which sessions have any, then one query per part that some have."""
    parts = session_parts(session_ids=[session.id for session in sessions])
    resources = session_resources_by_session(session_ids=[s.id for s in sessions if s.id in parts.resources])
    memory_stores = session_memory_stores_by_session(
        session_ids=[s.id for s in sessions if s.id in parts.memory_stores]
    )
    evaluations = session_outcome_evaluations(session_ids=[s.id for s in sessions if s.id in parts.outcomes])
    return [
        session_to_wire(
            session,
            resources=[resource_to_wire(row) for row in resources.get(session.id, ())]
            + [memory_store_resource_to_wire(row) for row in memory_stores.get(session.id, ())],
            outcome_evaluations=evaluations.get(session.id, []),
            # A multiagent session's usage and active time are its threads' together (no query
            # for any other session).
            family=session_family_usage(session=session),
        )
        for session in sessions
    ]


def session_wire(session) -> dict:
    return sessions_wire([session])[0]


class SessionListCreateApi(AgentsApi):
    @extend_schema(
        operation_id="sessions_create", request=SessionCreateInputSerializer, responses=SessionOutputSerializer
    )
    def post(self, request):
        session = session_services.session_create(workspace=request.user, **parse_session_create(request.data))
        return Response(session_wire(session))

    @extend_schema(
        operation_id="sessions_list",
        parameters=[
            *PAGES.parameters(),
            OpenApiParameter("order", str, enum=["asc", "desc"], description="By creation; default desc."),
            OpenApiParameter("include_archived", bool),
            OpenApiParameter("statuses[]", str, many=True, enum=list(SESSION_STATUSES)),
            OpenApiParameter("agent_id", str),
            OpenApiParameter("agent_version", int, description="Only with agent_id."),
            OpenApiParameter("deployment_id", str, description="Sessions a run of this deployment created."),
            OpenApiParameter("memory_store_id", str, description="Sessions the memory store is attached to."),
            *time_range_parameters(),
        ],
        responses=SessionListOutputSerializer,
    )
    def get(self, request):
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in SESSION_STATUSES:
                raise InvalidRequest(f"statuses: {status[:40]!r} is not one of {', '.join(SESSION_STATUSES)}.")
        rows, next_page, prev_page = session_list(
            workspace=request.user,
            **PAGES.read(request),
            order=query_order(request, "desc"),
            include_archived=query_bool(request, "include_archived"),
            statuses=statuses,
            agent_id=request.query_params.get("agent_id") or None,
            agent_version=query_int(request, "agent_version", minimum=1),
            memory_store_id=request.query_params.get("memory_store_id") or None,
            created=query_time_range(request, "created_at"),
            deployment_id=request.query_params.get("deployment_id") or None,
        )
        return Response({"data": sessions_wire(rows), "next_page": next_page, "prev_page": prev_page})


class SessionDetailApi(AgentsApi):
    @extend_schema(operation_id="sessions_retrieve", responses=SessionOutputSerializer)
    def get(self, request, session_id: str):
        return Response(session_wire(session_get(workspace=request.user, session_id=session_id)))

    @extend_schema(
        operation_id="sessions_update", request=SessionUpdateInputSerializer, responses=SessionOutputSerializer
    )
    def post(self, request, session_id: str):
        session = session_services.session_update(
            workspace=request.user, session_id=session_id, changes=parse_session_changes(request.data)
        )
        return Response(session_wire(session))

    @extend_schema(operation_id="sessions_delete", responses={200: SessionDeletedOutputSerializer})
    def delete(self, request, session_id: str):
        session_services.session_delete(workspace=request.user, session_id=session_id)
        return Response({"id": session_id, "type": "session_deleted"})


class SessionArchiveApi(AgentsApi):
    @extend_schema(operation_id="sessions_archive", request=None, responses=SessionOutputSerializer)
    def post(self, request, session_id: str):
        session = session_services.session_archive(workspace=request.user, session_id=session_id)
        return Response(session_wire(session))
