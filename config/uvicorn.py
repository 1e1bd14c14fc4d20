"""The uvicorn worker class `make run` serves with (config/gunicorn.conf.py): uvicorn's, except

- its event streams end cleanly when it shuts down (StreamEndingServer);
- every request's scope offers the `mango.splice` extension (SpliceSink): core.wsgi_files moves
  a File download's body from the object store's socket to the client's with splice(2);
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
import json
import os
import sys
import uuid

from gunicorn.arbiter import Arbiter
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker


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


# The request line and headers of one request (nginx's default large_client_header_buffers is
# 4 x 8 KiB; a browser's cookies and an SDK's headers are far below this).
MAX_HEAD_BYTES = 64 * 1024


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    _in_head = True  # between a request's first byte and the end of its headers
    _head_bytes = 0
    _head_timer: asyncio.TimerHandle | None = None

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
        cycle.scope.setdefault("extensions", {})["mango.splice"] = SpliceSink(cycle)
        super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
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
        self._in_head, self._head_bytes = True, 0
        self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        self._send_error(400, "Bad Request", f"Malformed HTTP request: {msg}")

    def _send_error(self, status: int, reason: str, message: str) -> None:
        from core.errors import error_body  # Django is set up once the app is loaded

        request_id = f"req_{uuid.uuid4().hex}"
        body = json.dumps(
            error_body(
                status=status, type="invalid_request_error", message=message, details=None, request_id=request_id
            )
        ).encode()
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
        await server.serve(sockets=self.sockets)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
