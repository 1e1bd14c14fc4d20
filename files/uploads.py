"""Streaming multipart/form-data for `POST /v1/files`, with bounded memory and no temp files.

Django's MultiPartParser would spool the file to a temporary file, and it puts a part without
a filename (what the SDK sends for raw bytes) into request.POST, in memory. This reader instead
pulls the body from the WSGI stream in bounded reads and hands the `file` part to the caller as
an iterator of chunks, which the upload service streams straight into the object store.
"""

import asyncio
import io
import mimetypes
import posixpath
import re
from collections.abc import Iterator

from django.conf import settings
from django.utils.http import parse_header_parameters

from core import metrics
from core.errors import ApiError, InvalidRequest, RequestTooLarge
from processors.filenames import filename_strip

# Reads for part headers, small fields and what follows the file part (the file's own bytes
# are read straight into part buffers, see read_body_into).
READ_SIZE = 64 * 1024
MAX_PART_HEADER_BYTES = 16 * 1024
MAX_FIELD_BYTES = 64 * 1024
MAX_PARTS = 16
# Multipart framing, small fields and headers around a file never need more than this; a
# declared Content-Length beyond limit + slack can be refused before reading anything.
FRAMING_SLACK_BYTES = 1024 * 1024
DRAIN_CHUNKED_BYTES = 4 * 1024 * 1024
DRAIN_READ_BYTES = 1024 * 1024

_MEDIA_TYPE = re.compile(r"^[a-z0-9!#$&^_.+-]{1,127}/[a-z0-9!#$&^_.+-]{1,127}$")

FILE_FIELD = "file"
KNOWN_FIELDS = {"expires_in_seconds"}


class Part:
    def __init__(self, *, name: str, filename: str | None, content_type: str | None):
        self.name = name
        self.filename = filename
        self.content_type = content_type


