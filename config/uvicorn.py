"""The uvicorn worker class `make run` serves with (config/gunicorn.conf.py): uvicorn's, except

- its event streams end cleanly when it shuts down (StreamEndingServer);
- every request's scope offers the `mango.splice` extension (SpliceSink): core.wsgi_files moves
  a File download's body from the object store's socket to the client's with splice(2);
- a request its HTTP parser rejects — e.g. a chunked upload with an invalid chunk size — is
answered with the API's JSON error envelope (core/errors.py) instead of uvicorn's plain-text 400.
The app never sees such a request's rest, and nothing it started is kept (an upload whose body
breaks off is discarded)."""

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


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
    def _start_asgi_task(self, cycle, app) -> None:
        cycle.scope.setdefault("extensions", {})["mango.splice"] = SpliceSink(cycle)
        super()._start_asgi_task(cycle, app)

    def send_400_response(self, msg: str) -> None:
        from core.errors import error_body  # Django is set up once the app is loaded

        request_id = f"req_{uuid.uuid4().hex}"
        body = json.dumps(
            error_body(
                status=400,
                type="invalid_request_error",
                message=f"Malformed HTTP request: {msg}",
                details=None,
                request_id=request_id,
            )
        ).encode()
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
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
