"""/v1/memory_stores, their memories and memory versions: the 14 SDK methods."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from core.api import Paging, query_bool, query_datetime, query_int
from core.apiview import BetaApi
from core.errors import InvalidRequest
from memory import services as memory_services
from memory.selectors import (
    memory_get,
    memory_list,
    memory_store_get,
    memory_store_list,
    memory_version_get,
    memory_version_list,
)
from memory.serializers import (
    OPERATIONS,
    VIEWS,
    MemoryCreateInputSerializer,
    MemoryDeletedOutputSerializer,
    MemoryListOutputSerializer,
    MemoryOutputSerializer,
    MemoryStoreCreateInputSerializer,
    MemoryStoreDeletedOutputSerializer,
    MemoryStoreListOutputSerializer,
    MemoryStoreOutputSerializer,
    MemoryStoreUpdateInputSerializer,
    MemoryUpdateInputSerializer,
    MemoryVersionListOutputSerializer,
    MemoryVersionOutputSerializer,
    memory_prefix_to_wire,
    memory_store_to_wire,
    memory_to_wire,
    memory_version_to_wire,
    parse_memory_create,
    parse_memory_store_changes,
    parse_memory_store_create,
    parse_memory_update,
)
from processors.memory import PATH_MAX_SEGMENTS, MemoryRefused, check_path_prefix

PAGES = Paging(maximum=100, default=20)
FULL_VIEW_MAX_LIMIT = 20
ID_MAX_CHARS = 128
_VIEW = OpenApiParameter("view", str, enum=list(VIEWS))
_CREATED = [OpenApiParameter("created_at[gte]", str), OpenApiParameter("created_at[lte]", str)]


class MemoryApi(BetaApi):
    """In strict mode a request must send the memory beta or the managed-agents beta (either
    one, as the SDK's docstrings say)."""

    betas = ("MANGO_MEMORY_BETA", "MANGO_AGENTS_BETA")


def _view(request, default: str) -> str:
    view = request.query_params.get("view") or default
    if view not in VIEWS:
        raise InvalidRequest(f"view: must be one of {', '.join(VIEWS)}.")
    return view


def _page(request, view: str) -> dict:
    """`limit` and `page`; with view=full a page holds at most 20 items."""
    paging = PAGES.read(request)
    if view == "full":
        paging["limit"] = min(paging["limit"], FULL_VIEW_MAX_LIMIT)
    return paging


def _actor(request) -> dict:
    """Who wrote a version: the API key, or the session whose self-hosted worker wrote it with its
    work item's token (the SDK's EnvironmentWorker syncs the session's memory stores)."""
    session_id = getattr(request.auth, "session_id", None)
    if session_id is not None:
        return memory_services.session_actor(session_id)
    return memory_services.api_actor(request.auth)


def _query_id(request, name: str) -> str | None:
    value = request.query_params.get(name) or None
    if value is not None and len(value) > ID_MAX_CHARS:
        raise InvalidRequest(f"{name}: at most {ID_MAX_CHARS} characters.")
    return value


# --- stores ----------------------------------------------------------------------------------


class MemoryStoreListCreateApi(MemoryApi):
    @extend_schema(
        operation_id="memory_stores_create",
        request=MemoryStoreCreateInputSerializer,
        responses=MemoryStoreOutputSerializer,
    )
    def post(self, request):
        store = memory_services.memory_store_create(workspace=request.user, **parse_memory_store_create(request.data))
        return Response(memory_store_to_wire(store))

    @extend_schema(
        operation_id="memory_stores_list",
        parameters=[*PAGES.parameters(), OpenApiParameter("include_archived", bool), *_CREATED],
        responses=MemoryStoreListOutputSerializer,
    )
    def get(self, request):
        rows, next_page = memory_store_list(
            workspace=request.user,
            **PAGES.read(request),
            include_archived=query_bool(request, "include_archived"),
            created_at_gte=query_datetime(request, "created_at[gte]"),
            created_at_lte=query_datetime(request, "created_at[lte]"),
        )
        return Response({"data": [memory_store_to_wire(row) for row in rows], "next_page": next_page})


class MemoryStoreDetailApi(MemoryApi):
    @extend_schema(operation_id="memory_stores_retrieve", responses=MemoryStoreOutputSerializer)
    def get(self, request, memory_store_id: str):
        return Response(memory_store_to_wire(memory_store_get(workspace=request.user, memory_store_id=memory_store_id)))

    @extend_schema(
        operation_id="memory_stores_update",
        request=MemoryStoreUpdateInputSerializer,
        responses=MemoryStoreOutputSerializer,
    )
    def post(self, request, memory_store_id: str):
        store = memory_services.memory_store_update(
            workspace=request.user, memory_store_id=memory_store_id, changes=parse_memory_store_changes(request.data)
        )
        return Response(memory_store_to_wire(store))

    @extend_schema(operation_id="memory_stores_delete", responses={200: MemoryStoreDeletedOutputSerializer})
    def delete(self, request, memory_store_id: str):
        memory_services.memory_store_delete(workspace=request.user, memory_store_id=memory_store_id)
        return Response({"id": memory_store_id, "type": "memory_store_deleted"})


class MemoryStoreArchiveApi(MemoryApi):
    @extend_schema(operation_id="memory_stores_archive", request=None, responses=MemoryStoreOutputSerializer)
    def post(self, request, memory_store_id: str):
        store = memory_services.memory_store_archive(workspace=request.user, memory_store_id=memory_store_id)
        return Response(memory_store_to_wire(store))


# --- memories --------------------------------------------------------------------------------


class MemoryListCreateApi(MemoryApi):
    @extend_schema(
        operation_id="memory_stores_memories_create",
        parameters=[_VIEW],
        request=MemoryCreateInputSerializer,
        responses=MemoryOutputSerializer,
    )
    def post(self, request, memory_store_id: str):
        view = _view(request, "basic")
        memory = memory_services.memory_create(
            workspace=request.user,
            memory_store_id=memory_store_id,
            actor=_actor(request),
            **parse_memory_create(request.data),
        )
        return Response(memory_to_wire(memory, view=view))

    @extend_schema(
        operation_id="memory_stores_memories_list",
        parameters=[
            *PAGES.parameters(),
            _VIEW,
            OpenApiParameter("path_prefix", str),
            OpenApiParameter("depth", int),
        ],
        responses=MemoryListOutputSerializer,
    )
    def get(self, request, memory_store_id: str):
        view = _view(request, "basic")
        paging = _page(request, view)
        depth = query_int(request, "depth", default=0, minimum=0, maximum=PATH_MAX_SEGMENTS)
        prefix = request.query_params.get("path_prefix") or None
        if prefix is not None:
            try:
                check_path_prefix(prefix)
            except MemoryRefused as exc:
                raise InvalidRequest(f"path_prefix: {exc}") from None
        store = memory_store_get(workspace=request.user, memory_store_id=memory_store_id)
        items, next_page = memory_list(store=store, path_prefix=prefix, depth=depth, **paging)
        data = [
            memory_to_wire(item, view=view) if kind == "memory" else memory_prefix_to_wire(item) for kind, item in items
        ]
        return Response({"data": data, "next_page": next_page})


class MemoryDetailApi(MemoryApi):
    @extend_schema(operation_id="memory_stores_memories_retrieve", parameters=[_VIEW], responses=MemoryOutputSerializer)
    def get(self, request, memory_store_id: str, memory_id: str):
        view = _view(request, "full")
        store = memory_store_get(workspace=request.user, memory_store_id=memory_store_id)
        return Response(memory_to_wire(memory_get(store=store, memory_id=memory_id), view=view))

    @extend_schema(
        operation_id="memory_stores_memories_update",
        parameters=[_VIEW],
        request=MemoryUpdateInputSerializer,
        responses=MemoryOutputSerializer,
    )
    def post(self, request, memory_store_id: str, memory_id: str):
        view = _view(request, "basic")
        memory = memory_services.memory_update(
            workspace=request.user,
            memory_store_id=memory_store_id,
            memory_id=memory_id,
            actor=_actor(request),
            **parse_memory_update(request.data),
        )
        return Response(memory_to_wire(memory, view=view))

    @extend_schema(
        operation_id="memory_stores_memories_delete",
        parameters=[OpenApiParameter("expected_content_sha256", str)],
        responses={200: MemoryDeletedOutputSerializer},
    )
    def delete(self, request, memory_store_id: str, memory_id: str):
        expected = request.query_params.get("expected_content_sha256") or None
        if expected is not None and (len(expected) != 64 or expected.strip("0123456789abcdef")):
            raise InvalidRequest("expected_content_sha256: must be 64 lowercase hexadecimal characters.")
        memory_services.memory_delete(
            workspace=request.user,
            memory_store_id=memory_store_id,
            memory_id=memory_id,
            expected_sha256=expected,
            actor=_actor(request),
        )
        return Response({"id": memory_id, "type": "memory_deleted"})


# --- memory versions -------------------------------------------------------------------------


class MemoryVersionListApi(MemoryApi):
    @extend_schema(
        operation_id="memory_stores_memory_versions_list",
        parameters=[
            *PAGES.parameters(),
            _VIEW,
            *_CREATED,
            OpenApiParameter("memory_id", str),
            OpenApiParameter("session_id", str),
            OpenApiParameter("api_key_id", str),
            OpenApiParameter("service_account_id", str),
            OpenApiParameter("operation", str, enum=list(OPERATIONS)),
        ],
        responses=MemoryVersionListOutputSerializer,
    )
    def get(self, request, memory_store_id: str):
        view = _view(request, "basic")
        paging = _page(request, view)
        operation = request.query_params.get("operation") or None
        if operation is not None and operation not in OPERATIONS:
            raise InvalidRequest(f"operation: must be one of {', '.join(OPERATIONS)}.")
        filters = {
            name: _query_id(request, name) for name in ("memory_id", "session_id", "api_key_id", "service_account_id")
        }
        filters.update(
            operation=operation,
            created_at_gte=query_datetime(request, "created_at[gte]"),
            created_at_lte=query_datetime(request, "created_at[lte]"),
        )
        store = memory_store_get(workspace=request.user, memory_store_id=memory_store_id)
        rows, next_page = memory_version_list(store=store, filters=filters, **paging)
        return Response({"data": [memory_version_to_wire(row, view=view) for row in rows], "next_page": next_page})


class MemoryVersionDetailApi(MemoryApi):
    @extend_schema(
        operation_id="memory_stores_memory_versions_retrieve",
        parameters=[_VIEW],
        responses=MemoryVersionOutputSerializer,
    )
    def get(self, request, memory_store_id: str, memory_version_id: str):
        view = _view(request, "full")
        store = memory_store_get(workspace=request.user, memory_store_id=memory_store_id)
        version = memory_version_get(store=store, memory_version_id=memory_version_id)
        return Response(memory_version_to_wire(version, view=view))


class MemoryVersionRedactApi(MemoryApi):
    @extend_schema(
        operation_id="memory_stores_memory_versions_redact", request=None, responses=MemoryVersionOutputSerializer
    )
    def post(self, request, memory_store_id: str, memory_version_id: str):
        version = memory_services.memory_version_redact(
            workspace=request.user,
            memory_store_id=memory_store_id,
            memory_version_id=memory_version_id,
            actor=_actor(request),
        )
        return Response(memory_version_to_wire(version, view="full"))