class MultipartReader:
    """Reads one multipart body part by part. Each part's body must be consumed (or skipped)
    before the next one is read; the reader enforces that by construction."""

    def __init__(self, stream, *, boundary: bytes, content_length: int | None, read_size: int = READ_SIZE):
        self._stream = stream
        self._stream_readinto = getattr(stream, "readinto", None)
        self._read_size = read_size
        self._remaining = content_length
        self._buffer = b""
        self._eof = False
        self._dash_boundary = b"--" + boundary
        self._delimiter = b"\r\n--" + boundary
        self._started = False
        self._finished = False
        self._part_ended = False
        self.bytes_read = 0
        self.content_length = content_length

    # --- low level --------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Append one read to the buffer; False at end of body."""
        if self._eof:
            return False
        size = self._read_size if self._remaining is None else min(self._read_size, self._remaining)
        try:
            data = self._stream.read(size) if size > 0 else b""
        except OSError:
            # The client went away (or the server's reader gave up) mid-body.
            data = b""
        except ApiError:
            raise  # e.g. RequestTimeout (408) from the ASGI layout's idle body timeout
        except Exception as exc:  # noqa: BLE001 — the server's own framing errors, e.g. gunicorn's InvalidChunkSize
            raise InvalidRequest(f"Malformed request body: {type(exc).__name__}.")
        if not data:
            self._eof = True
            return False
        self.bytes_read += len(data)
        if self._remaining is not None:
            self._remaining -= len(data)
        self._buffer = self._buffer + data if self._buffer else data
        return True

    def _raw_readinto(self, view: memoryview) -> int:
        """One read from the body straight into `view` (no intermediate bytes object when the
        stream has readinto); 0 at the end of the body."""
        if self._eof:
            return 0
        if self._remaining is not None:
            if self._remaining <= 0:
                self._eof = True
                return 0
            if len(view) > self._remaining:
                view = view[: self._remaining]
        try:
            if self._stream_readinto is not None:
                count = self._stream_readinto(view)
            else:
                data = self._stream.read(len(view))
                count = len(data)
                view[:count] = data
        except OSError:
            count = 0  # the client went away (or the server's reader gave up) mid-body
        except ApiError:
            raise  # e.g. the server's 408 for a stalled body
        except Exception as exc:  # noqa: BLE001 — the server's own framing errors, as in _fill
            raise InvalidRequest(f"Malformed request body: {type(exc).__name__}.")
        if not count:
            self._eof = True
            return 0
        self.bytes_read += count
        if self._remaining is not None:
            self._remaining -= count
        return count

    def _read_until(self, marker: bytes, *, limit: int, what: str) -> bytes:
        while True:
            index = self._buffer.find(marker)
            if index > limit:
                # Also when the whole of it arrived in one read: the limit is on the data.
                raise InvalidRequest(f"Malformed multipart body: {what} is too long.")
            if index >= 0:
                found, self._buffer = self._buffer[:index], self._buffer[index + len(marker) :]
                return found
            if len(self._buffer) > limit:
                raise InvalidRequest(f"Malformed multipart body: {what} is too long.")
            if not self._fill():
                raise InvalidRequest(f"Malformed multipart body: truncated {what}.")

    def _need(self, count: int) -> bool:
        while len(self._buffer) < count:
            if not self._fill():
                return False
        return True

    @property
    def consumed(self) -> int:
        """Bytes of the body already parsed (read minus buffered)."""
        return self.bytes_read - len(self._buffer)

    # --- parts ------------------------------------------------------------------------------

    def next_part(self) -> Part | None:
        """Headers of the next part, or None after the closing delimiter."""
        if self._finished:
            return None
        self._part_ended = False
        if not self._started:
            # Skip a preamble up to the first dash-boundary.
            self._read_until(self._dash_boundary, limit=MAX_PART_HEADER_BYTES, what="preamble")
            self._started = True
        if not self._need(2):
            raise InvalidRequest("Malformed multipart body: truncated after a boundary.")
        if self._buffer.startswith(b"--"):
            self._finished = True
            self._buffer = b""
            return None
        # Transport padding (spaces/tabs) may precede the CRLF that ends a delimiter line.
        line = self._read_until(b"\r\n", limit=1024, what="boundary line")
        if line.strip(b" \t"):
            raise InvalidRequest("Malformed multipart body: garbage after a boundary.")
        raw_headers = self._read_until(b"\r\n\r\n", limit=MAX_PART_HEADER_BYTES, what="part header")
        return self._parse_headers(raw_headers)

    def _parse_headers(self, raw: bytes) -> Part:
        headers = {}
        for line in raw.split(b"\r\n"):
            if not line:
                continue
            name, sep, value = line.partition(b":")
            if not sep:
                raise InvalidRequest("Malformed multipart body: bad part header line.")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("utf-8", "replace")
        disposition = headers.get("content-disposition")
        if not disposition:
            raise InvalidRequest("Malformed multipart body: a part has no Content-Disposition.")
        kind, params = parse_header_parameters(disposition)
        if kind.lower() != "form-data" or "name" not in params:
            raise InvalidRequest("Malformed multipart body: parts must be form-data with a name.")
        content_type = headers.get("content-type")
        if content_type:
            content_type = parse_header_parameters(content_type)[0].lower() or None
        return Part(name=params["name"], filename=params.get("filename"), content_type=content_type)

    def iter_body(self) -> Iterator[bytes]:
        """The current part's bytes, in chunks of at most about READ_SIZE."""
        delimiter = self._delimiter
        keep = len(delimiter) - 1
        while True:
            index = self._buffer.find(delimiter)
            if index >= 0:
                chunk, self._buffer = self._buffer[:index], self._buffer[index + len(delimiter) :]
                if chunk:
                    yield chunk
                return
            if len(self._buffer) > keep:
                # Everything but a possible delimiter prefix at the end is part data.
                chunk, self._buffer = self._buffer[:-keep], self._buffer[-keep:]
                yield chunk
            if not self._fill():
                raise InvalidRequest("Malformed multipart body: the body ended inside a part.")

    def read_body_into(self, buffer: bytearray, start: int, end: int) -> int:
        """Put the next bytes of the current part into buffer[start:end] and return how many;
        0 once the part has ended. The body is read straight into `buffer`: the delimiter is
        searched for in place, and only a possible delimiter prefix at the end (a few dozen
        bytes) is held back for the next call."""
        delimiter = self._delimiter
        size = len(delimiter)
        if end - start <= 2 * size:
            return self._read_body_into_small(buffer, start, end)
        while True:
            if self._part_ended:
                return 0
            pos = start
            if self._buffer:
                take = min(len(self._buffer), end - start)
                buffer[start : start + take] = self._buffer[:take]
                self._buffer = self._buffer[take:]
                pos += take
            at_end = False
            if pos < end and not self._buffer:
                count = self._raw_readinto(memoryview(buffer)[pos:end])
                at_end = count == 0
                pos += count
            index = buffer.find(delimiter, start, pos)
            if index >= 0:
                self._buffer = bytes(buffer[index + size : pos]) + self._buffer
                self._part_ended = True
                return index - start
            if at_end:
                raise InvalidRequest("Malformed multipart body: the body ended inside a part.")
            hold = min(size - 1, pos - start)
            if hold:
                self._buffer = bytes(buffer[pos - hold : pos]) + self._buffer
            if pos - hold > start:
                return pos - hold - start

    def _read_body_into_small(self, buffer: bytearray, start: int, end: int) -> int:
        """read_body_into for a region too small to tell part bytes from a delimiter in place
        (the last few bytes of a part buffer): through our own buffer, as iter_body does."""
        delimiter = self._delimiter
        keep = len(delimiter) - 1
        while not self._part_ended:
            index = self._buffer.find(delimiter)
            if index >= 0:
                take = min(index, end - start)
                buffer[start : start + take] = self._buffer[:take]
                if take == index:
                    self._buffer = self._buffer[index + len(delimiter) :]
                    self._part_ended = True
                else:
                    self._buffer = self._buffer[take:]
                return take
            if len(self._buffer) > keep:
                take = min(len(self._buffer) - keep, end - start)
                buffer[start : start + take] = self._buffer[:take]
                self._buffer = self._buffer[take:]
                return take
            if not self._fill():
                raise InvalidRequest("Malformed multipart body: the body ended inside a part.")
        return 0

    def discard_rest(self) -> None:
        """Read and drop what the client is still sending, so that it gets to read our early
        413 instead of a reset connection (HTTP clients send the whole body before reading).
        Bounded: a declared length was already checked against the limit plus slack; a
        chunked body is drained only up to DRAIN_CHUNKED_BYTES."""
        self._buffer = b""
        budget = None if self._remaining is not None else DRAIN_CHUNKED_BYTES
        scratch = memoryview(bytearray(DRAIN_READ_BYTES))
        while count := self._raw_readinto(scratch):
            if budget is not None:
                budget -= count
                if budget <= 0:
                    break

    def read_field(self) -> bytes:
        data = b""
        for chunk in self.iter_body():
            data += chunk
            if len(data) > MAX_FIELD_BYTES:
                raise InvalidRequest("Malformed multipart body: a form field is too large.")
        return data

    def skip_part(self) -> None:
        for _ in self.iter_body():
            pass


