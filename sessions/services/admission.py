"""Admission of File references in client events (DESIGN flow 4): the glue between the pure
`processors.admission` and the Files store.

It reads objects, so it runs *before* the transaction that appends the events; when it fails
nothing is committed. What it returns carries the private snapshots that are stored with each
event (never rendered): `documents` and the model-facing `model_content` of a user.message, the
`rubric` snapshot and `rubric_text` of a user.define_outcome.
"""

import logging
from collections.abc import Callable

from django.conf import settings

from core.errors import InvalidRequest
from core.models import Workspace
from files.exceptions import StoredObjectMissing
from files.models import File
from files.selectors import file_get_for_admission, file_read_bounded
from files.services import file_copy, file_delete
from processors.admission import Admission
from processors.errors import ProcessorError
from processors.file_text import FileRef
from processors.rendering import render_message_for_model
from sessions.selectors import session_visible_file_ids

logger = logging.getLogger(__name__)


def _file_access(
    workspace: Workspace, before_lookup: Callable[[], None] | None = None, session_only: str | None = None
) -> tuple[Callable[[str], FileRef | None], Callable[[FileRef, int], bytes], dict]:
    """`lookup` and `read_bytes` over this workspace's Files (a foreign id is just missing).
    `before_lookup` runs once, before the first File is looked up. With `session_only` (a session
    id: admission on its work token's behalf), only the Files that session can see (its
    resources and the Files scoped to it); any other is just as missing."""
    rows: dict[str, File] = {}
    pending = [before_lookup] if before_lookup is not None else []
    visible: set[str] | None = None

    def lookup(file_id: str) -> FileRef | None:
        nonlocal visible
        while pending:
            pending.pop()()
        file = file_get_for_admission(workspace=workspace, file_id=file_id) if isinstance(file_id, str) else None
        if file is not None and session_only is not None and file.scope_session_id != session_only:
            if visible is None:
                visible = session_visible_file_ids(session_id=session_only)
            if file.id not in visible:
                file = None
        if file is None:
            return None
        rows[file.id] = file
        return FileRef.of(file)

    def read_bytes(ref: FileRef, limit: int) -> bytes:
        try:
            # file_read_bounded returns up to max_bytes + 1 bytes; admission asks for at most `limit`.
            return file_read_bounded(file=rows[ref.file_id], max_bytes=limit - 1)
        except StoredObjectMissing:
            raise FileNotFoundError(ref.file_id)

    return lookup, read_bytes, rows


def _media_limits() -> dict[str, int]:
    return {"image": settings.MANGO_MODEL_IMAGE_MAX_BYTES, "pdf": settings.MANGO_MODEL_PDF_MAX_BYTES}


def file_admission(workspace: Workspace, before_lookup: Callable[[], None] | None = None) -> Admission:
    lookup, read_bytes, _ = _file_access(workspace, before_lookup)
    return Admission(lookup=lookup, read_bytes=read_bytes, media_limits=_media_limits())


class MediaCopies:
    """The private copies of the PDFs and images an admission took (one per File referenced),
    made inside the store before the events commit; `discard()` if they never do."""

    def __init__(self, rows: dict[str, File], session_id: str):
        self.rows, self.session_id = rows, session_id
        self.made: dict[str, File] = {}

    def copy_id(self, file_id: str) -> str:
        if file_id not in self.made:
            self.made[file_id] = file_copy(
                source=self.rows[file_id],
                scope_session_id=self.session_id,
                origin=File.Origin.EVENT_SNAPSHOT,
                downloadable=False,
            )
        return self.made[file_id].id

    def discard(self) -> None:
        for copy in self.made.values():
            try:
                file_delete(file=copy)
            except Exception:  # noqa: BLE001 — the session's Files sweep finishes what is left
                logger.warning("could not delete an event snapshot", extra={"file_id": copy.id})


def as_invalid_request(exc: ProcessorError) -> InvalidRequest:
    return InvalidRequest(exc.message, code=exc.reason)


def events_admit(
    *,
    workspace: Workspace,
    parsed: list[dict],
    session_id: str,
    field: str = "events",
    before_lookup: Callable[[], None] | None = None,
    session_only: bool = False,
) -> tuple[list[dict], MediaCopies]:
    """Admit every File reference in `parsed` ({type, payload} items) as one admission: each text
    File at most 262,144 characters and all of them together at most 262,144; each PDF or image
    within the model's limits, of the media type it claims, and copied privately for the session
    (sent as base64 at each model call, so deleting the source changes nothing). Returns the
    items with their `private` snapshots, and the copies (discard them if the events do not
    commit); raises InvalidRequest naming the file and the reason. `before_lookup` runs once
    before the first File is looked up (not at all without one). `session_only`: the events come
    from the session's work token, which may name only the Files the session can see."""
    lookup, read_bytes, rows = _file_access(workspace, before_lookup, session_id if session_only else None)
    admission = Admission(lookup=lookup, read_bytes=read_bytes, media_limits=_media_limits())
    copies = MediaCopies(rows, session_id)
    admitted_items = []
    try:
        for index, item in enumerate(parsed):
            try:
                admitted = admission.event({"type": item["type"], **item["payload"]}, location=f"{field}[{index}]")
            except ProcessorError as exc:
                raise as_invalid_request(exc)
            admitted_items.append({**item, "private": _private(item, admitted.private, copies)})
    except BaseException:
        copies.discard()
        raise
    return admitted_items, copies


def _private(item: dict, admitted: dict | None, copies: MediaCopies) -> dict:
    if item["type"] in ("user.message", "user.tool_result", "user.custom_tool_result") and admitted:
        documents = admitted["documents"]
        for snapshot in documents:
            if "kind" in snapshot:
                snapshot["copy_id"] = copies.copy_id(snapshot["file_id"])
        return {
            "documents": documents,
            "model_content": render_message_for_model(item["payload"]["content"], documents),
        }
    if item["type"] == "user.define_outcome":
        rubric = admitted["rubric"]
        return {"rubric": rubric, "rubric_text": rubric["text"]}
    return {}
