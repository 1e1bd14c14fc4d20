"""Admission of File references in client events (DESIGN flow 4): the glue between the pure
`processors.admission` and the Files store.

It reads objects, so it runs *before* the transaction that appends the events; when it fails
nothing is committed. What it returns carries the private snapshots that are stored with each
event (never rendered): `documents` and the model-facing `model_content` of a user.message, the
`rubric` snapshot and `rubric_text` of a user.define_outcome.
"""

from collections.abc import Callable

from core.errors import InvalidRequest
from core.models import Workspace
from files import storage
from files.models import File
from files.selectors import file_get_for_admission, file_read_bounded
from processors.admission import Admission
from processors.errors import ProcessorError
from processors.file_text import FileRef
from processors.rendering import render_message_for_model


def _file_access(
    workspace: Workspace, before_lookup: Callable[[], None] | None = None
) -> tuple[Callable[[str], FileRef | None], Callable[[FileRef, int], bytes], dict]:
    """`lookup` and `read_bytes` over this workspace's Files (a foreign id is just missing).
    `before_lookup` runs once, before the first File is looked up."""
    rows: dict[str, File] = {}
    pending = [before_lookup] if before_lookup is not None else []

    def lookup(file_id: str) -> FileRef | None:
        while pending:
            pending.pop()()
        file = file_get_for_admission(workspace=workspace, file_id=file_id) if isinstance(file_id, str) else None
        if file is None:
            return None
        rows[file.id] = file
        return FileRef.of(file)

    def read_bytes(ref: FileRef, limit: int) -> bytes:
        try:
            # file_read_bounded returns up to max_bytes + 1 bytes; admission asks for at most `limit`.
            return file_read_bounded(file=rows[ref.file_id], max_bytes=limit - 1)
        except storage.StorageObjectMissing:
            raise FileNotFoundError(ref.file_id)

    return lookup, read_bytes, rows


def file_admission(workspace: Workspace, before_lookup: Callable[[], None] | None = None) -> Admission:
    lookup, read_bytes, _ = _file_access(workspace, before_lookup)
    return Admission(lookup=lookup, read_bytes=read_bytes)


def as_invalid_request(exc: ProcessorError) -> InvalidRequest:
    return InvalidRequest(exc.message, code=exc.reason)


def events_admit(
    *, workspace: Workspace, parsed: list[dict], field: str = "events", before_lookup: Callable[[], None] | None = None
) -> list[dict]:
    """Admit every File reference in `parsed` ({type, payload} items) as one admission: each File
    at most 262,144 characters and all File documents together at most 262,144. Returns the items
    with their `private` snapshots; raises InvalidRequest naming the file and the reason.
    `before_lookup` runs once before the first File is looked up (not at all without one)."""
    admission = file_admission(workspace, before_lookup)
    admitted_items = []
    for index, item in enumerate(parsed):
        try:
            admitted = admission.event({"type": item["type"], **item["payload"]}, location=f"{field}[{index}]")
        except ProcessorError as exc:
            raise as_invalid_request(exc)
        private = {}
        if item["type"] == "user.message" and admitted.private:
            documents = admitted.private["documents"]
            private = {
                "documents": documents,
                "model_content": render_message_for_model(item["payload"]["content"], documents),
            }
        elif item["type"] == "user.define_outcome":
            rubric = admitted.private["rubric"]
            private = {"rubric": rubric, "rubric_text": rubric["text"]}
        admitted_items.append({**item, "private": private})
    return admitted_items
