"""The one place that says which media types count as text for message documents.

`classify()` answers for a declared media type; the bytes themselves are checked by admission
(strict UTF-8 everywhere, and no NUL for `application/octet-stream`). Parameters such as
`; charset=utf-8` are ignored and matching is case-insensitive.
"""

from typing import Literal

Classification = Literal["text", "octet_stream", "unsupported"]

OCTET_STREAM = "application/octet-stream"

# Every `text/*` type is text (text/plain, text/markdown, text/csv, text/html, text/xml,
# text/x-python, text/javascript, text/yaml, ...), so only non-`text/` types are listed here.
TEXTUAL_APPLICATION_TYPES = frozenset(
    {
        # JSON and XML (and `application/*+json`, `application/*+xml`: see TEXTUAL_SUFFIXES)
        "application/json",
        "application/xml",
        "application/x-ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/json5",
        "application/geo+json",
        "application/ld+json",
        "application/xml-dtd",
        # YAML and TOML
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-toml",
        # Tabular
        "application/csv",
        # Scripts and source code
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/x-ecmascript",
        "application/typescript",
        "application/x-typescript",
        "application/sql",
        "application/x-sql",
        "application/graphql",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-csh",
        "application/x-python",  # (not application/x-python-code: that is .pyc bytecode)
        "application/x-httpd-php",
        "application/x-php",
        "application/x-perl",
        "application/x-ruby",
        "application/x-lua",
        # Documents that are plain text underneath
        "application/x-tex",
        "application/x-latex",
        "application/x-troff",
        "application/x-subrip",
        # Diffs
        "application/x-diff",
        "application/x-patch",
        # RTF is left out on purpose: although it is 7-bit text, it is a markup-heavy rich-text
        # format, and the spec's "text-only slice" is about content the model can read as is.
    }
)

# Structured-syntax suffixes (RFC 6839, RFC 9512) under `application/`, e.g.
# application/vnd.api+json, application/atom+xml, application/xhtml+xml, application/x-ipynb+json.
# Deliberately NOT applied to other top-level types: image/svg+xml is an image, and the spec
# accepts no images.
TEXTUAL_SUFFIXES = ("+json", "+xml", "+yaml")


def essence(mime: str | None) -> str:
    """`Text/Plain; charset=UTF-8` → `text/plain` (the "essence" of a media type)."""
    if not mime:
        return ""
    return mime.split(";", 1)[0].strip().lower()


def classify(mime: str | None) -> Classification:
    """ "text" (decode it), "octet_stream" (accept only if the bytes are UTF-8 without NUL) or
    "unsupported" (PDF, images, archives, audio, unknown binary formats, malformed types).

    A missing media type is treated like application/octet-stream: the bytes decide.
    """
    value = essence(mime)
    if not value or value == OCTET_STREAM:
        return "octet_stream"
    top, slash, sub = value.partition("/")
    if not slash or not top or not sub or "/" in sub or " " in value:
        return "unsupported"
    if top == "text":
        return "text"
    if value in TEXTUAL_APPLICATION_TYPES:
        return "text"
    if top == "application" and sub.endswith(TEXTUAL_SUFFIXES) and sub not in TEXTUAL_SUFFIXES:
        return "text"
    return "unsupported"
