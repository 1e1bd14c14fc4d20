"""Admission of Files into session events: message documents and outcome rubrics (DESIGN flow 4).

Pure: the caller describes each File as a `FileRef` and supplies two callables,

* `lookup(file_id) -> FileRef | None`: the workspace-scoped access gate (`file_get`). It must
  return None both for an id that does not exist and for one owned by another workspace, so the
  two are indistinguishable here and in every message.
* `read_bytes(ref, limit) -> bytes`: reads at most `limit` bytes of the stored object. It raises
  FileNotFoundError when the object is gone (reported as corrupt); any other exception is a
  storage failure and propagates unchanged (a 5xx, not the client's fault).

Everything is checked before anything is committed: the caller appends the event (public payload
plus the private snapshot returned here) only after these functions return.
"""

import copy
import hashlib
import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from processors.errors import ProcessorError
from processors.text_formats import classify

MAX_CHARS = 262_144
# The largest UTF-8 encoding of MAX_CHARS characters: 4 bytes each.
MAX_RUBRIC_BYTES = 4 * MAX_CHARS
MAX_DOCUMENT_BYTES = MAX_RUBRIC_BYTES

STATE_READY = "ready"
STATE_DELETING = "deleting"

# Reasons (AdmissionError.reason, rendered as the error code).
MISSING = "missing"
CROSS_WORKSPACE = "cross_workspace"  # never surfaced: reported exactly like MISSING
DELETING = "deleting"
SESSION_SCOPED = "session_scoped"
EMPTY = "empty"
OVERSIZED = "oversized"
CORRUPT = "corrupt"
NOT_UTF8 = "not_utf8"
CONTAINS_NUL = "contains_nul"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
UNSUPPORTED = "unsupported"
AGGREGATE_OVERSIZED = "aggregate_oversized"
INVALID = "invalid"


@dataclass(frozen=True)
class FileRef:
    """A plain description of a File, built by the caller from its model. Admission decides on
    `state`, `scope_session_id`, `size_bytes`, `sha256` and `mime_type`; `downloadable` and
    `origin` are carried for the caller's benefit (a top-level upload is never downloadable)."""

    file_id: str
    filename: str
    mime_type: str
    size_bytes: int
    sha256: str
    state: str = STATE_READY
    scope_session_id: str | None = None
    downloadable: bool = False
    origin: str = "upload"

    @classmethod
    def of(cls, obj) -> "FileRef":
        """From any object with the same attribute names (e.g. a files.models.File), duck-typed
        so this module never imports the model."""
        return cls(
            file_id=obj.id if hasattr(obj, "id") else obj.file_id,
            filename=obj.filename,
            mime_type=obj.mime_type,
            size_bytes=obj.size_bytes,
            sha256=obj.sha256,
            state=str(obj.state),
            scope_session_id=obj.scope_session_id,
            downloadable=bool(obj.downloadable),
            origin=str(obj.origin),
        )


@dataclass(frozen=True)
class LoadedText:
    file_id: str
    filename: str
    mime_type: str
    text: str

    def snapshot(self, index: int) -> dict:
        """The private, JSON-serialisable snapshot stored with the event for content[index]."""
        return {
            "index": index,
            "file_id": self.file_id,
            "filename": self.filename,
            "media_type": self.mime_type,
            "text": self.text,
        }


Lookup = Callable[[str], FileRef | None]
ReadBytes = Callable[[FileRef, int], bytes]


class AdmissionError(ProcessorError):
    """A File (or rubric) cannot be admitted. The message names the file and the reason."""

    def __init__(self, message: str, *, file_id: str | None = None, reason: str = INVALID):
        if reason == CROSS_WORKSPACE:
            # A foreign id must be indistinguishable from a missing one, code included.
            reason = MISSING
        super().__init__(message, reason=reason)
        self.file_id = file_id


def _prefix(location: str | None) -> str:
    return f"{location}: " if location else ""


def _name(file_id: str | None, filename: str | None = None) -> str:
    shown = f"File {file_id}" if file_id else "File"
    if filename is not None:
        shown += f" ({json.dumps(filename, ensure_ascii=False)})"
    return shown


def not_found_error(file_id: str | None, *, location: str | None = None) -> AdmissionError:
    """The one message for a missing and for a cross-workspace File id."""
    return AdmissionError(f"{_prefix(location)}{_name(file_id)} not found.", file_id=file_id, reason=MISSING)


def _fail(ref: FileRef, reason: str, detail: str, location: str | None) -> AdmissionError:
    return AdmissionError(
        f"{_prefix(location)}{_name(ref.file_id, ref.filename)} {detail}", file_id=ref.file_id, reason=reason
    )


