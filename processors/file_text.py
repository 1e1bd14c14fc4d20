"""A File's text for admission (DESIGN flow 4): the plain description of a File (FileRef), the
checks on it (ready, not session-scoped, size, media type), and its bytes read, verified against
the stored byte count and SHA-256, and decoded as strict UTF-8 within the limits. Pure: the
caller supplies `read_bytes` (see processors/admission.py). Every refusal is an AdmissionError
naming the File and the reason.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

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


def shown_name(file_id: str | None, filename: str | None = None) -> str:
    shown = f"File {file_id}" if file_id else "File"
    if filename is not None:
        shown += f" ({json.dumps(filename, ensure_ascii=False)})"
    return shown


def not_found_error(file_id: str | None, *, location: str | None = None) -> AdmissionError:
    """The one message for a missing and for a cross-workspace File id."""
    return AdmissionError(f"{_prefix(location)}{shown_name(file_id)} not found.", file_id=file_id, reason=MISSING)


def _fail(ref: FileRef, reason: str, detail: str, location: str | None) -> AdmissionError:
    return AdmissionError(
        f"{_prefix(location)}{shown_name(ref.file_id, ref.filename)} {detail}", file_id=ref.file_id, reason=reason
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
