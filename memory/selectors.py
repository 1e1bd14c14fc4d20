"""Reads of memory stores, memories and memory versions, scoped to the caller's workspace: a
foreign id is the same 404 as a missing one. Memories list in path order (byte-wise: the path
columns use the "C" collation), versions newest first."""

from datetime import datetime

from django.db.models import F, Func, TextField, Value
from django.db.models.functions import Coalesce, Collate, Substr

from core.errors import NotFound
from core.lookups import one_or_not_found
from core.pagination import cursor_decode, cursor_encode, keyset_page, rendered_bytes
from memory.models import Memory, MemoryStore, MemoryVersion


def memory_store_get(*, workspace, memory_store_id: str, for_update: bool = False) -> MemoryStore:
    return one_or_not_found(
        MemoryStore.objects.filter(workspace=workspace, id=memory_store_id),
        for_update=for_update,
        missing=NotFound(f"Memory store {memory_store_id!r} not found."),
    )


def memory_store_list(
    *,
    workspace,
    limit: int,
    page: str | None,
    include_archived: bool,
    created_at_gte: datetime | None = None,
    created_at_lte: datetime | None = None,
):
    queryset = MemoryStore.objects.filter(workspace=workspace)
    if not include_archived:
        queryset = queryset.filter(archived_at__isnull=True)
    if created_at_gte is not None:
        queryset = queryset.filter(created_at__gte=created_at_gte)
    if created_at_lte is not None:
        queryset = queryset.filter(created_at__lte=created_at_lte)
    rows, next_page, _ = keyset_page(
        queryset,
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="memory_stores",
        size=rendered_bytes("name", "description", "metadata"),
    )
    return rows, next_page


def memory_get(*, store: MemoryStore, memory_id: str, for_update: bool = False) -> Memory:
    return one_or_not_found(
        Memory.objects.filter(store=store, id=memory_id),
        for_update=for_update,
        missing=NotFound(f"Memory {memory_id!r} not found."),
    )


def memory_list(*, store: MemoryStore, path_prefix: str | None, depth: int, limit: int, page: str | None):
    """[(kind, item)] in path order: ("memory", Memory), or ("prefix", path) standing for the
    memories more than `depth` segments below the prefix (depth 0: every memory, no prefixes).
    The page cursor holds the last key listed."""
    prefix = path_prefix or "/"
    cursor = cursor_decode(page, purpose="memories", fields={"k": _is_path}) if page else None
    queryset = Memory.objects.filter(store=store)
    if prefix != "/":
        queryset = queryset.filter(path__startswith=prefix)
    if depth == 0:
        if cursor is not None:
            queryset = queryset.filter(path__gt=cursor["k"])
        rows = list(queryset.order_by("path")[: limit + 1])
        items = [("memory", row) for row in rows[:limit]]
        more = len(rows) > limit
    else:
        after = cursor["k"] if cursor else None
        items, more = _list_to_depth(queryset, prefix=prefix, depth=depth, after=after, limit=limit)
    next_page = None
    if more and items:
        kind, last = items[-1]
        next_page = cursor_encode({"k": last.path if kind == "memory" else last}, purpose="memories")
    return items, next_page


def _is_path(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 2048


def _list_to_depth(queryset, *, prefix: str, depth: int, after: str | None, limit: int):
    """Memories at most `depth` segments below `prefix`; deeper ones grouped by their first
    `depth` segments into one prefix (the key ends in `/`)."""
    rest = Substr(F("path"), len(prefix) + 1)
    deeper = Func(rest, Value(f"^((?:[^/]+/){{{depth}}})"), function="substring", output_field=TextField())
    keyed = queryset.annotate(
        # `||`, not Concat (which turns NULL into ""): a memory not deeper than `depth` keys by its path.
        _key=Collate(
            Coalesce(
                Func(Value(prefix), deeper, template="(%(expressions)s)", arg_joiner=" || ", output_field=TextField()),
                F("path"),
            ),
            "C",
        )
    )
    if after is not None:
        keyed = keyed.filter(_key__gt=after)
    keys = list(keyed.values_list("_key", flat=True).order_by("_key").distinct()[: limit + 1])
    more = len(keys) > limit
    keys = keys[:limit]
    memories = {row.path: row for row in queryset.filter(path__in=[key for key in keys if not key.endswith("/")])}
    items = [("prefix", key) if key.endswith("/") else ("memory", memories[key]) for key in keys]
    return items, more


def memory_version_get(*, store: MemoryStore, memory_version_id: str, for_update: bool = False) -> MemoryVersion:
    return one_or_not_found(
        MemoryVersion.objects.filter(store=store, id=memory_version_id),
        for_update=for_update,
        missing=NotFound(f"Memory version {memory_version_id!r} not found."),
    )


def memory_version_list(*, store: MemoryStore, limit: int, page: str | None, filters: dict):
    """Newest first. `filters`: memory_id, session_id, api_key_id, operation, created_at_gte,
    created_at_lte (each optional). No version here is written by a service account, so that
    filter lists none."""
    queryset = MemoryVersion.objects.filter(store=store)
    for field in ("memory_id", "session_id", "api_key_id", "operation"):
        if filters.get(field) is not None:
            queryset = queryset.filter(**{field: filters[field]})
    if filters.get("service_account_id") is not None:
        queryset = queryset.none()
    if filters.get("created_at_gte") is not None:
        queryset = queryset.filter(created_at__gte=filters["created_at_gte"])
    if filters.get("created_at_lte") is not None:
        queryset = queryset.filter(created_at__lte=filters["created_at_lte"])
    rows, next_page, _ = keyset_page(
        queryset,
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="memory_versions",
        size=rendered_bytes("content", "path"),
    )
    return rows, next_page


def memory_store_for_session(*, workspace_id: str, memory_store_id: str) -> MemoryStore | None:
    """The runner's read of an attached store (None once it is deleted)."""
    return MemoryStore.objects.filter(workspace_id=workspace_id, id=memory_store_id).first()


def memory_store_contents(*, store: MemoryStore):
    """Every memory of the store as (id, path, sha256, content), streamed from the database in
    batches (a sandbox is filled without holding the whole store in memory)."""
    rows = Memory.objects.filter(store=store).order_by("path").values_list("id", "path", "content_sha256", "content")
    return rows.iterator(chunk_size=200)
