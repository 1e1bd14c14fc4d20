"""The uvicorn worker class `make run` serves with (config/gunicorn.conf.py): uvicorn's, except
that a request its HTTP parser rejects — e.g. a chunked upload with an invalid chunk size — is
answered with the API's JSON error envelope (core/errors.py) instead of uvicorn's plain-text 400.
The app never sees such a request's rest, and nothing it started is kept (an upload whose body
breaks off is discarded)."""

import json
import uuid

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker


class EnvelopeHttpToolsProtocol(HttpToolsProtocol):
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


class MangoUvicornWorker(UvicornWorker):
    CONFIG_KWARGS = {"loop": "auto", "http": "config.uvicorn:EnvelopeHttpToolsProtocol"}
