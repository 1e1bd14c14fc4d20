"""/v1/deployments and /v1/deployment_runs: the SDK's client.beta.deployments (create, retrieve,
update, list, archive, pause, unpause, run) and client.beta.deployment_runs (retrieve, list)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool, query_time_range
from core.apiview import AgentsApi
from core.errors import InvalidRequest
from core.schema import time_range_parameters
from core.serializers import validated
from deployments import services
from deployments.runs import deployment_run_now
from deployments.schedule import UPCOMING, occurrences_after
from deployments.selectors import deployment_get, deployment_list, run_get, run_list
from deployments.serializers import (
    DeploymentCreateInputSerializer,
    DeploymentListOutputSerializer,
    DeploymentOutputSerializer,
    DeploymentRunListOutputSerializer,
    DeploymentRunOutputSerializer,
    DeploymentUpdateInputSerializer,
    deployment_to_wire,
    run_to_wire,
)

PAGES = Paging(maximum=100, default=20)
RUN_PAGES = Paging(maximum=1000, default=20)


def _wire(deployment) -> dict:
    upcoming = []
    if deployment.schedule_expression and deployment.archived_at is None:
        upcoming = occurrences_after(
            expression=deployment.schedule_expression,
            timezone=deployment.schedule_timezone,
            after=timezone.now(),
            count=UPCOMING,
        )
    return deployment_to_wire(deployment, upcoming=upcoming)


class DeploymentListCreateApi(AgentsApi):
    @extend_schema(
        operation_id="deployments_create", request=DeploymentCreateInputSerializer, responses=DeploymentOutputSerializer
    )
    def post(self, request):
        data = validated(DeploymentCreateInputSerializer, request.data)
        return Response(_wire(services.deployment_create(workspace=request.user, data=data)))

    @extend_schema(
        operation_id="deployments_list",
        parameters=[
            *PAGES.parameters(),
            OpenApiParameter("agent_id", str),
            OpenApiParameter("include_archived", bool),
            OpenApiParameter("status", str, enum=["active", "paused"]),
            *time_range_parameters(),
        ],
        responses=DeploymentListOutputSerializer,
    )
    def get(self, request):
        status = request.query_params.get("status") or None
        if status not in (None, "active", "paused"):
            raise InvalidRequest("status: must be active or paused.")
        rows, next_page = deployment_list(
            workspace=request.user,
            **PAGES.read(request),
            agent_id=request.query_params.get("agent_id") or None,
            created=query_time_range(request, "created_at"),
            include_archived=query_bool(request, "include_archived"),
            status=status,
        )
        return Response({"data": [_wire(row) for row in rows], "next_page": next_page})


class DeploymentDetailApi(AgentsApi):
    @extend_schema(operation_id="deployments_retrieve", responses=DeploymentOutputSerializer)
    def get(self, request, deployment_id: str):
        return Response(_wire(deployment_get(workspace=request.user, deployment_id=deployment_id)))

    @extend_schema(
        operation_id="deployments_update", request=DeploymentUpdateInputSerializer, responses=DeploymentOutputSerializer
    )
    def post(self, request, deployment_id: str):
        data = validated(DeploymentUpdateInputSerializer, request.data)
        # Only the keys sent (a null clears what may be cleared).
        data = {key: value for key, value in data.items() if key in (request.data or {})}
        for key in ("agent", "environment_id", "name", "initial_events"):
            if key in data and data[key] is None:
                raise InvalidRequest(f"{key}: cannot be cleared.")
        deployment = services.deployment_update(workspace=request.user, deployment_id=deployment_id, data=data)
        return Response(_wire(deployment))


def _action(operation: str, service):
    class ActionApi(AgentsApi):
        @extend_schema(operation_id=f"deployments_{operation}", request=None, responses=DeploymentOutputSerializer)
        def post(self, request, deployment_id: str):
            return Response(_wire(service(workspace=request.user, deployment_id=deployment_id)))

    ActionApi.__name__ = ActionApi.__qualname__ = f"Deployment{operation.title()}Api"
    return ActionApi


DeploymentArchiveApi = _action("archive", services.deployment_archive)
DeploymentPauseApi = _action("pause", services.deployment_pause)
DeploymentUnpauseApi = _action("unpause", services.deployment_unpause)


class DeploymentRunNowApi(AgentsApi):
    @extend_schema(operation_id="deployments_run", request=None, responses=DeploymentRunOutputSerializer)
    def post(self, request, deployment_id: str):
        return Response(run_to_wire(deployment_run_now(workspace=request.user, deployment_id=deployment_id)))


class DeploymentRunListApi(AgentsApi):
    @extend_schema(
        operation_id="deployment_runs_list",
        parameters=[
            *RUN_PAGES.parameters(),
            OpenApiParameter("deployment_id", str),
            OpenApiParameter("has_error", bool),
            OpenApiParameter("trigger_type", str, enum=["schedule", "manual"]),
            *time_range_parameters(),
        ],
        responses=DeploymentRunListOutputSerializer,
    )
    def get(self, request):
        trigger = request.query_params.get("trigger_type") or None
        if trigger not in (None, "schedule", "manual"):
            raise InvalidRequest("trigger_type: must be schedule or manual.")
        has_error = query_bool(request, "has_error") if "has_error" in request.query_params else None
        rows, next_page = run_list(
            workspace=request.user,
            **RUN_PAGES.read(request),
            deployment_id=request.query_params.get("deployment_id") or None,
            created=query_time_range(request, "created_at"),
            has_error=has_error,
            trigger_type=trigger,
        )
        return Response({"data": [run_to_wire(row) for row in rows], "next_page": next_page})


class DeploymentRunDetailApi(AgentsApi):
    @extend_schema(operation_id="deployment_runs_retrieve", responses=DeploymentRunOutputSerializer)
    def get(self, request, deployment_run_id: str):
        return Response(run_to_wire(run_get(workspace=request.user, run_id=deployment_run_id)))
