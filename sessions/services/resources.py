"""File resources (DESIGN flow 5): a client File mounted into a session.

Adding one admits the source (a ready, top-level client upload of the caller's workspace),
makes an independent, downloadable, session-scoped copy inside the object store (no bytes pass
through this process), and places the copy read-only in the sandbox at its mount path — at once
when the sandbox is running, otherwise when it starts. Deleting the source later does not touch
the copy; deleting the resource removes it from the sandbox and deletes the copy.
"""

import logging
import posixpath

from django.db import connection, transaction
from django.utils import timezone

import sandboxes as sandbox
from core.errors import InvalidRequest, NotFound
from core.models import Workspace
from files.models import File
from files.selectors import file_get_for_admission, file_stream, session_file_copy_get
from files.services import file_copy, file_delete
from memory.selectors import memory_store_for_session
from processors.errors import ProcessorError
from processors.memory import MAX_MEMORY_STORES_PER_SESSION, mount_path
from processors.resources import (
    MAX_FILE_RESOURCES,
    check_mount_path_available,
    check_resource_count,
    resolve_mount_path,
    tar_stream_for_file,
)
from sessions.dispatch import sandbox_path_remove_enqueue_on_commit
from sessions.models import Session, SessionMemoryStore, SessionResource, resource_ids
from sessions.selectors import session_get

logger = logging.getLogger(__name__)

PLACE_CHUNK = 1024 * 1024


def _admit_source(*, workspace: Workspace, file_id, field: str) -> File:
    """The admission rules for a resource's source: the workspace's ready, top-level upload."""
    if not isinstance(file_id, str) or not file_id:
        raise InvalidRequest(f"{field}.file_id: must be a non-empty string.")
    file = file_get_for_admission(workspace=workspace, file_id=file_id)
    if file is None:
        raise InvalidRequest(f"{field}.file_id: File {file_id} not found.", code="missing")
    if file.state != File.State.READY:
        raise InvalidRequest(f"{field}.file_id: File {file_id} is being deleted.", code="deleting")
    if file.scope_session_id:
        raise InvalidRequest(
            f"{field}.file_id: File {file_id} is session-scoped; only top-level uploads can be mounted.",
            code="session_scoped",
        )
    return file


def resources_admit(
    *, workspace: Workspace, params, existing: list[str], field: str = "resources", existing_files: int | None = None
) -> list:
    """Validate resource params before anything is copied: [(source File, mount path)].
    `existing`: the mount paths the session's resources take; `existing_files`: how many of
    them are file resources (all of them when not given)."""
    if not isinstance(params, list):
        raise InvalidRequest(f"{field}: must be an array.")
    admitted, paths = [], list(existing)
    try:
        check_resource_count(len(existing) if existing_files is None else existing_files, adding=len(params))
    except ProcessorError as exc:
        raise InvalidRequest(f"{field}: {exc.message}", code=exc.reason)
    for index, param in enumerate(params):
        where = f"{field}[{index}]"
        if not isinstance(param, dict):
            raise InvalidRequest(f"{where}: must be an object.")
        if param.get("type") != "file":
            raise InvalidRequest(f"{where}.type: only file resources are supported.")
        source = _admit_source(workspace=workspace, file_id=param.get("file_id"), field=where)
        try:
            mount_path = resolve_mount_path(source.id, param.get("mount_path"))
            check_mount_path_available(mount_path, paths)
        except ProcessorError as exc:
            raise InvalidRequest(f"{where}.mount_path: {exc.message}", code=exc.reason)
        paths.append(mount_path)
        admitted.append((source, mount_path))
    return admitted


def resources_copy(*, session_id: str, admitted: list) -> list[tuple[File, File, str]]:
    """Copy each admitted source (server-side). On failure the copies made so far are deleted."""
    copies = []
    try:
        for source, mount_path in admitted:
            copies.append((source, file_copy(source=source, scope_session_id=session_id), mount_path))
    except BaseException:
        for _, copy, _ in copies:
            file_delete(file=copy)
        raise
    return copies


def resource_rows_create(*, session: Session, copies: list) -> list[SessionResource]:
    """Inside the caller's transaction (session row locked)."""
    now = timezone.now()
    return SessionResource.objects.bulk_create(
        SessionResource(
            id=resource_id,
            session=session,
            source_file_id=source.id,
            file_id=copy.id,
            mount_path=mount_path,
            created_at=now,
            updated_at=now,
        )
        for resource_id, (source, copy, mount_path) in zip(resource_ids(len(copies)), copies, strict=True)
    )


def resource_add(*, workspace: Workspace, session_id: str, param) -> SessionResource:
    """POST /v1/sessions/{id}/resources. The copy is made before the row is committed; if the
    row cannot be committed the copy is deleted."""
    session = session_get(workspace=workspace, session_id=session_id)
    rows = SessionResource.objects.filter(session=session)
    existing = list(rows.values_list("mount_path", flat=True))
    files = rows.filter(type=SessionResource.Type.FILE).count()
    admitted = resources_admit(
        workspace=workspace, params=[param], existing=existing, field="resource", existing_files=files
    )
    copies = resources_copy(session_id=session.id, admitted=admitted)
    try:
        with transaction.atomic():
            session = session_get(workspace=workspace, session_id=session_id, for_update=True)
            rows = SessionResource.objects.filter(session=session)
            taken = list(rows.values_list("mount_path", flat=True))
            if rows.filter(type=SessionResource.Type.FILE).count() >= MAX_FILE_RESOURCES:
                raise InvalidRequest(f"resource: a session has at most {MAX_FILE_RESOURCES} file resources.")
            try:
                check_mount_path_available(copies[0][2], taken)
            except ProcessorError as exc:
                raise InvalidRequest(f"resource.mount_path: {exc.message}", code=exc.reason) from None
            (row,) = resource_rows_create(session=session, copies=copies)
    except BaseException:
        for _, copy, _ in copies:
            file_delete(file=copy)
        raise
    # The runner places it before the sandbox's next tool call (runtime.sandbox_ready): the API
    # never calls Docker.
    return row


