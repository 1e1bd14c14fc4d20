"""A streaming multipart/form-data reader, with bounded memory and no temp files.

Django's MultiPartParser would spool a file part to a temporary file, and it puts a part without
a filename (what the SDK sends for raw bytes) into request.POST, in memory. This reader pulls the
body from any stream with read(size) (and readinto(view), when it has one: a core.bodies
RequestBody) in bounded reads and hands each part's bytes to the caller as they arrive: as
chunks, or read straight into the caller's buffer. It knows nothing of fields, names or files:
files/uploads.py reads the Files API's form with it.
"""

from collections.abc import Iterator

from django.utils.http import parse_header_parameters

from core.errors import ApiError, InvalidRequest

# Reads for part headers, small fields and what follows the file part (the file's own bytes
# are read straight into part buffers, see read_body_into).
READ_SIZE = 64 * 1024
MAX_PART_HEADER_BYTES = 16 * 1024
MAX_FIELD_BYTES = 64 * 1024
DRAIN_CHUNKED_BYTES = 4 * 1024 * 1024
DRAIN_READ_BYTES = 1024 * 1024


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
