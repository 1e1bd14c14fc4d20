"""The request body as the apps read it: the seam between a server's fast reader and the app
(STYLE.md 23), shaped like a raw file.

A serving layer (config/bodies.py) may put a RequestBody in `environ["wsgi.input"]` before the
app runs: then `readinto(view)` fills the caller's buffer with the next bytes of the body (the
kernel's one copy, for a socket reader), `read(size)` returns them, and `length` says how many
there are (None: the server de-chunked the body and it is read to its end). An app that finds
one, unread (`bytes_read == 0`), may read it directly; anything else it reads through Django.

A new server's reader subclasses RequestBody, implements `_readinto`, releases the thread's
database connections before it waits for the client (core.serving.release_database_connections)
and raises core.errors.RequestTimeout when the client stalls; a server error it cannot describe
may propagate (the app answers 400).
"""


class RequestBody:
    """A request body handed to the app by the server layer (module docstring)."""

    # For mango_file_upload_bodies_total: which reader served the body.
    reader = "request_body"

    def __init__(self, *, length: int | None):
        self.length = length
        self.bytes_read = 0

    def readinto(self, view) -> int:
        """Put the next bytes of the body into `view` (a writable buffer); how many, 0 at the end."""
        count = self._readinto(view if type(view) is memoryview else memoryview(view))
        self.bytes_read += count
        return count

    def _readinto(self, view: memoryview) -> int:
        raise NotImplementedError

    def read(self, size: int | None = -1) -> bytes:
        """At most `size` bytes (the rest of the body when negative); b"" at the end."""
        if size is None or size < 0:
            chunks = []
            while chunk := self.read(1024 * 1024):
                chunks.append(chunk)
            return b"".join(chunks)
        buffer = bytearray(size)
        count = self.readinto(buffer)
        del buffer[count:]
        return bytes(buffer)

    def readline(self, size: int | None = -1) -> bytes:
        """One line (at most `size` bytes). A byte at a time: WSGI requires it, the apps' readers
        never use it (Django's LimitedStream wraps wsgi.input with it)."""
        line = bytearray()
        byte = bytearray(1)
        while (size is None or size < 0 or len(line) < size) and self.readinto(byte):
            line += byte
            if byte == b"\n":
                break
        return bytes(line)

    def readable(self) -> bool:
        return True


def content_length(value: bytes | str | None) -> int | None:
    """A Content-Length header's byte count; None when absent or not a plain decimal (a
    request with such a length is refused by whoever reads it)."""
    if not value or not value.isdigit():
        return None
    return int(value)
