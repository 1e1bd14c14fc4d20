import re

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from core.bodies import content_length
from core.errors import InvalidRequest, RequestTooLarge

# No request body the API accepts is nested deeper than this; deeper JSON (a recursion bomb, or
# a content block nested hundreds of levels) is refused before any view sees it.
MAX_JSON_DEPTH = 64
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_json(value, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse (400) JSON that PostgreSQL cannot store or that is nested too deep: any string or
    key holding NUL or an unpaired UTF-16 surrogate, or more than `max_depth` levels. Iterative,
    so it cannot itself run out of stack."""
    stack = [(value, 1, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise InvalidRequest(f"Malformed request body: JSON nested deeper than {max_depth} levels.")
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_string(key, f"{where}.{key[:64]}" if where else key[:64])
                    stack.append((child, depth + 1, f"{where}.{key[:64]}" if where else key[:64]))
            else:
                stack.extend((child, depth + 1, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, str):
            _check_string(item, where)


def _check_string(value: str, where: str) -> None:
    match = _UNSTORABLE.search(value)
    if match is None:
        return
    what = "a NUL character" if match.group() == "\x00" else "an unpaired surrogate"
    where = where.encode("unicode_escape").decode()[:200]
    raise InvalidRequest(f"{where or 'body'}: strings must not contain {what}.")


class JSONParser(parsers.JSONParser):
    """DRF reads JSON from the raw stream, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE check:
    enforce it here, up front from Content-Length and while reading. Then refuse what cannot
    be stored or is nested too deep (check_json)."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        meta = request.META if request is not None else {}
        declared = content_length(meta.get("CONTENT_LENGTH")) or 0
        if limit is not None and declared > limit:
            raise RequestTooLarge(f"Request body is larger than {limit} bytes.")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
        check_json(data)
        return data
