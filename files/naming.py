"""Filename and media-type policy for uploaded Files (api-contract.md §1): what name and type a
File gets from what the client sent."""

import mimetypes
import posixpath
import re

from processors.filenames import filename_strip

_MEDIA_TYPE = re.compile(r"^[a-z0-9!#$&^_.+-]{1,127}/[a-z0-9!#$&^_.+-]{1,127}$")


def clean_filename(filename: str | None, mime_type: str) -> str:
    """Only the last path component, without control, line-separator or bidirectional
    characters (processors/filenames.py); an absent or empty name becomes `unnamed` + the
    extension of the media type, when one is known (api-contract.md §1)."""
    name = (filename or "").replace("\\", "/")
    name = filename_strip(posixpath.basename(name)).strip()
    if name in ("", ".", ".."):
        extension = mimetypes.guess_extension(mime_type or "", strict=False) or ""
        return f"unnamed{extension}"
    return name[:1024]


def resolve_mime_type(content_type: str | None, filename: str | None) -> str:
    """The part's content type, else a guess from the extension, else octet-stream."""
    if content_type and _MEDIA_TYPE.match(content_type):
        return content_type
    if filename:
        guessed, _ = mimetypes.guess_type(filename, strict=False)
        if guessed:
            return guessed
    return "application/octet-stream"
