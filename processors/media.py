"""PDFs and images for the model (issue 24), pure: which Files may be sent as a `document` or an
`image` block, whether their bytes are what their media type says, the upstream's limits, and
the check of inline `base64` / `url` sources.

Limits are the Messages API's (docs "Vision" and "PDF support", read 2026-12-01): an image at
most 5 MB; a request at most 32 MB in all, which base64 (4/3) leaves room for a PDF of at most
24 MB. `MEDIA_LIMITS` holds them; the caller may pass others (settings).
"""

import base64
import binascii
from dataclasses import dataclass

from processors.file_text import (
    INVALID,
    OVERSIZED,
    UNSUPPORTED_MEDIA_TYPE,
    AdmissionError,
    FileRef,
    ReadBytes,
    _admissible,
    _read_verified,
)

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
PDF_TYPE = "application/pdf"
MEDIA_LIMITS = {"image": 5 * 1024 * 1024, "pdf": 24 * 1024 * 1024}
URL_MAX_CHARS = 2048
# The inline source types each block type takes besides `file` (the API's).
SOURCE_TYPES = {"image": ("base64", "url"), "document": ("base64", "url", "text", "content")}
SIGNATURE = "signature_mismatch"


def media_kind(block_type: str, mime_type: str) -> str | None:
    """ "image" or "pdf" for a Files-sourced block the upstream takes as binary; None for a
    document whose File is (perhaps) text, which stays on the text path."""
    mime = (mime_type or "").split(";")[0].strip().lower()
    if block_type == "image":
        return "image"
    if mime == PDF_TYPE:
        return "pdf"
    return None


def signature_ok(data: bytes, media_type: str) -> bool:
    """Whether `data` begins as a `media_type` file does (PNG, JPEG, GIF, WebP, PDF)."""
    if media_type == "image/png":
        return data.startswith(b"\x89PNG\r\n\x1a\n")
    if media_type == "image/jpeg":
        return data.startswith(b"\xff\xd8\xff")
    if media_type == "image/gif":
        return data.startswith((b"GIF87a", b"GIF89a"))
    if media_type == "image/webp":
        return len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    if media_type == PDF_TYPE:
        return data[:1024].lstrip(b"\x00\t\n\r\x0c ").startswith(b"%PDF-")
    return False


@dataclass(frozen=True)
class LoadedMedia:
    file_id: str
    filename: str
    media_type: str
    kind: str  # "image" | "pdf"
    size_bytes: int

    def snapshot(self, index: int) -> dict:
        return {
            "index": index,
            "file_id": self.file_id,
            "filename": self.filename,
            "media_type": self.media_type,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
        }


def read_verified_media(
    ref: FileRef, *, kind: str, read_bytes: ReadBytes, limits: dict[str, int], location: str | None
) -> LoadedMedia:
    """A PDF or image File admitted for the model: ready and top-level like any admitted File,
    within the upstream's limit, its bytes verified (count and SHA-256) and of the media type
    it claims. Returns its description (the caller keeps a private copy of the object)."""
    media_type = (ref.mime_type or "").split(";")[0].strip().lower()
    allowed = IMAGE_TYPES if kind == "image" else (PDF_TYPE,)
    if media_type not in allowed:
        raise AdmissionError(
            f"{location}: File {ref.file_id} has media type {ref.mime_type!r}; an {kind} block takes "
            f"{', '.join(allowed)}.",
            file_id=ref.file_id,
            reason=UNSUPPORTED_MEDIA_TYPE,
        )
    limit = limits[kind]
    _admissible(ref, max_chars=limit, max_bytes=limit, require_text_media=False, location=location)
    if ref.size_bytes > limit:
        raise AdmissionError(
            f"{location}: File {ref.file_id} is {ref.size_bytes:,} bytes; the model takes {kind}s of at most "
            f"{limit:,} bytes.",
            file_id=ref.file_id,
            reason=OVERSIZED,
        )
    data = _read_verified(ref, read_bytes=read_bytes, location=location)
    if not signature_ok(data, media_type):
        raise AdmissionError(
            f"{location}: File {ref.file_id} is not a {media_type} file (its bytes do not begin as one does).",
            file_id=ref.file_id,
            reason=SIGNATURE,
        )
    return LoadedMedia(ref.file_id, ref.filename, media_type, kind, ref.size_bytes)


def check_inline_source(block: dict, *, location: str, limits: dict[str, int]) -> None:
    """An `image` / `document` block's own source, before anything is stored: base64 must decode
    and begin as its media type says (within the limits); a url must be http(s)."""
    kind = block.get("type")
    source = block.get("source")
    if kind not in SOURCE_TYPES or not isinstance(source, dict) or source.get("type") == "file":
        return
    where = f"{location}.source"
    source_type = source.get("type")
    if source_type not in SOURCE_TYPES[kind]:
        raise AdmissionError(f"{where}.type: must be one of {', '.join(SOURCE_TYPES[kind])} or file.", reason=INVALID)
    if source_type == "url":
        url = source.get("url")
        if not isinstance(url, str) or len(url) > URL_MAX_CHARS or not url.lower().startswith(("http://", "https://")):
            raise AdmissionError(
                f"{where}.url: must be an http(s) URL of at most {URL_MAX_CHARS} characters.", reason=INVALID
            )
        return
    if source_type != "base64":
        return
    media_type = source.get("media_type")
    allowed = IMAGE_TYPES if kind == "image" else (PDF_TYPE,)
    if media_type not in allowed:
        raise AdmissionError(f"{where}.media_type: must be one of {', '.join(allowed)}.", reason=INVALID)
    data = source.get("data")
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if not raw:
        raise AdmissionError(f"{where}.data: must be non-empty standard base64.", reason=INVALID)
    limit = limits["image" if kind == "image" else "pdf"]
    if len(raw) > limit:
        raise AdmissionError(f"{where}.data: {len(raw):,} bytes; at most {limit:,}.", reason=OVERSIZED)
    if not signature_ok(raw, media_type):
        raise AdmissionError(f"{where}.data: the bytes are not a {media_type} file.", reason=SIGNATURE)


def inline_snapshots(messages: list[dict], load: "callable") -> list[dict]:
    """Messages with every `{"type": "snapshot", "file_id", "media_type"}` source replaced by the
    upstream's base64 source of those bytes (`load(file_id) -> bytes`)."""
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        out.append({**message, "content": [_inline_block(block, load) for block in content]})
    return out


def _inline_block(block, load):
    if not isinstance(block, dict):
        return block
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "snapshot":
        data = base64.b64encode(load(source["file_id"])).decode("ascii")
        return {**block, "source": {"type": "base64", "media_type": source["media_type"], "data": data}}
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        return {**block, "content": [_inline_block(inner, load) for inner in block["content"]]}
    return block
