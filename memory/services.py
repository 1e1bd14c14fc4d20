"""Memory stores: path-addressed UTF-8 text with an immutable version log.

Storage is PostgreSQL only, content included. A memory is at most 100 kB of text (the SDK's
limit), which PostgreSQL keeps out of line (TOAST) without help; keeping it in the row means a
memory, its new version and (at write-back) the session's baseline change in one transaction,
so there is no window in which a version names content that is not there, no intent to
reconcile after a crash, and redaction is one UPDATE that leaves no object behind. The object
store pays off for large bytes streamed without buffering; memories are neither.

Every change writes a MemoryVersion (created, modified, deleted) and the Memory row in one
transaction, under the store's row lock, with the actor (an `api_actor` naming the API key, or a
`session_actor` naming the session) recorded on the version. A change that changes nothing
writes no version. A `content_sha256` precondition that does not hold is a 409
`memory_precondition_failed_error`; a path another memory holds is a 409
`memory_path_conflict_error`. Limits (content size, memories per store, path length, stores per
workspace) are 400s before anything is written.
"""

import hashlib

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from core.errors import Conflict, InvalidRequest
from core.limits import workspace_rows_cap
from core.metadata import metadata_patch_apply
from core.models import Workspace
from core.signals import resource_change_announce
from core.updates import model_update
from memory.models import Memory, MemoryStore, MemoryVersion
from memory.selectors import memory_get, memory_store_get, memory_version_get
from processors.memory import (
    MemoryRefused,
    check_content,
    check_path,
    check_store_name,
    path_ancestors,
    path_clash,
)


class MemoryPreconditionFailed(Conflict):
    type = "memory_precondition_failed_error"


class MemoryPathConflict(Conflict):
    type = "memory_path_conflict_error"


class MemoryQuotaExceeded(InvalidRequest):
    code = "memory_quota_exceeded"


# What one version costs besides its path and content bytes (its row and index entries): a
# log of empty updates is bounded too.
VERSION_OVERHEAD_BYTES = 256


def version_cost(version: MemoryVersion) -> int:
    """The bytes one version counts toward the workspace's memory quota."""
    path = len(version.path.encode("utf-8")) if version.path is not None else 0
    return (version.content_size_bytes or 0) + path + VERSION_OVERHEAD_BYTES


def memory_bytes_used_locked(*, workspace_id: str) -> int:
    """Bytes the workspace's stores hold (every version of every memory, the current ones
    included: MemoryStore.stored_bytes), with the workspace row locked (taken after a store's
    row, as every memory writer does): concurrent writers of one workspace queue here, so two
    cannot both pass the last free byte."""
    Workspace.objects.select_for_update().filter(pk=workspace_id).first()
    used = MemoryStore.objects.filter(workspace_id=workspace_id).aggregate(total=Sum("stored_bytes"))
    return used["total"] or 0


def memory_quota_check(*, used: int, adding: int) -> None:
    quota = settings.MANGO_WORKSPACE_MEMORY_MAX_BYTES
    if adding > 0 and used + adding > quota:
        raise MemoryQuotaExceeded(
            f"The workspace's memory stores hold {used} bytes (every version counts); {adding} more would pass"
            f" its quota of {quota} bytes (MANGO_WORKSPACE_MEMORY_MAX_BYTES). Nothing was stored. Redact old"
            " versions or delete a store to free space."
        )


def memory_store_bytes_add(*, store: MemoryStore, adding: int) -> None:
    """Move the store's count by `adding` (negative: freed), in the caller's transaction."""
    if adding:
        MemoryStore.objects.filter(pk=store.pk).update(stored_bytes=F("stored_bytes") + adding)


def _version_charged(*, store: MemoryStore, check: bool = True, **fields) -> MemoryVersion:
    """A version written and counted: refused past the quota when `check` (a delete never is)."""
    version = memory_version_row(store=store, **fields)
    cost = version_cost(version)
    if check:
        memory_quota_check(used=memory_bytes_used_locked(workspace_id=store.workspace_id), adding=cost)
    version.save(force_insert=True)
    memory_store_bytes_add(store=store, adding=cost)
    return version


def api_actor(api_key) -> dict:
    return {"type": "api_actor", "api_key_id": api_key.id}


def session_actor(session_id: str) -> dict:
    return {"type": "session_actor", "session_id": session_id}


def _refuse(field: str, check, value):
    try:
        return check(value)
    except MemoryRefused as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


