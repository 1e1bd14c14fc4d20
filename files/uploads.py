"""`POST /v1/files`: the Files API's upload form (fields before one part named `file`), read
streaming from the request body with bounded memory and no temp files.

The body is the server layer's core.bodies.RequestBody when it installed one (config/bodies.py:
read straight from the socket or the ASGI messages), else what Django reads; the multipart
framing is files/multipart.py's, the name and type policy files/naming.py's.
"""

from collections.abc import Iterator

from core import metrics
from core.bodies import RequestBody, content_length
from core.errors import InvalidRequest, RequestTooLarge
from files.multipart import MultipartReader, Part, boundary_from_content_type

MAX_PARTS = 16
# Multipart framing, small fields and headers around a file never need more than this; a
# declared Content-Length beyond limit + slack can be refused before reading anything.
FRAMING_SLACK_BYTES = 1024 * 1024

FILE_FIELD = "file"
KNOWN_FIELDS = {"expires_in_seconds"}


def request_body_stream(django_request) -> tuple[object, int | None]:
    """The body stream and its length (None: read to its end), counted in
    mango_file_upload_bodies_total by reader.

    A RequestBody the server installed and nobody read yet is read directly. Otherwise Django
    reads the body by its Content-Length; without one Django reads it as empty, but a server
    that de-chunks the body (WSGI's wsgi.input_terminated, e.g. gunicorn's) lets us read it to
    its end.
    """
    environ = django_request.META
    body = environ.get("wsgi.input")
    if isinstance(body, RequestBody) and not body.bytes_read:
        stream, length = body, body.length
    elif environ.get("CONTENT_LENGTH") not in (None, ""):
        stream, length = django_request, content_length(environ["CONTENT_LENGTH"])
        if length is None:
            raise InvalidRequest("Invalid Content-Length.")
    elif environ.get("wsgi.input_terminated"):
        stream, length = body, None
    else:
        return django_request, 0
    metrics.FILE_UPLOAD_BODIES.labels(getattr(stream, "reader", "wsgi_input")).inc()
    return stream, length


def check_declared_length(content_length: int | None, *, max_bytes: int) -> None:
    if content_length is not None and content_length > max_bytes + FRAMING_SLACK_BYTES:
        raise RequestTooLarge(f"File is larger than the {max_bytes}-byte limit.")


def check_remaining_length(reader: MultipartReader, *, boundary: bytes, max_bytes: int) -> None:
    """Once the file part's headers are read, Content-Length bounds the file size closely:
    what is left is the file, the closing delimiter and at most a trailing CRLF."""
    if reader.content_length is None:
        return
    remaining = reader.content_length - reader.consumed
    closing = len(b"\r\n--" + boundary + b"--")
    if remaining - closing - 2 > max_bytes:
        raise RequestTooLarge(f"File is larger than the {max_bytes}-byte limit.")


class UploadForm:
    """The fields that precede the `file` part, the file part's headers, and its bytes."""

    def __init__(self, reader: MultipartReader, *, boundary: bytes):
        self.reader = reader
        self.boundary = boundary
        self.fields: dict[str, str] = {}
        self.file_part: Part | None = None
        self._rest_checked = False

    def read_until_file(self) -> Part:
        seen = []
        for _ in range(MAX_PARTS):
            part = self.reader.next_part()
            if part is None:
                break
            seen.append(part.name)
            if part.name == FILE_FIELD:
                self.file_part = part
                return part
            if part.name in KNOWN_FIELDS:
                if part.filename is not None:
                    raise InvalidRequest(f"{part.name}: must be a text field, not a file.")
                try:
                    self.fields[part.name] = self.reader.read_field().decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidRequest(f"{part.name}: must be UTF-8 text.")
            else:
                self.reader.skip_part()
        else:
            raise InvalidRequest(f"Too many multipart parts (more than {MAX_PARTS}).")
        hint = f" (got parts named {', '.join(repr(name) for name in seen)})" if seen else ""
        raise InvalidRequest(f"Missing file: send exactly one multipart part named `file`{hint}.")

    def chunks(self) -> Iterator[bytes]:
        """The file part's bytes; then the rest of the body is checked, so that a second file
        part (or a field that had to come first) fails the upload before it becomes visible."""
        yield from self.reader.iter_body()
        self._check_rest()

    def readinto(self, buffer: bytearray, start: int, end: int) -> int:
        """The file part's bytes read straight into buffer[start:end] (see
        MultipartReader.read_body_into); 0 at the end, once the rest of the body is checked as
        in chunks()."""
        count = self.reader.read_body_into(buffer, start, end)
        if not count and not self._rest_checked:
            self._rest_checked = True
            self._check_rest()
        return count

    def _check_rest(self) -> None:
        for _ in range(MAX_PARTS):
            part = self.reader.next_part()
            if part is None:
                return
            if part.name == FILE_FIELD:
                raise InvalidRequest("More than one file: send exactly one multipart part named `file`.")
            if part.name in KNOWN_FIELDS:
                raise InvalidRequest(f"{part.name}: must be sent before the `file` part.")
            self.reader.skip_part()
        raise InvalidRequest(f"Too many multipart parts (more than {MAX_PARTS}).")


def open_upload(django_request, *, max_bytes: int) -> UploadForm:
    """Check the request's framing and declared size (413 before reading anything when
    Content-Length alone proves the file too large), then read up to the file part."""
    boundary = boundary_from_content_type(django_request.META.get("CONTENT_TYPE", ""))
    stream, length = request_body_stream(django_request)
    check_declared_length(length, max_bytes=max_bytes)
    reader = MultipartReader(stream, boundary=boundary, content_length=length)
    form = UploadForm(reader, boundary=boundary)
    form.read_until_file()
    try:
        check_remaining_length(reader, boundary=boundary, max_bytes=max_bytes)
    except RequestTooLarge:
        reader.discard_rest()
        raise
    return form
