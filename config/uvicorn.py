"""The uvicorn worker class `make run` serves with (config/gunicorn.conf.py): uvicorn's, except

- its event streams end cleanly when it shuts down (StreamEndingServer);
- every request's scope offers the `mango.splice` extension (SpliceSink): config.downloads moves
  a File download's body from the object store's socket to the client's with splice(2);
- a request with a Content-Length body offers the `mango.body` extension (BodySocket): an upload
  (files/uploads.py's SocketBody) reads the body in its own thread straight from the client's
  socket into its part buffers, instead of through the event loop, httptools and three copies;
  the connection is handed back afterwards (keep-alive, pipelining) with a fresh parser;
- a request its HTTP parser rejects — e.g. a chunked upload with an invalid chunk size — is
  answered with the API's JSON error envelope (core/errors.py) instead of uvicorn's plain-text 400.
  The app never sees such a request's rest, and nothing it started is kept (an upload whose body
  breaks off is discarded);
- a request line and headers longer than MAX_HEAD_BYTES are refused with 431 and the connection
  closed: uvicorn's httptools parser has no such limit and would buffer a header of any size (a
  client sending one 200 MB header grew a worker by 230 MB);
- a connection that has not sent a whole request head MANGO_HEADER_TIMEOUT_SECONDS after it
  opened (or after its previous response) gets 408 and is closed: uvicorn waits forever for a
  new connection's first request, so silent or trickling connections would pile up unbounded."""

import asyncio
import os
import select
import sys
import threading

import httptools
from gunicorn.arbiter import Arbiter
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker

from core.bodies import content_length


class SpliceSink:
    """The client connection of one response, for a body written to it directly (splice(2))
    rather than through send(): `client_socket()` once what send() queued has gone out (a dup
    of the connection's descriptor: it stays this connection's even if uvicorn closes its
    own), `sent(n)` to count those bytes against the response's Content-Length."""

    def __init__(self, cycle):
        self._cycle = cycle

    async def client_socket(self) -> int | None:
        cycle = self._cycle
        # Only a response framed by Content-Length, whose head send() has written.
        if not cycle.response_started or cycle.chunked_encoding is not False or cycle.scope["method"] == "HEAD":
            return None
        while cycle.transport.get_write_buffer_size() and not cycle.disconnected:
            await asyncio.sleep(0.001)
        sock = cycle.transport.get_extra_info("socket")
        if cycle.disconnected or cycle.transport.is_closing() or sock is None:
            return None
        return os.dup(sock.fileno())

    def sent(self, count: int) -> None:
        self._cycle.expected_content_length -= count
        self._cycle.scope["mango.spliced_bytes"] = self._cycle.scope.get("mango.spliced_bytes", 0) + count


class BodySocket:
    """The client connection of one request whose body (framed by Content-Length) a thread reads
    itself: `take()` on the loop pauses the transport and hands over the bytes already parsed and
    a dup of the socket's descriptor; the thread reads the rest with read_into(); `give_back()`
    returns the connection to uvicorn — when the thread read the last byte, else (it stopped
    early: an error, a 413) when the response starts, the rest of the body then being read and
    dropped as it arrives, so the client still gets the response and the connection stays usable.

    uvicorn's parser never sees the bytes the thread read: it is replaced by a fresh one for the
    connection's next request. A request whose body already arrived whole, a chunked one, a
    pipelined one or one over TLS is not handed over (take() returns None)."""

    def __init__(self, protocol: "EnvelopeHttpToolsProtocol", cycle, length: int):
        self._protocol = protocol
        self._cycle = cycle
        self._length = length
        self._lock = threading.Lock()  # the descriptor is closed only between two reads
        self._fd: int | None = None
        self._taken = False
        self.remaining = 0  # bytes of the body still on the socket, once taken

    def take(self) -> tuple[bytes, int] | None:
        """On the loop: (the body bytes already received, how many more follow on the socket)."""
        protocol, cycle = self._protocol, self._cycle
        remaining = self._length - protocol.body_fed
        if (
            self._taken
            or protocol.cycle is not cycle
            or protocol.scheme != "http"
            or cycle.disconnected
            or cycle.response_started
            or not cycle.more_body
            or remaining <= 0
            or protocol.transport.is_closing()
        ):
            return None
        sock = protocol.transport.get_extra_info("socket")
        if sock is None:
            return None
        if cycle.waiting_for_100_continue:
            protocol.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        protocol.flow.pause_reading()
        self._fd = os.dup(sock.fileno())
        self._taken = True
        self.remaining = remaining
        protocol.body_socket = self
        head, cycle.body = bytes(cycle.body), bytearray()
        return head, remaining

    def read_into(self, view: memoryview) -> int:
        """In the reading thread: one non-blocking read into `view` (at most what is left of the
        body); BlockingIOError when nothing is there yet, 0 at the end or once given back."""
        with self._lock:
            if self._fd is None or not self.remaining:
                return 0
            count = os.readv(self._fd, [view[: self.remaining]])
            self.remaining -= count
            if not self.remaining:
                self._close()
                self._protocol.loop.call_soon_threadsafe(self.give_back)
            return count

    def wait_readable(self, timeout: float) -> bool:
        """In the reading thread: whether bytes (or the end) arrived within `timeout` seconds."""
        fd = self._fd
        if fd is None:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def give_back(self) -> None:
        """On the loop: uvicorn reads the connection again (idempotent)."""
        protocol = self._protocol
        if protocol.body_socket is not self:
            return
        protocol.body_socket = None
        with self._lock:
            self._close()
            skip = self.remaining
        protocol.new_parser(skip=skip)
        self._cycle.more_body = False
        self._cycle.message_event.set()
        if not protocol.transport.is_closing():
            protocol.flow.resume_reading()

    def guard(self, cycle) -> None:
        """Wrap the cycle's send() and receive(): the connection is given back before a response
        starts, and the loop never reads the socket (receive() would resume reading) while a
        thread does."""
        send, receive = cycle.send, cycle.receive

        async def guarded_send(message):
            if message["type"] == "http.response.start" and self._protocol.body_socket is self:
                self.give_back()
            await send(message)

        async def guarded_receive():
            if self._protocol.body_socket is self:
                raise RuntimeError("the request body is being read from the socket by a thread")
            return await receive()

        cycle.send, cycle.receive = guarded_send, guarded_receive