def boundary_from_content_type(content_type: str) -> bytes:
    kind, params = parse_header_parameters(content_type or "")
    if kind.lower() != "multipart/form-data":
        raise InvalidRequest("Upload with Content-Type multipart/form-data and one part named `file`.")
    boundary = params.get("boundary", "")
    if not boundary or len(boundary) > 200:
        raise InvalidRequest("Malformed multipart Content-Type: missing or invalid boundary.")
    try:
        return boundary.encode("ascii")
    except UnicodeEncodeError:
        raise InvalidRequest("Malformed multipart Content-Type: the boundary must be ASCII.")


def request_body_stream(django_request) -> tuple[object, int | None]:
    """The raw body stream and its declared length (None for a chunked body), read by the fastest
    reader the server allows (counted in mango_file_upload_bodies_total by reader).

    Django reads a request without Content-Length as empty; servers that de-chunk the body
    (gunicorn sets wsgi.input_terminated; under config.asgi the ASGI server does, and a2wsgi's
    input ends where the body ends) let us read it to the end instead.
    """
    environ = django_request.META
    raw_length = environ.get("CONTENT_LENGTH")
    if raw_length not in (None, ""):
        try:
            length = int(raw_length)
        except ValueError:
            raise InvalidRequest("Invalid Content-Length.")
        if length < 0:
            raise InvalidRequest("Invalid Content-Length.")
        stream = (
            GunicornSocketBody.of(django_request)
            or SocketBody.of(django_request)
            or AsgiReceiveBody.of(django_request)
            or django_request
        )
    elif environ.get("wsgi.input_terminated") or "asgi.scope" in environ:
        stream, length = AsgiReceiveBody.of(django_request) or environ["wsgi.input"], None
    else:
        return django_request, 0
    metrics.FILE_UPLOAD_BODIES.labels(READER_NAMES.get(type(stream), "wsgi_input")).inc()
    return stream, length


