"""/v1/models (list, retrieve): the models this server knows — the price table's and the
operator's MANGO_MODEL_LIST_PRICES (sessions.pricing) — in the SDK's ModelInfo shape. Release
dates are not known here: `created_at` is the epoch, as the SDK allows; what is not known
(capabilities, line, token limits, retirement) is null."""

from datetime import UTC, datetime

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import query_int, query_list, rfc3339
from core.errors import InvalidRequest, NotFound
from sessions.pricing import known_models, model_display_name

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LIMIT_MAX = 1000
LIMIT_DEFAULT = 20
LIFECYCLES = ("active", "deprecated", "retired")


class ModelOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["model"])
    display_name = serializers.CharField()
    created_at = serializers.DateTimeField()
    lifecycle = serializers.ChoiceField(choices=LIFECYCLES)
    capabilities = serializers.DictField(allow_null=True)
    line = serializers.CharField(allow_null=True)
    max_input_tokens = serializers.IntegerField(allow_null=True)
    max_tokens = serializers.IntegerField(allow_null=True)
    deprecated_at = serializers.DateTimeField(allow_null=True)
    retires_at = serializers.DateTimeField(allow_null=True)


class ModelListOutputSerializer(serializers.Serializer):
    data = ModelOutputSerializer(many=True)
    has_more = serializers.BooleanField()
    first_id = serializers.CharField(allow_null=True)
    last_id = serializers.CharField(allow_null=True)


def model_to_wire(model: str) -> dict:
    return {
        "id": model,
        "type": "model",
        "display_name": model_display_name(model),
        "created_at": rfc3339(EPOCH),
        "lifecycle": "active",
        "capabilities": None,
        "line": None,
        "max_input_tokens": None,
        "max_tokens": None,
        "deprecated_at": None,
        "retires_at": None,
    }


class ModelListApi(APIView):
    """List the models this server knows (the SDK's `models.list`)."""

    @extend_schema(
        operation_id="models_list",
        parameters=[
            OpenApiParameter("limit", int, description=f"1 to {LIMIT_MAX}, default {LIMIT_DEFAULT}."),
            OpenApiParameter("after_id", str),
            OpenApiParameter("before_id", str),
            OpenApiParameter(
                "lifecycle[]",
                {"type": "array", "items": {"type": "string", "enum": list(LIFECYCLES)}},
                description="Only models in one of these stages (every model this server knows is active).",
            ),
        ],
        responses=ModelListOutputSerializer,
    )
    def get(self, request):
        limit = query_int(request, "limit", default=LIMIT_DEFAULT, minimum=1, maximum=LIMIT_MAX)
        models = known_models()
        stages = query_list(request, "lifecycle")
        for stage in stages:
            if stage not in LIFECYCLES:
                raise InvalidRequest(f"lifecycle: must be one of {', '.join(LIFECYCLES)}, got {stage[:40]!r}.")
        if stages and "active" not in stages:
            models = []  # every model this server knows is active
        after, before = request.query_params.get("after_id"), request.query_params.get("before_id")
        if before is not None:
            end = models.index(before) if before in models else 0
            page = models[max(0, end - limit) : end]
            has_more = end - limit > 0
        else:
            start = models.index(after) + 1 if after in models else (len(models) if after is not None else 0)
            page = models[start : start + limit]
            has_more = start + limit < len(models)
        return Response(
            {
                "data": [model_to_wire(model) for model in page],
                "has_more": has_more,
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            }
        )


class ModelDetailApi(APIView):
    """Retrieve one model this server knows (the SDK's `models.retrieve`)."""

    @extend_schema(operation_id="models_retrieve", responses=ModelOutputSerializer)
    def get(self, request, model_id: str):
        if model_id not in known_models():
            raise NotFound(f"Model {model_id[:255]!r} is not known to this server.")
        return Response(model_to_wire(model_id))