def resource_get(*, workspace: Workspace, session_id: str, resource_id: str) -> SessionResource:
    session = session_get(workspace=workspace, session_id=session_id)
    row = SessionResource.objects.filter(session=session, id=resource_id).first()
    if row is None:
        raise NotFound(f"Resource {resource_id!r} not found.")
    return row


def resource_delete(*, workspace: Workspace, session_id: str, resource_id: str) -> None:
    """Delete the resource's row, and once that commits have a worker remove it from the running
    sandbox it was placed in; then the copy goes (through the Files delete path). The source File
    is untouched."""
    row = resource_get(workspace=workspace, session_id=session_id, resource_id=resource_id)
    session = row.session
    repository = row.type == SessionResource.Type.GITHUB_REPOSITORY
    with transaction.atomic():
        deleted, _ = SessionResource.objects.filter(pk=row.pk).delete()
        placed = row.placed_ref and session.sandbox_state == Session.SandboxState.RUNNING
        if deleted and placed and not (repository and row.clone_error):
            # A worker takes it out of the sandbox (the API never calls Docker).
            sandbox_path_remove_enqueue_on_commit(
                session_id=session.id, ref=row.placed_ref, path=row.mount_path, tree=repository
            )
    if not deleted:
        raise NotFound(f"Resource {resource_id!r} not found.")
    if repository:
        return
    copy = session_file_copy_get(file_id=row.file_id)
    if copy is not None:
        try:
            file_delete(file=copy)
        except NotFound:
            pass


_UNPLACED_SQL = (
    f"SELECT 1 FROM {SessionResource._meta.db_table} WHERE session_id = %s AND placed_ref IS DISTINCT FROM %s"
    " AND type = 'file' LIMIT 1"
)


def resources_place(*, session: Session, checked: bool = False) -> int:
    """Write every file resource not yet in the session's current sandbox into it, streamed from
    the store with bounded memory, read-only. Called when a sandbox starts and when a resource is
    added to a running one (`checked`: the caller knows some are unplaced, so the check is not
    asked again). Returns how many were placed."""
    ref = session.sandbox_ref
    if not checked:
        with connection.cursor() as cursor:  # no ORM for "none"
            cursor.execute(_UNPLACED_SQL, [session.id, ref])
            if cursor.fetchone() is None:
                return 0
    placed = 0
    rows = SessionResource.objects.filter(session=session, type=SessionResource.Type.FILE).exclude(placed_ref=ref)
    for row in rows.order_by("id"):
        copy = session_file_copy_get(file_id=row.file_id)
        if copy is None:
            continue
        parent = posixpath.dirname(row.mount_path)
        chunks = file_stream(file=copy, chunk_size=PLACE_CHUNK)
        # Read-only: mode 0444, owned by a user that is not the sandbox's (root without
        # CAP_DAC_OVERRIDE / CAP_FOWNER can neither write it nor chmod it back).
        stream = tar_stream_for_file(
            row.mount_path,
            copy.size_bytes,
            chunks,
            root=parent,
            include_parents=False,
            uid=sandbox.RESOURCE_OWNER_UID,
            gid=sandbox.RESOURCE_OWNER_UID,
        )
        sandbox.put_archive(session_id=session.id, directory=parent, chunks=stream)
        SessionResource.objects.filter(pk=row.pk).update(placed_ref=ref, updated_at=timezone.now())
        placed += 1
    return placed


def session_memory_stores_attach(*, session, params: list[dict], field: str = "resources") -> list:
    """Inside session_create's transaction: one SessionMemoryStore per `{memory_store_id, access,
    instructions}`, snapshotting the store's name and description now (later edits do not
    propagate). A missing or foreign store, an archived one, the same store twice, two stores
    whose names give one mount path, or more than MAX_MEMORY_STORES_PER_SESSION: a 400, and the
    caller's transaction (the session with it) rolls back."""
    if len(params) > MAX_MEMORY_STORES_PER_SESSION:
        raise InvalidRequest(f"{field}: a session mounts at most {MAX_MEMORY_STORES_PER_SESSION} memory stores.")
    rows, seen, paths = [], set(), {}
    now = timezone.now()
    for position, param in enumerate(params):
        where = f"{field}: memory_store {param['memory_store_id'][:80]!r}"
        store = memory_store_for_session(workspace_id=session.workspace_id, memory_store_id=param["memory_store_id"])
        if store is None:
            raise InvalidRequest(f"{where} not found.")
        if store.archived_at is not None:
            raise InvalidRequest(f"{where} is archived and cannot be attached to new sessions.")
        if store.id in seen:
            raise InvalidRequest(f"{where} is attached twice.")
        seen.add(store.id)
        path = mount_path(store.name)
        if path in paths:
            raise InvalidRequest(
                f"{where} would mount at {path}, as {paths[path]} does (their names give the same directory);"
                " rename one of the stores."
            )
        paths[path] = store.id
        rows.append(
            SessionMemoryStore(
                session=session,
                memory_store_id=store.id,
                access=param["access"],
                name=store.name,
                description=store.description,
                instructions=param.get("instructions"),
                mount_path=path,
                position=position,
                created_at=now,
            )
        )
    if rows:
        type(session).objects.filter(pk=session.pk).update(memory_store_count=len(rows))
        session.memory_store_count = len(rows)
    return SessionMemoryStore.objects.bulk_create(rows)