def read_verified_text(
    ref: FileRef | None,
    *,
    read_bytes: ReadBytes,
    max_chars: int = MAX_CHARS,
    max_bytes: int | None = None,
    require_text_media: bool = True,
    file_id: str | None = None,
    location: str | None = None,
) -> str:
    """The common admission read: checks metadata, reads at most size+1 bytes, verifies the stored
    byte count and SHA-256, decodes strict UTF-8 and applies the character limit.

    `max_bytes` defaults to the largest UTF-8 encoding of `max_chars` characters (4 bytes each),
    so no object larger than that is ever read. With `require_text_media`, the declared media type
    must be textual (`text_formats.classify`), and application/octet-stream must hold no NUL.
    `file_id` is only used to name a missing File (when `ref` is None).
    """
    if ref is None:
        raise not_found_error(file_id, location=location)
    kind = _admissible(
        ref, max_chars=max_chars, max_bytes=max_bytes, require_text_media=require_text_media, location=location
    )
    data = _read_verified(ref, read_bytes=read_bytes, location=location)
    return _decoded(ref, data, kind=kind, max_chars=max_chars, location=location)


def _admissible(
    ref: FileRef, *, max_chars: int, max_bytes: int | None, require_text_media: bool, location
) -> str | None:
    """The metadata checks, before a byte is read; returns the media kind (or None unchecked)."""
    if ref.state == STATE_DELETING:
        raise _fail(ref, DELETING, "is being deleted.", location)
    if ref.state != STATE_READY:
        # Not visible yet (an upload still in progress): the same as not existing.
        raise not_found_error(ref.file_id, location=location)
    if ref.scope_session_id:
        raise _fail(
            ref,
            SESSION_SCOPED,
            "is session-scoped; only top-level client uploads can be used here.",
            location,
        )
    if ref.size_bytes == 0:
        raise _fail(ref, EMPTY, "is empty.", location)
    if ref.size_bytes < 0:
        raise _fail(ref, CORRUPT, "is corrupt: its stored byte count is invalid.", location)
    cap = max_bytes if max_bytes is not None else 4 * max_chars
    if ref.size_bytes > cap:
        raise _fail(
            ref,
            OVERSIZED,
            f"is too large: {ref.size_bytes:,} bytes; at most {cap:,} bytes and {max_chars:,} characters are allowed.",
            location,
        )
    kind = classify(ref.mime_type) if require_text_media else None
    if kind == "unsupported":
        raise _fail(
            ref,
            UNSUPPORTED_MEDIA_TYPE,
            f"has unsupported media type {json.dumps(ref.mime_type)}; only text formats are accepted "
            "(text/*, JSON, XML, common textual application formats, or UTF-8 application/octet-stream).",
            location,
        )
    return kind


def _read_verified(ref: FileRef, *, read_bytes: ReadBytes, location: str | None) -> bytes:
    """At most size+1 bytes, checked against the stored byte count and SHA-256."""
    try:
        data = read_bytes(ref, ref.size_bytes + 1)
    except FileNotFoundError:
        raise _fail(ref, CORRUPT, "is corrupt: its stored object is missing.", location)
    if len(data) != ref.size_bytes:
        read = f"more than {ref.size_bytes:,}" if len(data) > ref.size_bytes else f"{len(data):,}"
        raise _fail(
            ref,
            CORRUPT,
            f"is corrupt: the stored object holds {read} bytes, but its metadata records {ref.size_bytes:,}.",
            location,
        )
    if hashlib.sha256(data).hexdigest() != (ref.sha256 or "").strip().lower():
        raise _fail(ref, CORRUPT, "is corrupt: the stored object does not match its recorded SHA-256.", location)
    return data


def _decoded(ref: FileRef, data: bytes, *, kind: str | None, max_chars: int, location: str | None) -> str:
    """Strict UTF-8, no NUL in application/octet-stream, at most `max_chars` characters."""
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise _fail(ref, NOT_UTF8, f"is not valid UTF-8 (invalid byte at offset {exc.start:,}).", location)
    if kind == "octet_stream" and "\x00" in text:
        raise _fail(
            ref,
            CONTAINS_NUL,
            "is application/octet-stream and contains NUL bytes; only text content is accepted.",
            location,
        )
    if len(text) > max_chars:
        raise _fail(
            ref,
            OVERSIZED,
            f"is too large: {len(text):,} characters; the limit is {max_chars:,} characters.",
            location,
        )
    return text


# --- message content ------------------------------------------------------------------------


def _file_source_id(block: dict) -> str | bool | None:
    """For a block with a `file` source: its file_id (False when malformed); None otherwise."""
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "file":
        return None
    file_id = source.get("file_id")
    return file_id if isinstance(file_id, str) and file_id else False