def sha256_text(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


# --- stores ----------------------------------------------------------------------------------


def memory_store_create(*, workspace, name: str, description: str, metadata: dict) -> MemoryStore:
    _refuse("name", check_store_name, name)
    now = timezone.now()
    with transaction.atomic():
        workspace_rows_cap(
            workspace=workspace, rows=MemoryStore.objects.filter(workspace=workspace),
            limit=settings.MANGO_WORKSPACE_MAX_MEMORY_STORES, what="memory stores",
            setting="MANGO_WORKSPACE_MAX_MEMORY_STORES",
        )  # fmt: skip
        store = MemoryStore.objects.create(
            workspace=workspace,
            name=name,
            description=description,
            metadata=metadata,
            created_at=now,
            updated_at=now,
        )
        resource_change_announce(workspace_id=store.workspace_id, type="memory_store.created", object_id=store.id)
        return store


@transaction.atomic
def memory_store_update(*, workspace, memory_store_id: str, changes: dict) -> MemoryStore:
    """Given fields change; metadata is a patch (null removes a key). An archived store is read-only."""
    store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
    _writable(store)
    data = {}
    if changes.get("name") is not None:
        data["name"] = _refuse("name", check_store_name, changes["name"])
    if changes.get("description") is not None:
        data["description"] = changes["description"]
    if changes.get("metadata") is not None:
        data["metadata"] = metadata_patch_apply(store.metadata, changes["metadata"])
    return model_update(instance=store, data=data)


@transaction.atomic
def memory_store_archive(*, workspace, memory_store_id: str) -> MemoryStore:
    store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
    if store.archived_at is None:
        resource_change_announce(workspace_id=store.workspace_id, type="memory_store.archived", object_id=store.id)
    store.archive()
    return store


def memory_store_delete(*, workspace, memory_store_id: str) -> None:
    """The store, its memories and every version go. Sessions keep their record of the
    attachment (name, access) but write nothing back any more."""
    with transaction.atomic():
        store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
        resource_change_announce(workspace_id=store.workspace_id, type="memory_store.deleted", object_id=store.id)
        store.delete()


def _writable(store: MemoryStore) -> None:
    if store.archived_at is not None:
        raise InvalidRequest(f"Memory store {store.id} is archived: its memories and settings cannot change.")


# --- memories --------------------------------------------------------------------------------


MEMORY_CONTENT_FIELDS = ["path", "content", "content_sha256", "content_size_bytes", "version_id", "updated_at"]


def memory_version_row(
    *, store: MemoryStore, memory_id: str, operation: str, path: str, content: str | None, actor: dict, now
) -> MemoryVersion:
    """An unsaved version (callers that write many at once save them with bulk_create)."""
    return MemoryVersion(
        store=store,
        memory_id=memory_id,
        operation=operation,
        path=path,
        content=content,
        content_sha256=None if content is None else sha256_text(content),
        content_size_bytes=None if content is None else len(content.encode("utf-8")),
        created_by=actor,
        api_key_id=actor.get("api_key_id"),
        session_id=actor.get("session_id"),
        created_at=now,
    )


def memory_content_set(memory: Memory, version: MemoryVersion, *, now) -> None:
    """Point `memory` at `version`: its path and content, their hash and size (unsaved)."""
    memory.path, memory.content = version.path, version.content
    memory.content_sha256, memory.content_size_bytes = version.content_sha256, version.content_size_bytes
    memory.version_id, memory.updated_at = version.id, now


def memory_paths_clashing(*, store: MemoryStore, paths: list[str], other_than: str | None = None) -> list[str]:
    """The paths of the store's memories that one of `paths` could not live beside in a directory
    tree (mounted in a sandbox, a store is one): a directory of it, or a path under it."""
    if not paths:
        return []
    near = Q(path__in={above for path in paths for above in path_ancestors(path)})
    for path in paths:
        near |= Q(path__startswith=path + "/")
    rows = Memory.objects.filter(store=store).filter(near)
    if other_than is not None:
        rows = rows.exclude(pk=other_than)
    return list(rows.values_list("path", flat=True))


def _path_taken(store: MemoryStore, path: str, *, other_than: str | None = None) -> None:
    """A path is one memory's, and never both a memory and a directory of others (`/x` and
    `/x/y`, in either order): a sandbox could place only one of them."""
    taken = Memory.objects.filter(store=store, path=path)
    if other_than is not None:
        taken = taken.exclude(pk=other_than)
    if taken.exists():
        raise MemoryPathConflict(f"path: {path[:200]!r} is already held by another memory in this store.")
    clash = path_clash(path, memory_paths_clashing(store=store, paths=[path], other_than=other_than))
    if clash is not None:
        raise MemoryPathConflict(
            f"path: {path[:200]!r} clashes with the memory at {clash[:200]!r}: a path cannot be both a memory"
            " and a directory of other memories."
        )


def _check_precondition(memory: Memory, expected: str | None) -> None:
    if expected is not None and memory.content_sha256 != expected:
        raise MemoryPreconditionFailed(
            f"The memory at {memory.path[:200]!r} has content_sha256 {memory.content_sha256}, not the expected"
            f" {expected}: it changed since it was read. Nothing was changed."
        )


def memory_create_locked(*, store: MemoryStore, path: str, content: str, actor: dict) -> Memory:
    """Inside the caller's transaction, with the store row locked: a new memory and its
    `created` version. Raises MemoryPathConflict when the path is held."""
    limit = settings.MANGO_MEMORY_STORE_MAX_MEMORIES
    if Memory.objects.filter(store=store).count() >= limit:
        raise InvalidRequest(f"Memory store {store.id} holds its limit of {limit} memories.")
    _path_taken(store, path)
    now = timezone.now()
    memory = Memory(store=store, path=path, content=content, created_at=now, updated_at=now)
    version = _version_charged(
        store=store, memory_id=memory.id, operation="created", path=path, content=content, actor=actor, now=now
    )
    memory.content_sha256, memory.content_size_bytes = version.content_sha256, version.content_size_bytes
    memory.version_id = version.id
    try:
        with transaction.atomic():
            memory.save(force_insert=True)
    except IntegrityError:
        raise MemoryPathConflict(f"path: {path[:200]!r} is already held by another memory in this store.") from None
    return memory


def memory_update_locked(
    *, store: MemoryStore, memory: Memory, path: str | None, content: str | None, expected: str | None, actor: dict
) -> Memory:
    """Inside the caller's transaction, store and memory rows locked: the precondition, then a
    `modified` version if the path or content changes (none if nothing does)."""
    _check_precondition(memory, expected)
    new_path = memory.path if path is None else path
    new_content = memory.content if content is None else content
    if new_path == memory.path and new_content == memory.content:
        return memory
    if new_path != memory.path:
        _path_taken(store, new_path, other_than=memory.id)
    now = timezone.now()
    version = _version_charged(
        store=store, memory_id=memory.id, operation="modified", path=new_path, content=new_content, actor=actor, now=now
    )
    memory_content_set(memory, version, now=now)
    memory.save(update_fields=MEMORY_CONTENT_FIELDS)
    return memory


def memory_delete_locked(*, store: MemoryStore, memory: Memory, expected: str | None, actor: dict) -> None:
    """Inside the caller's transaction: the precondition, a `deleted` version, the row gone."""
    _check_precondition(memory, expected)
    _version_charged(
        check=False,
        store=store,
        memory_id=memory.id,
        operation="deleted",
        path=memory.path,
        content=None,
        actor=actor,
        now=timezone.now(),
    )
    memory.delete()


def memory_create(*, workspace, memory_store_id: str, path: str, content: str, actor: dict) -> Memory:
    _refuse("path", check_path, path)
    _refuse("content", check_content, content)
    with transaction.atomic():
        store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
        _writable(store)
        return memory_create_locked(store=store, path=path, content=content, actor=actor)


def memory_update(
    *,
    workspace,
    memory_store_id: str,
    memory_id: str,
    path: str | None,
    content: str | None,
    expected_sha256: str | None,
    actor: dict,
) -> Memory:
    if path is not None:
        _refuse("path", check_path, path)
    if content is not None:
        _refuse("content", check_content, content)
    with transaction.atomic():
        store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
        memory = memory_get(store=store, memory_id=memory_id, for_update=True)
        _writable(store)
        return memory_update_locked(
            store=store, memory=memory, path=path, content=content, expected=expected_sha256, actor=actor
        )


def memory_delete(*, workspace, memory_store_id: str, memory_id: str, expected_sha256: str | None, actor: dict) -> None:
    """Deleting works on an archived store too; the memory's versions stay."""
    with transaction.atomic():
        store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
        memory = memory_get(store=store, memory_id=memory_id, for_update=True)
        memory_delete_locked(store=store, memory=memory, expected=expected_sha256, actor=actor)


@transaction.atomic
def memory_version_redact(*, workspace, memory_store_id: str, memory_version_id: str, actor: dict) -> MemoryVersion:
    """Clear a version's path and content (and their size and hash), recording when and by whom.
    The version holding a memory's current content cannot be redacted (update or delete the
    memory first): the memory would still show what the version no longer does. Redacting a
    redacted version changes nothing."""
    store = memory_store_get(workspace=workspace, memory_store_id=memory_store_id, for_update=True)
    version = memory_version_get(store=store, memory_version_id=memory_version_id, for_update=True)
    if version.redacted_at is not None:
        return version
    if Memory.objects.filter(store=store, version_id=version.id).exists():
        raise InvalidRequest(
            f"Memory version {version.id} holds its memory's current content; update or delete the memory"
            " before redacting this version."
        )
    freed = version_cost(version) - VERSION_OVERHEAD_BYTES
    version.path = version.content = version.content_sha256 = version.content_size_bytes = None
    version.redacted_at, version.redacted_by = timezone.now(), actor
    version.save(
        update_fields=["path", "content", "content_sha256", "content_size_bytes", "redacted_at", "redacted_by"]
    )
    memory_store_bytes_add(store=store, adding=-freed)
    return version


# --- sessions --------------------------------------------------------------------------------
