from django.conf import settings
from rest_framework import parsers

from core.errors import RequestTooLarge


class JSONParser(parsers.JSONParser):
    """DRF reads JSON from the raw stream, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE check:
    enforce it here, up front from Content-Length and while reading."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        meta = request.META if request is not None else {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if limit is not None and declared > limit:
            raise RequestTooLarge(f"Request body is larger than {limit} bytes.")
        return super().parse(stream, media_type, parser_context)
