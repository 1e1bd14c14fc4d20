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
from dataclasses import dataclass, field

from processors.file_text import (
    AGGREGATE_OVERSIZED,
    EMPTY,
    INVALID,
    MAX_CHARS,
    OVERSIZED,
    AdmissionError,
    LoadedText,
    Lookup,
    ReadBytes,
    read_verified_text,
    shown_name,
)
from processors.media import MEDIA_LIMITS, LoadedMedia, check_inline_source, media_kind, read_verified_media


def file_source_id(block: dict) -> str | bool | None:
    """For a block with a `file` source: its file_id (False when malformed); None otherwise."""
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "file":
        return None
    file_id = source.get("file_id")
    return file_id if isinstance(file_id, str) and file_id else False


def is_file_document(block) -> bool:
    return isinstance(block, dict) and block.get("type") == "document" and bool(file_source_id(block))


def is_file_block(block) -> bool:
    """A `document` or `image` block whose source is a File."""
    return isinstance(block, dict) and block.get("type") in ("document", "image") and bool(file_source_id(block))


@dataclass(frozen=True)
class AdmittedMessage:
    """`content` is the public content (unchanged: file documents keep their file_id only);
    `snapshots` is the private snapshot, one dict per file document:
    {"index", "file_id", "filename", "media_type", "text"}."""

    content: list[dict]
    snapshots: list[dict] = field(default_factory=list)

    @property
    def chars(self) -> int:
        return sum(len(s.get("text", "")) for s in self.snapshots)


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


def _check_file_blocks(content: list, *, location: str, limits: dict[str, int]) -> None:
    """Every `image` / `document` source is checked before anything is stored: a file source
    must name a File, and an inline one must be what it claims (processors/media.py)."""
    for index, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") not in ("document", "image"):
            continue
        where = f"{location}[{index}]"
        if file_source_id(block) is False:
            raise AdmissionError(f"{where}: source.file_id must be a non-empty string.", reason=INVALID)
        check_inline_source(block, location=where, limits=limits)


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
        media_limits: dict[str, int] | None = None,
    ):
        self.lookup = lookup
        self.read_bytes = read_bytes
        self.aggregate_limit = aggregate_limit
        self.max_chars = max_chars
        self.media_limits = media_limits or MEDIA_LIMITS
        self.used_chars = 0
        self._loaded: dict[str, LoadedText] = {}
        self._media: dict[tuple[str, str], LoadedMedia] = {}

    def load_media(self, file_id: str, *, kind: str, location: str) -> LoadedMedia:
        """A PDF or image File, verified once per admission however often it is referenced."""
        if (file_id, kind) not in self._media:
            ref = self.lookup(file_id)
            if ref is None:
                read_verified_text(None, read_bytes=self.read_bytes, file_id=file_id, location=location)
            self._media[(file_id, kind)] = read_verified_media(
                ref, kind=kind, read_bytes=self.read_bytes, limits=self.media_limits, location=location
            )
        return self._media[(file_id, kind)]

    def _media_kind(self, block: dict) -> str | None:
        """ "image"/"pdf" for a Files-sourced block sent to the model as bytes; None otherwise."""
        if block.get("type") == "image":
            return "image"
        ref = self.lookup(block["source"]["file_id"])
        return media_kind("document", ref.mime_type) if ref is not None else None

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
        _check_file_blocks(content, location=location, limits=self.media_limits)
        used = self.used_chars
        snapshots = []
        for index, block in enumerate(content):
            if not is_file_block(block):
                continue
            where = f"{location}[{index}]"
            kind = self._media_kind(block)
            if kind is not None:
                snapshots.append(self.load_media(block["source"]["file_id"], kind=kind, location=where).snapshot(index))
                continue
            loaded = self.load_document(block["source"]["file_id"], location=where)
            used += len(loaded.text)
            if used > self.aggregate_limit:
                raise AdmissionError(
                    f"{where}: {shown_name(loaded.file_id, loaded.filename)} brings the File content admitted with "
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
        if kind in ("user.tool_result", "user.custom_tool_result") and isinstance(event.get("content"), list):
            admitted = self.message_content(event["content"], location=f"{location}.content")
            private = {"documents": admitted.snapshots} if admitted.snapshots else None
            return AdmittedEvent(copy.deepcopy(event), private)
        return AdmittedEvent(copy.deepcopy(event))