class _BufferedBody:
    """What both fast body readers share: bytes already received but not yet returned are served
    first, and read() is readinto() into a fresh buffer."""

    _pending: bytes | memoryview

    def _serve_pending(self, view: memoryview) -> int:
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def readinto(self, view: memoryview) -> int:
        raise NotImplementedError

    def read(self, size: int) -> bytes:
        buffer = bytearray(size)
        count = self.readinto(memoryview(buffer))
        return bytes(buffer[:count])


class GunicornSocketBody(_BufferedBody):
    """readinto() straight from the client socket, for a gunicorn request body of known length.

    gunicorn's body reader, Django's LimitedStream and a bytes-based parser would each copy the
    bytes into a new object (a fresh allocation of about a MiB per read, which costs page faults
    too); here they land in the caller's buffer with the kernel's one copy. Bytes gunicorn has
    already buffered are served first, and gunicorn's own count of what is left is kept exact,
    so that it still knows where the next request on the connection starts."""

    def __init__(self, body):
        self._body = body
        self._reader = body.reader
        self._unreader = body.reader.unreader
        self._sock = self._unreader.sock
        # Read ahead by gunicorn but not yet returned by Body.read (already counted off the
        # reader's length), then read from the socket but not yet returned by the reader.
        self._pending = body.buf.getvalue() + self._unreader.buf.getvalue()
        self._from_socket = self._reader.length - len(self._unreader.buf.getvalue())
        body.buf = io.BytesIO()
        self._unreader.buf = io.BytesIO()
        self._reader.length = self._from_socket

    @classmethod
    def of(cls, django_request) -> "GunicornSocketBody | None":
        """The fast reader when the body is gunicorn's, of known length and still unread."""
        body = django_request.META.get("wsgi.input")
        try:
            from gunicorn.http.body import Body, LengthReader
            from gunicorn.http.unreader import SocketUnreader
        except ImportError:
            return None
        if type(body) is not Body or type(body.reader) is not LengthReader:
            return None
        if type(body.reader.unreader) is not SocketUnreader:
            return None
        stream = getattr(django_request, "_stream", None)
        if getattr(stream, "_pos", None) != 0 or hasattr(django_request, "_body"):
            return None
        return cls(body)

    def readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        size = min(len(view), self._from_socket)
        if size <= 0:
            return 0
        try:
            count = self._sock.recv_into(view, size)
        except Exception:
            self._body.failed = True
            raise
        self._from_socket -= count
        self._reader.length = self._from_socket
        return count


