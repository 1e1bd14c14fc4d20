"""/v1/dreams: the SDK's client.beta.dreams (create, retrieve, list, archive, cancel), behind the
`dreaming-2026-04-21` beta (required in strict mode, as every beta is)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool, query_list, query_time_range
from core.apiview import BetaApi
from core.errors import InvalidRequest
from core.schema import time_range_parameters
from dreams import services, tasks
from dreams.models import Dream
from dreams.selectors import dream_get, dream_list, dream_usages
from dreams.serializers import (
    DreamCreateInputSerializer,
    DreamListOutputSerializer,
    DreamOutputSerializer,
    dream_to_wire,
    parse_dream_create,
)

PAGES = Paging(maximum=100, default=20)


def _wire(dream: Dream) -> dict:
    return dream_to_wire(dream, usage=dream_usages([dream])[dream.id])


class DreamsApi(BetaApi):
    betas = ("MANGO_DREAMS_BETA",)


class DreamListCreateApi(DreamsApi):
    @extend_schema(operation_id="dreams_create", request=DreamCreateInputSerializer, responses=DreamOutputSerializer)
    def post(self, request):
        params = parse_dream_create(request.data)
        dream = services.dream_create(
            workspace=request.user, params=params, api_key_id=getattr(request.auth, "id", None)
        )
        tasks.start.delay(dream.id)
        return Response(_wire(dream))

    @extend_schema(
        operation_id="dreams_list",
        parameters=[
            *PAGES.parameters(),
            OpenApiParameter("include_archived", bool),
            OpenApiParameter("statuses", str, many=True, enum=[choice for choice, _ in Dream.Status.choices]),
            *time_range_parameters(),
        ],
        responses=DreamListOutputSerializer,
    )
    def get(self, request):
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in Dream.Status.values:
                raise InvalidRequest(f"statuses: {status[:40]!r} is not a dream status.")
        rows, next_page = dream_list(
            workspace=request.user,
            **PAGES.read(request),
            created=query_time_range(request, "created_at"),
            include_archived=query_bool(request, "include_archived"),
            statuses=statuses,
        )
        usages = dream_usages(rows)
        return Response({"data": [dream_to_wire(row, usage=usages[row.id]) for row in rows], "next_page": next_page})


class DreamDetailApi(DreamsApi):
    @extend_schema(operation_id="dreams_retrieve", responses=DreamOutputSerializer)
    def get(self, request, dream_id: str):
        return Response(_wire(dream_get(workspace=request.user, dream_id=dream_id)))


class DreamArchiveApi(DreamsApi):
    @extend_schema(operation_id="dreams_archive", request=None, responses=DreamOutputSerializer)
    def post(self, request, dream_id: str):
        return Response(_wire(services.dream_archive(workspace=request.user, dream_id=dream_id)))


class DreamCancelApi(DreamsApi):
    @extend_schema(operation_id="dreams_cancel", request=None, responses=DreamOutputSerializer)
    def post(self, request, dream_id: str):
        return Response(_wire(services.dream_cancel(workspace=request.user, dream_id=dream_id)))
