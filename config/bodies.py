"""The servers' fast request-body readers, installed as the app's `wsgi.input` (a
core.bodies.RequestBody) by the serving layer that knows the server:

- `GunicornBodies` (WSGI middleware, config/wsgi.py): under gunicorn's sync workers, a body of
  known length is read straight from the client socket (GunicornSocketBody);
- `UploadBodies` (WSGI middleware, config/asgi.py's upload path): under uvicorn, a body of known
  length is read by the request's thread straight from the client socket, taken over from the
  event loop through config/uvicorn.py's `mango.body` extension (SocketBody); any other body
  (chunked, already received whole, another ASGI server) comes as the ASGI messages themselves,
  copied once into the reader's buffer (AsgiReceiveBody). config/asgi.py puts the request's
  `receive` and loop in the scope under `mango.receive` for it.

The apps never learn which one they got (they read a RequestBody). What each reads of another
library (gunicorn's Body and reader, uvicorn's cycle, through config/uvicorn.py) is pinned by
tests/test_private_symbols.py.
"""

import asyncio
import io

from django.conf import settings

from core.bodies import RequestBody, content_length
from core.serving import body_timeout, release_database_connections

RECEIVE_KEY = "mango.receive"


class _PendingFirst(RequestBody):
    """Bytes already received but not yet returned are served first."""

    _pending: bytes | memoryview

    def _serve_pending(self, view: memoryview) -> int:
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


class GunicornSocketBody(_PendingFirst):
    """readinto() straight from the client socket, for a gunicorn request body of known length.

    gunicorn's body reader, Django's LimitedStream and a bytes-based parser would each copy the
    bytes into a new object (a fresh allocation of about a MiB per read, which costs page faults
    too); here they land in the caller's buffer with the kernel's one copy. Bytes gunicorn has
    already buffered are served first, and gunicorn's own count of what is left is kept exact,
    so that it still knows where the next request on the connection starts."""

    reader = "gunicorn_socket"

    def __init__(self, body, *, length: int):
        super().__init__(length=length)
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
    def of(cls, environ, *, length: int) -> "GunicornSocketBody | None":
        """The fast reader when the body is gunicorn's, of known length and still unread."""
        from gunicorn.http.body import Body, LengthReader
        from gunicorn.http.unreader import SocketUnreader

        body = environ.get("wsgi.input")
        if type(body) is not Body or type(body.reader) is not LengthReader:
            return None
        if type(body.reader.unreader) is not SocketUnreader:
            return None
        return cls(body, length=length)

    def _readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        size = min(len(view), self._from_socket)
        if size <= 0:
            return 0
        release_database_connections()
        try:
            count = self._sock.recv_into(view, size)
        except Exception:
            self._body.failed = True
            raise
        self._from_socket -= count
        self._reader.length = self._from_socket
        return count


class AsgiReceiveBody(_PendingFirst):
    """readinto() from the request's ASGI messages (`receive`, on `loop`), for a WSGI app served in
    a thread. a2wsgi's own wsgi.input gathers messages into a bytearray and slices a new bytes
    object out of it for each read; here each message's bytes are copied once, into the caller's
    buffer. The thread's database connections are released before waiting for the client; the
    receive channel's own errors (408 for a stalled body) propagate."""

    reader = "asgi_messages"

    def __init__(self, *, loop, receive, length: int | None):
        super().__init__(length=length)
        self._loop = loop
        self._receive = receive
        self._has_more = True
        self._pending = memoryview(b"")

    def _readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        if not self._has_more:
            return 0
        release_database_connections()
        return asyncio.run_coroutine_threadsafe(self._receive_into(view), loop=self._loop).result()

    async def _receive_into(self, view: memoryview) -> int:
        """On the event loop: messages into `view` until it is full or the body ends, so that
        one hop between this thread and the loop carries many messages (uvicorn hands the body
        over in pieces of about 64 KiB)."""
        filled = 0
        while filled < len(view) and self._has_more:
            message = await self._receive()  # (a disconnect ends the body: no more_body)
            self._has_more = message.get("more_body", False)
            data = message.get("body", b"")
            take = min(len(data), len(view) - filled)
            view[filled : filled + take] = memoryview(data)[:take]
            filled += take
            if take < len(data):
                self._pending = memoryview(data)[take:]
        return filled


class SocketBody(_PendingFirst):
    """readinto() straight from the client's socket, for a body of known length under
    config.asgi (config/uvicorn.py hands the connection over: its `mango.body` extension,
    BodySocket).

    On the event loop each 256 KiB read of the body passed through httptools, uvicorn's body
    buffer, a bytes copy per ASGI message and a hop to this thread before being copied into the
    part buffer (~0.5 CPU s/GB, bench/files_throughput.py); here the kernel copies the bytes
    into the caller's buffer and nothing else touches them. The thread waits for the socket
    itself: nothing for MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS is the same 408 as on the loop, and
    the thread's database connections are released before each wait."""

    reader = "socket"

    def __init__(self, body_socket, head: bytes, *, length: int, idle_seconds: float):
        super().__init__(length=length)
        self._socket = body_socket
        self._pending = memoryview(head)
        self._idle_seconds = idle_seconds

    @classmethod
    def of(cls, body_socket, loop, *, length: int) -> "SocketBody | None":
        """The socket reader when the server offers the connection (one hop to the event loop
        to take it over)."""

        async def take():
            return body_socket.take()

        taken = asyncio.run_coroutine_threadsafe(take(), loop=loop).result()
        if taken is None:
            return None
        return cls(body_socket, taken[0], length=length, idle_seconds=settings.MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS)

    def _readinto(self, view: memoryview) -> int:
        if self._pending:
            return self._serve_pending(view)
        while True:
            try:
                return self._socket.read_into(view)
            except BlockingIOError:
                pass
            release_database_connections()
            if not self._socket.wait_readable(self._idle_seconds):
                raise body_timeout(self._idle_seconds)


class GunicornBodies:
    """WSGI middleware: a gunicorn body of known length becomes a GunicornSocketBody."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        length = content_length(environ.get("CONTENT_LENGTH"))
        if length:
            body = GunicornSocketBody.of(environ, length=length)
            if body is not None:
                environ["wsgi.input"] = body
        return self.app(environ, start_response)


class UploadBodies:
    """WSGI middleware under an ASGI-to-WSGI adapter (config/asgi.py): the request's body becomes
    a SocketBody when the server offers the socket, else an AsgiReceiveBody. A body with an
    invalid Content-Length is left to the app (which refuses it)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        scope = environ.get("asgi.scope") or {}
        loop, receive = scope.get(RECEIVE_KEY, (None, None))
        if receive is not None:
            raw = environ.get("CONTENT_LENGTH")
            length = content_length(environ.get("CONTENT_LENGTH"))
            if not raw or length is not None:
                body_socket = scope.get("extensions", {}).get("mango.body")
                body = SocketBody.of(body_socket, loop, length=length) if body_socket and length else None
                environ["wsgi.input"] = body or AsgiReceiveBody(loop=loop, receive=receive, length=length)
        return self.app(environ, start_response)