def is_file_document(block) -> bool:
    return isinstance(block, dict) and block.get("type") == "document" and bool(_file_source_id(block))


@dataclass(frozen=True)
class AdmittedMessage:
    """`content` is the public content (unchanged: file documents keep their file_id only);
    `snapshots` is the private snapshot, one dict per file document:
    {"index", "file_id", "filename", "media_type", "text"}."""

    content: list[dict]
    snapshots: list[dict] = field(default_factory=list)

    @property
    def chars(self) -> int:
        return sum(len(s["text"]) for s in self.snapshots)


@dataclass(frozen=True)
class AdmittedRubric:
    """The rubric text plus where it came from; `snapshot()` is stored privately with the event."""

    text: str
    file_id: str | None = None
    filename: str | None = None
    media_type: str | None = None

    def snapshot(self) -> dict:
        if self.file_id is None:
            return {"type": "text", "text": self.text}
        return {
            "type": "file",
            "file_id": self.file_id,
            "filename": self.filename,
            "media_type": self.media_type,
            "text": self.text,
        }


@dataclass(frozen=True)
class AdmittedEvent:
    """`public` is the event as clients see it; `private` is None or a JSON-serialisable dict
    ({"documents": [...]} for user.message, {"rubric": {...}} for user.define_outcome)."""

    public: dict
    private: dict | None = None


def _check_unsupported_file_blocks(content: list, *, location: str, in_tool_result: bool) -> None:
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        file_id = _file_source_id(block)
        if file_id is None:
            continue
        where = f"{location}[{index}]"
        kind = block.get("type")
        if file_id is False and kind in ("document", "image"):
            raise AdmissionError(f"{where}: source.file_id must be a non-empty string.", reason=INVALID)
        if kind == "image":
            raise AdmissionError(
                f"{where}: images with a file source are not supported; send the image as base64 or url.",
                file_id=file_id,
                reason=UNSUPPORTED,
            )
        if kind == "document" and in_tool_result:
            raise AdmissionError(
                f"{where}: File documents inside tool results are not supported.", file_id=file_id, reason=UNSUPPORTED
            )


def check_tool_result_content(content: list[dict] | None, *, location: str = "content") -> None:
    """`user.tool_result` / `user.custom_tool_result` content: File documents and file-sourced
    images are rejected as unsupported; everything else passes."""
    if not content or not isinstance(content, list):
        return
    _check_unsupported_file_blocks(content, location=location, in_tool_result=True)


