"""Reads for Files, and the streaming read of every object in the store.

Every File obtained by id passes one gate, `_file_gate`: a well-formed id, the caller's workspace
(unless the caller holds the row that names the File), and the visibility its purpose allows. The
purposes have a name each: `file_get` (the Files API), `file_get_for_admission` (documents,
rubrics, resources: a File being deleted is told apart), `session_file_copy_get` (a session's own
copy) and `event_snapshot_read` (an admitted PDF or image, for the model call). A missing or
foreign id is the same not-found for every purpose."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from core import pagination
from core.errors import InvalidRequest, NotFound
from core.models import Workspace
from files import storage
from files.exceptions import StoredObjectMissing
from files.models import File, OwnedObject, file_id_time

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STREAM_CHUNK_BYTES = storage.DEFAULT_CHUNK_BYTES


def _not_found(file_id: str) -> NotFound:
    return NotFound(f"No file with id {file_id!r}.")


def _visible(workspace: Workspace):
    """The workspace's ready Files a client may see (event snapshots are the server's own)."""
    return File.objects.filter(workspace=workspace, state=File.State.READY).exclude(origin=File.Origin.EVENT_SNAPSHOT)


def _unexpired(now: datetime) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


@dataclass(frozen=True)
class _Purpose:
    """What one purpose may see of a File: its states, whether it is a client's File (event
    snapshots are not) or must be an event snapshot, or a session's own copy."""

    states: tuple[str, ...] = (File.State.READY,)
    event_snapshot: bool | None = False  # None: either
    session_scoped: bool = False


_API = _Purpose()
_ADMISSION = _Purpose(states=(File.State.READY, File.State.DELETING))
_SESSION_COPY = _Purpose(event_snapshot=None, session_scoped=True)
_EVENT_SNAPSHOT = _Purpose(event_snapshot=True)


def _file_gate(*, purpose: _Purpose, file_id: str, workspace: Workspace | None) -> File | None:
    """The one lookup of a File by id. `workspace` None only where the caller holds the row
    that names the File (a session's resource, an event), which is the access check."""
    if not isinstance(file_id, str) or file_id_time(file_id) is None:
        return None
    rows = File.objects.filter(pk=file_id, state__in=purpose.states)
    if workspace is not None:
        rows = rows.filter(workspace=workspace)
    if purpose.event_snapshot is True:
        rows = rows.filter(origin=File.Origin.EVENT_SNAPSHOT)
    elif purpose.event_snapshot is False:
        rows = rows.exclude(origin=File.Origin.EVENT_SNAPSHOT)
    if purpose.session_scoped:
        rows = rows.filter(scope_session_id__isnull=False)
    return rows.first()


def _expired(file: File) -> bool:
    return file.expires_at is not None and file.expires_at <= timezone.now()


def file_get(*, workspace: Workspace, file_id: str, allow_expired: bool = False) -> File:
    """The File with this id in this workspace, if it is visible (ready). Missing, foreign,
    malformed and deleting ids are all the same 404. An expired File (not yet swept) is a 404
    with error_code `file_expired` unless `allow_expired` (delete may still act on it)."""
    file = _file_gate(purpose=_API, file_id=file_id, workspace=workspace)
    if file is None:
        raise _not_found(file_id)
    if not allow_expired and _expired(file):
        raise NotFound(f"File {file_id!r} has expired.", code="file_expired")
    return file


def file_get_for_admission(*, workspace: Workspace, file_id: str) -> File | None:
    """The same gate as file_get, for admission reads that must tell a File being deleted apart
    from a missing one: the workspace's File with this id if it is ready or deleting and not
    expired; None for missing, foreign, malformed and expired ids alike."""
    file = _file_gate(purpose=_ADMISSION, file_id=file_id, workspace=workspace)
    return None if file is None or _expired(file) else file


def session_file_copy_get(*, file_id: str) -> File | None:
    """A session's own File (a resource copy it holds by id), if still ready; None otherwise.
    The session row that names it is the access check (the caller holds it)."""
    return _file_gate(purpose=_SESSION_COPY, file_id=file_id, workspace=None)


def _read_bounded(*, key: str, max_bytes: int) -> bytes:
    try:
        return storage.read_bounded(key=key, max_bytes=max_bytes)
    except storage.StorageObjectMissing:
        raise StoredObjectMissing() from None


def file_read_bounded(*, file: File, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes of the File's content (admission reads: callers compare the
    length with max_bytes, and with file.size_bytes / file.sha256 to verify a full read).
    Raises StoredObjectMissing (a 404 object_missing) if the object is gone,
    storage.StorageUnavailable (a 503 ApiError) if the store cannot be reached."""
    return _read_bounded(key=file.object_key, max_bytes=max_bytes)


def event_snapshot_read(*, file_id: str, max_bytes: int) -> bytes:
    """The bytes of a PDF or image an event admitted (its private copy), for the model call. The
    event that names it is the access check; a missing one raises File.DoesNotExist."""
    file = _file_gate(purpose=_EVENT_SNAPSHOT, file_id=file_id, workspace=None)
    if file is None:
        raise File.DoesNotExist(f"No event snapshot {file_id!r}.")
    return _read_bounded(key=file.object_key, max_bytes=max_bytes)


def _stream(*, key: str, chunk_size: int) -> Iterator[bytes]:
    """The object, opened now, as an iterator of `chunk_size` chunks that closes it however
    iteration ends. A missing object is StoredObjectMissing (an ApiError: a clear 404 in the
    envelope, never a 500)."""
    try:
        stream = storage.open_object(key=key, chunk_size=chunk_size)
    except storage.StorageObjectMissing:
        raise StoredObjectMissing() from None
    return storage.iter_object(stream)


def file_stream(*, file: File, chunk_size: int = STREAM_CHUNK_BYTES) -> Iterator[bytes]:
    """A File's content (obtained through the gate above), streamed with bounded memory."""
    return _stream(key=file.object_key, chunk_size=chunk_size)