# The request line and headers of one request (nginx's default large_client_header_buffers is
# 4 x 8 KiB; a browser's cookies and an SDK's headers are far below this).
MAX_HEAD_BYTES = 64 * 1024


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    _in_head = True  # between a request's first byte and the end of its headers
    _head_bytes = 0
    _head_timer: asyncio.TimerHandle | None = None
    body_fed = 0  # body bytes of the current request the parser has seen
    body_socket: BodySocket | None = None  # a body being read by a thread
    _skip = 0  # bytes of a handed-back body left unread: dropped as they arrive

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        from django.conf import settings  # Django is set up once the app is loaded

        if self._head_timer is None:
            self._head_timer = self.loop.call_later(settings.MANGO_HEADER_TIMEOUT_SECONDS, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._send_error(408, "Request Timeout", "the request line and headers did not arrive in time")

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._start_head_timer()  # the next request's head (or uvicorn's keep-alive timeout first)

    def _start_asgi_task(self, cycle, app) -> None:
        extensions = cycle.scope.setdefault("extensions", {})
        extensions["mango.splice"] = SpliceSink(cycle)
        length = _content_length(cycle.scope)
        if length and cycle.more_body:
            body = extensions["mango.body"] = BodySocket(self, cycle, length)
            body.guard(cycle)
        super()._start_asgi_task(cycle, app)

    def new_parser(self, *, skip: int) -> None:
        """A fresh parser for the connection's next request, after a body read by a thread
        (`skip`: bytes of that body still to come, dropped)."""
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._skip = skip

    def on_body(self, body: bytes) -> None:
        self.body_fed += len(body)
        super().on_body(body)

    def data_received(self, data: bytes) -> None:
        if self._skip:
            self._unset_keepalive_if_required()
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
            if not data:
                return
        super().data_received(data)
        # Counted after the parser took the bytes: at most MAX_HEAD_BYTES plus one read is held.
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._send_error(
                    431,
                    "Request Header Fields Too Large",
                    f"the request line and headers exceed {MAX_HEAD_BYTES} bytes",
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.body_fed = 0
        self._in_head, self._head_bytes = True, 0
        self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        self._send_error(400, "Bad Request", f"Malformed HTTP request: {msg}")

    def _send_error(self, status: int, reason: str, message: str) -> None:
        from core.errors import InvalidRequest, error_json, new_request_id  # Django is set up once the app is loaded

        request_id = new_request_id()
        error = InvalidRequest(message)
        error.status = status
        body = error_json(error, request_id)
        content = [f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"request-id: " + request_id.encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


def _content_length(scope) -> int | None:
    """The request body's Content-Length, unless it is chunked (or absent, invalid, repeated)."""
    lengths = [value for name, value in scope["headers"] if name == b"content-length"]
    if len(lengths) != 1 or any(name == b"transfer-encoding" for name, _ in scope["headers"]):
        return None
    return content_length(lengths[0])


class StreamEndingServer(Server):
    """uvicorn's server, except that on shutdown (SIGTERM, a deploy, GUNICORN_MAX_REQUESTS) it
    stops accepting first and then ends this process's event streams as complete responses, so
    their clients reconnect to another worker and resume from the events list at once, instead of
    being cut off when GUNICORN_GRACEFUL_TIMEOUT runs out (an open stream never finishes)."""

    async def shutdown(self, sockets=None) -> None:
        from sessions.streams.hub import end_streams  # Django is set up once the app is loaded

        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        end_streams()
        await super().shutdown(sockets)


class MangoUvicornWorker(UvicornWorker):
    CONFIG_KWARGS = {"loop": "auto", "http": "config.uvicorn:EnvelopeHttpToolsProtocol"}

    async def _serve(self) -> None:
        # UvicornWorker._serve with the server above.
        self.config.app = self.wsgi
        server = StreamEndingServer(config=self.config)
        self._install_sigquit_handler()
        # The listeners' own socket objects, not gunicorn's wrappers: uvloop detaches a
        # socket.socket when it closes its server (closing the descriptor itself), but closes
        # anything else again, which gunicorn's wrapper logs as "Bad file descriptor".
        await server.serve(sockets=[listener.sock for listener in self.sockets])
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