class Admission:
    """One admission: any number of events admitted together (e.g. all `initial_events` of a
    session create, or all events of one send). Each File is limited to `max_chars`, and all
    File documents resolved through this object together to `aggregate_limit` characters.
    A File referenced twice is read once but counts twice (the model sees it twice).
    Rubrics have their own limit and do not count toward the aggregate."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        read_bytes: ReadBytes,
        aggregate_limit: int = MAX_CHARS,
        max_chars: int = MAX_CHARS,
    ):
        self.lookup = lookup
        self.read_bytes = read_bytes
        self.aggregate_limit = aggregate_limit
        self.max_chars = max_chars
        self.used_chars = 0
        self._loaded: dict[str, LoadedText] = {}

    def load_document(self, file_id: str, *, location: str | None = None) -> LoadedText:
        if file_id in self._loaded:
            return self._loaded[file_id]
        ref = self.lookup(file_id)
        text = read_verified_text(
            ref,
            read_bytes=self.read_bytes,
            max_chars=self.max_chars,
            require_text_media=True,
            file_id=file_id,
            location=location,
        )
        loaded = LoadedText(file_id=ref.file_id, filename=ref.filename, mime_type=ref.mime_type, text=text)
        self._loaded[file_id] = loaded
        return loaded

    def message_content(self, content: list[dict], *, location: str = "content") -> AdmittedMessage:
        """Admit a `user.message` content list. Usage is added to the aggregate only on success."""
        if not isinstance(content, list):
            raise AdmissionError(f"{location}: must be a list of content blocks.", reason=INVALID)
        _check_unsupported_file_blocks(content, location=location, in_tool_result=False)
        used = self.used_chars
        snapshots = []
        for index, block in enumerate(content):
            if not is_file_document(block):
                continue
            where = f"{location}[{index}]"
            loaded = self.load_document(block["source"]["file_id"], location=where)
            used += len(loaded.text)
            if used > self.aggregate_limit:
                raise AdmissionError(
                    f"{where}: {_name(loaded.file_id, loaded.filename)} brings the File content admitted with "
                    f"this request to {used:,} characters; the limit is {self.aggregate_limit:,} characters "
                    "in total.",
                    file_id=loaded.file_id,
                    reason=AGGREGATE_OVERSIZED,
                )
            snapshots.append(loaded.snapshot(index))
        self.used_chars = used
        return AdmittedMessage(content=copy.deepcopy(content), snapshots=snapshots)

    def rubric(self, rubric: dict, *, location: str = "rubric") -> AdmittedRubric:
        """Admit a `user.define_outcome` rubric.

        File rubrics accept any declared media type: the spec restricts rubric Files by size,
        state, scope and strict UTF-8 only, so a rubric uploaded as e.g. application/pdf is
        accepted if (and only if) its bytes are valid UTF-8."""
        if not isinstance(rubric, dict):
            raise AdmissionError(f"{location}: must be an object.", reason=INVALID)
        kind = rubric.get("type")
        if kind == "text":
            text = rubric.get("content")
            if not isinstance(text, str):
                raise AdmissionError(f"{location}.content: must be a string.", reason=INVALID)
            if not text:
                raise AdmissionError(f"{location}.content: the rubric is empty.", reason=EMPTY)
            if len(text) > self.max_chars:
                raise AdmissionError(
                    f"{location}.content: the rubric is too large: {len(text):,} characters; the limit is "
                    f"{self.max_chars:,} characters.",
                    reason=OVERSIZED,
                )
            return AdmittedRubric(text=text)
        if kind == "file":
            file_id = rubric.get("file_id")
            if not isinstance(file_id, str) or not file_id:
                raise AdmissionError(f"{location}.file_id: must be a non-empty string.", reason=INVALID)
            ref = self.lookup(file_id)
            text = read_verified_text(
                ref,
                read_bytes=self.read_bytes,
                max_chars=self.max_chars,
                max_bytes=4 * self.max_chars,
                require_text_media=False,
                file_id=file_id,
                location=location,
            )
            return AdmittedRubric(text=text, file_id=ref.file_id, filename=ref.filename, media_type=ref.mime_type)
        raise AdmissionError(f'{location}.type: must be "file" or "text".', reason=INVALID)

    def event(self, event: dict, *, location: str = "event") -> AdmittedEvent:
        """Admit one event param by type; types without File references pass through."""
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "user.message":
            admitted = self.message_content(event.get("content"), location=f"{location}.content")
            public = {**event, "content": admitted.content}
            return AdmittedEvent(public, {"documents": admitted.snapshots} if admitted.snapshots else None)
        if kind == "user.define_outcome":
            rubric = self.rubric(event.get("rubric"), location=f"{location}.rubric")
            return AdmittedEvent(copy.deepcopy(event), {"rubric": rubric.snapshot()})
        if kind in ("user.tool_result", "user.custom_tool_result"):
            check_tool_result_content(event.get("content"), location=f"{location}.content")
        return AdmittedEvent(copy.deepcopy(event))


# --- rendering for the model ----------------------------------------------------------------


def _attr(value: str) -> str:
    return html.escape(value, quote=True).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")


def render_document_text(snapshot: dict, *, title: str | None = None, context: str | None = None) -> str:
    """`<document filename="…" media_type="…">\\n…\\n</document>`, attribute values escaped.
    The File id is deliberately absent: the model sees content, not our identifiers."""
    attrs = [f'filename="{_attr(snapshot.get("filename") or "")}"', f'media_type="{_attr(snapshot["media_type"])}"']
    if title:
        attrs.append(f'title="{_attr(title)}"')
    if context:
        attrs.append(f'context="{_attr(context)}"')
    text = snapshot["text"]
    tail = "" if text.endswith("\n") else "\n"
    return f"<document {' '.join(attrs)}>\n{text}{tail}</document>"


def render_message_for_model(content: list[dict], snapshots: list[dict]) -> list[dict]:
    """Rewrite admitted `user.message` content for the model: each File document becomes an
    ordinary text block (from its snapshot, never from the live File); `redacted` blocks are
    dropped (the Messages API has no such user block); every other block is passed unchanged.
    Raises ValueError if a File document has no matching snapshot (it was never admitted)."""
    by_index = {s["index"]: s for s in snapshots}
    rendered = []
    for index, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "redacted":
            continue
        if not is_file_document(block):
            if isinstance(block, dict) and block.get("type") == "image" and _file_source_id(block):
                raise ValueError(f"content[{index}]: file-sourced images are never admitted")
            rendered.append(copy.deepcopy(block))
            continue
        snapshot = by_index.get(index)
        if snapshot is None or snapshot.get("file_id") != block["source"]["file_id"]:
            raise ValueError(f"content[{index}]: no admitted snapshot for this File document")
        text_block = {
            "type": "text",
            "text": render_document_text(snapshot, title=block.get("title"), context=block.get("context")),
        }
        if block.get("cache_control"):
            text_block["cache_control"] = copy.deepcopy(block["cache_control"])
        rendered.append(text_block)
    return rendered