class AsgiReceiveBody(_BufferedBody):
    """readinto() from the ASGI messages behind a2wsgi's wsgi.input (config.asgi serves uploads
    through a2wsgi). a2wsgi's own read() gathers messages into a bytearray and slices a new
    bytes object out of it for each read; here each message's bytes are copied once, into the
    caller's buffer. As core.serving's wrapper does for every read, the thread's database
    connections are released before waiting for the client; the receive channel's own errors
    (408 for a stalled body) propagate."""

    def __init__(self, body):
        self._body = body
        self._pending = memoryview(b"")

    @classmethod
    def of(cls, django_request) -> "AsgiReceiveBody | None":
        """The fast reader when the body is a2wsgi's (behind core.serving's wrapper) and still
        unread."""
        stream = _unread_asgi_body(django_request)
        return cls(stream) if stream is not None else None

    def readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        if not self._body._has_more:
            return 0
        _release_database_connections()
        return asyncio.run_coroutine_threadsafe(self._receive_into(view), loop=self._body.loop).result()

    async def _receive_into(self, view: memoryview) -> int:
        """On the event loop: messages into `view` until it is full or the body ends, so that
        one hop between this thread and the loop carries many messages (uvicorn hands the body
        over in pieces of about 64 KiB)."""
        body = self._body
        filled = 0
        while filled < len(view) and body._has_more:
            message = await body.receive()
            body._has_more = message.get("more_body", False)
            data = message.get("body", b"")
            take = min(len(data), len(view) - filled)
            view[filled : filled + take] = memoryview(data)[:take]
            filled += take
            if take < len(data):
                self._pending = memoryview(data)[take:]
        return filled


class SocketBody(_BufferedBody):
    """readinto() straight from the client's socket, for a body of known length under config.asgi
    (config/uvicorn.py hands the connection over: its `mango.body` extension, BodySocket).

    On the event loop each 256 KiB read of the body passed through httptools, uvicorn's body
    buffer, a bytes copy per ASGI message and a hop to this thread before being copied into the
    part buffer (~0.5 CPU s/GB, bench/files_throughput.py); here the kernel copies the bytes
    into the caller's buffer and nothing else touches them. The thread waits for the socket
    itself: nothing for MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS is the same 408 as on the loop, and
    the thread's database connections are released before each wait."""

    def __init__(self, body_socket, head: bytes, *, idle_seconds: float):
        self._socket = body_socket
        self._pending = memoryview(head)
        self._idle_seconds = idle_seconds

    @classmethod
    def of(cls, django_request) -> "SocketBody | None":
        """The socket reader when the server offers the connection and the body is still unread
        (one hop to the event loop to take it over)."""
        scope = django_request.META.get("asgi.scope") or {}
        body_socket = scope.get("extensions", {}).get("mango.body")
        stream = _unread_asgi_body(django_request) if body_socket is not None else None
        if stream is None or not stream._has_more:
            return None

        async def take():
            return body_socket.take()

        taken = asyncio.run_coroutine_threadsafe(take(), loop=stream.loop).result()
        if taken is None:
            return None
        return cls(body_socket, taken[0], idle_seconds=settings.MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS)

    def readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        while True:
            try:
                return self._socket.read_into(view)
            except BlockingIOError:
                pass
            _release_database_connections()
            if not self._socket.wait_readable(self._idle_seconds):
                from core.serving import body_timeout

                raise body_timeout(self._idle_seconds)


def _unread_asgi_body(django_request):
    """a2wsgi's wsgi.input (behind core.serving's wrapper) when nothing of it was read yet."""
    try:
        from a2wsgi.wsgi import Body
    except ImportError:
        return None
    from core import serving

    stream = django_request.META.get("wsgi.input")
    if type(stream) is serving._ReleasingInput:
        stream = stream._stream
    if type(stream) is not Body or stream.buffer:
        return None
    django_stream = getattr(django_request, "_stream", None)
    if getattr(django_stream, "_pos", 0) != 0 or hasattr(django_request, "_body"):
        return None
    return stream


def _release_database_connections() -> None:
    from core.serving import release_database_connections

    release_database_connections()


READER_NAMES = {GunicornSocketBody: "gunicorn_socket", SocketBody: "socket", AsgiReceiveBody: "asgi_messages"}


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
    stream, content_length = request_body_stream(django_request)
    check_declared_length(content_length, max_bytes=max_bytes)
    reader = MultipartReader(stream, boundary=boundary, content_length=content_length)
    form = UploadForm(reader, boundary=boundary)
    form.read_until_file()
    try:
        check_remaining_length(reader, boundary=boundary, max_bytes=max_bytes)
    except RequestTooLarge:
        reader.discard_rest()
        raise
    return form