def owned_object_stream(
    *, owner_kind: str, owner_id: str, object_key: str, chunk_size: int = STREAM_CHUNK_BYTES
) -> Iterator[bytes]:
    """An owned object's content, streamed with bounded memory: only if the owner holds that key
    (and it is not being deleted); otherwise, or if the store lost it, StoredObjectMissing."""
    held = OwnedObject.objects.filter(
        owner_kind=owner_kind, owner_id=owner_id, object_key=object_key, state=OwnedObject.State.READY
    ).exists()
    if not held:
        raise StoredObjectMissing()
    return _stream(key=object_key, chunk_size=chunk_size)


def store_is_configured() -> bool:
    """Whether an object store is configured (MANGO_FILE_S3_BUCKET)."""
    return storage.is_configured()


def session_outputs_current(*, workspace: Workspace, session_id: str) -> dict[str, File]:
    """The session's published outputs, by their path under the outputs directory."""
    rows = _visible(workspace).filter(scope_session_id=session_id, origin=File.Origin.SESSION_OUTPUT)
    return {file.output_path: file for file in rows}


def session_scoped_files_orphaned(*, live_session_ids, created_before: datetime, limit: int) -> list[tuple[str, str]]:
    """(workspace id, session id) of session-scoped Files older than `created_before` whose
    session is not among `live_session_ids` (a queryset or a list)."""
    rows = (
        File.objects.filter(scope_session_id__isnull=False, state=File.State.READY, created_at__lt=created_before)
        .exclude(scope_session_id__in=live_session_ids)
        .values_list("workspace_id", "scope_session_id")
        .distinct()
    )
    return list(rows[:limit])


# --- listing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """A keyset position in the list order (created_at desc, id desc)."""

    created_at: datetime
    id: str


def cursor_encode(position: Position) -> str:
    micros = (position.created_at - _EPOCH) // timedelta(microseconds=1)
    return pagination.cursor_encode({"t": micros, "i": position.id}, purpose="files")


def cursor_decode(cursor: str) -> Position:
    """The position in a `page` cursor we issued; anything else is a 400."""
    payload = pagination.cursor_decode(
        cursor,
        purpose="files",
        fields={"t": pagination.is_int, "i": lambda value: isinstance(value, str) and file_id_time(value) is not None},
    )
    try:
        created_at = _EPOCH + timedelta(microseconds=payload["t"])
    except OverflowError:
        raise InvalidRequest("page: unknown or malformed page cursor.")
    return Position(created_at=created_at, id=payload["i"])


def position_of_id(file_id: str, *, param: str) -> Position:
    """A before_id/after_id cursor as a position. File ids embed their created_at, so this
    needs no lookup and still works after the File is deleted."""
    created_at = file_id_time(file_id)
    if created_at is None:
        raise InvalidRequest(f"{param}: {file_id!r} is not a file id.")
    return Position(created_at=created_at, id=file_id)


# Keyset predicates. The redundant leading bound (created_at <= / >=) is what PostgreSQL turns
# into an index condition on (workspace, created_at, id); the OR alone would be a filter that
# scans every row before the position.


def _after(position: Position) -> Q:
    # Strictly later in list order = older.
    return Q(created_at__lte=position.created_at) & (Q(created_at__lt=position.created_at) | Q(id__lt=position.id))


def _before(position: Position) -> Q:
    return Q(created_at__gte=position.created_at) & (Q(created_at__gt=position.created_at) | Q(id__gt=position.id))


def file_list(
    *,
    workspace: Workspace,
    limit: int,
    scope_id: str | None = None,
    after: Position | None = None,
    before: Position | None = None,
) -> tuple[list[File], bool]:
    """One page of visible, unexpired Files, newest first, and whether more follow in the
    direction of travel. Keyset pagination on (created_at, id): the cost of a page does not
    grow with the number of Files or with the depth of the page.

    Without `scope_id` every File of the workspace is listed (scope_id is a filter, as in the
    upstream API docs: "Only returns files associated with the specified scope"); with it,
    only that session's Files.
    """
    queryset = _visible(workspace).filter(_unexpired(timezone.now()))
    if scope_id is not None:
        queryset = queryset.filter(scope_session_id=scope_id)
    if before is not None:
        # The page just before `before`: the nearest newer Files, returned newest first.
        rows = list(queryset.filter(_before(before)).order_by("created_at", "id")[: limit + 1])
        has_more = len(rows) > limit
        return list(reversed(rows[:limit])), has_more
    if after is not None:
        queryset = queryset.filter(_after(after))
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return rows[:limit], len(rows) > limit


def file_list_by_ids(*, workspace: Workspace, ids: list[str], scope_id: str | None = None) -> list[File]:
    """The visible, unexpired Files among `ids`, newest first; the others are silently left out."""
    valid = [file_id for file_id in ids if file_id_time(file_id) is not None]  # the gate's id check
    queryset = _visible(workspace).filter(_unexpired(timezone.now()), pk__in=valid)
    if scope_id is not None:
        queryset = queryset.filter(scope_session_id=scope_id)
    return list(queryset.order_by("-created_at", "-id"))
