"""The API's ASGI application: what `make run` and the Dockerfile serve (gunicorn with uvicorn
workers, one public port).

- `GET /v1/sessions/{id}/events/stream` → sessions.streams (async: a stream holds no thread and
  no database connection while it waits).
- `GET /v1/environments/{id}/work/poll` → sessions.streams.polls (async: a self-hosted worker's
  long poll holds no thread and no database connection while it waits).
- `POST /v1/files` → Django through a WSGI adapter with a thread pool of its own
  (MANGO_UPLOAD_THREADS), after the workspace's upload cap is checked on the event loop. The
  body is the app's wsgi.input as a core.bodies.RequestBody (config/bodies.py): one of known
  length is read by the upload's thread straight from the client's socket (config/uvicorn.py's
  `mango.body` extension); a chunked one comes as the ASGI messages, in bounded reads: uploads
  keep streaming into the object store with bounded memory and no temp file (Django's own ASGI
  handler would spool the whole body to a temp file first).
- `GET /v1/files/{id}/content` → the same Django in a thread of that pool (MANGO_API_THREADS),
  its object-store stream then sent by config.downloads: chunks queued to the loop without a
  round trip each, the store read stopped as soon as the client goes away.
- everything else → the same Django through another pool (MANGO_API_THREADS).

Downloads and the rest of the API take one of their workspace's places on this process's API
threads first (core.shares: at most MANGO_WORKSPACE_MAX_REQUESTS each, the rest wait on the loop
or get a 429), so no tenant can take every thread; probes and static files do not.

Every request body that stops arriving for MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS ends with a 408.
"""

import asyncio
import logging
import os
import re
import time

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_wsgi = get_wsgi_application()

from a2wsgi import WSGIMiddleware  # noqa: E402 — after Django is set up
from django.conf import settings  # noqa: E402

from config import downloads  # noqa: E402
from config.bodies import RECEIVE_KEY, UploadBodies  # noqa: E402
from core import caps  # noqa: E402
from core.bodies import content_length  # noqa: E402
from core.errors import ApiError  # noqa: E402
from core.serving import ReleaseDatabaseWhileWaiting, idle_limited  # noqa: E402
from core.shares import ANONYMOUS, ShareRefused, shares  # noqa: E402
from sessions.streams import (  # noqa: E402
    is_stream_request,
    is_work_poll_request,
    meta_from_scope,
    send_error,
    stream_endpoint,
    work_poll_endpoint,
)

logger = logging.getLogger(__name__)

UPLOAD_PATH = "/v1/files"
DOWNLOAD_PATH = re.compile(r"^/v1/files/[^/]+/content$")
# Response messages queued between a view's thread and the event loop, per request: with 2 MiB
# download chunks this bounds what a slow reader can pin in memory.
SEND_QUEUE_MESSAGES = 2

_django = ReleaseDatabaseWhileWaiting(django_wsgi)
api_app = WSGIMiddleware(_django, workers=settings.MANGO_API_THREADS, send_queue_size=SEND_QUEUE_MESSAGES)
# Uploads read their body through config/bodies.py's readers (the socket, or the ASGI messages).
upload_app = WSGIMiddleware(
    UploadBodies(_django), workers=settings.MANGO_UPLOAD_THREADS, send_queue_size=SEND_QUEUE_MESSAGES
)


# Served without taking a workspace's place: cheap, and must answer while a tenant is throttled.
UNSHARED_PATHS = ("/healthz", "/readyz", "/metrics", f"/{settings.STATIC_URL.strip('/')}/")


async def _upload(scope, receive, send) -> None:
    """The upload cap is checked before the request gets a thread or a database connection of
    its own (the key's workspace is remembered per process; else one short lookup)."""
    slot = None
    workspace_id = await shares().workspace_of(meta_from_scope(scope))
    if workspace_id != ANONYMOUS:  # else Django answers with the 401 envelope
        try:
            slot = await caps.gate().take(
                kind="uploads", workspace_id=workspace_id, limit=settings.MANGO_WORKSPACE_MAX_UPLOADS
            )
        except ApiError as error:
            await send_error(send, error, None)
            return
    scope[RECEIVE_KEY] = (asyncio.get_running_loop(), receive)
    try:
        await upload_app(scope, receive, send)
    finally:
        await caps.gate().release(slot)


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


access_logger = logging.getLogger("gunicorn.access")


async def _access_logged(app, scope, receive, send) -> None:
    """One access line per request, in the shape of gunicorn's (core.logging renders the atoms as
    JSON fields, with the response's request-id): uvicorn workers do not write gunicorn's."""
    started = time.monotonic()
    response = {"status": "-", "request_id": "-", "bytes": 0}

    async def logged_send(message):
        if message["type"] == "http.response.start":
            response["status"] = str(message["status"])
            for name, value in message.get("headers", []):
                if name == b"request-id":
                    response["request_id"] = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            response["bytes"] += len(message.get("body", b""))
        await send(message)

    try:
        await app(scope, receive, logged_send)
    finally:
        response["bytes"] += scope.get("mango.spliced_bytes", 0)  # a download's body sent by splice(2)
        if access_logger.isEnabledFor(logging.INFO):
            query = scope.get("query_string", b"").decode("latin-1")
            client = scope.get("client") or ("-", 0)
            atoms = {
                "h": client[0],
                "m": scope["method"],
                "U": scope["path"],
                "q": query,
                "r": f"{scope['method']} {scope['path']}{'?' + query if query else ''} HTTP/{scope['http_version']}",
                "s": response["status"],
                "B": str(response["bytes"]),
                "D": str(int((time.monotonic() - started) * 1_000_000)),
                "{request-id}o": response["request_id"],
            }
            access_logger.info('%(h)s "%(r)s" %(s)s %(B)s %(D)sus %({request-id}o)s', atoms)


async def _route(scope, receive, send) -> None:
    if is_stream_request(scope):
        await stream_endpoint(scope, receive, send)
        return
    if is_work_poll_request(scope):
        await work_poll_endpoint(scope, receive, send)
        return
    if scope["method"] == "POST" and scope["path"] == UPLOAD_PATH:
        await _upload(scope, idle_limited(receive, seconds=settings.MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS), send)
        return
    if scope["path"].startswith(UNSHARED_PATHS):
        await _threaded(scope, receive, send)
        return
    current = shares()
    try:
        async with (
            current.share(await current.workspace_of(meta_from_scope(scope))),
            current.body_budget(_body_size(scope)),
        ):
            await _threaded(scope, receive, send)
    except ShareRefused as error:  # refused before it started: nothing was sent yet
        await send_error(send, error, None)


def _body_size(scope) -> int:
    """The request body's declared size; a chunked body counts as the largest one accepted."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return content_length(value) or 0
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return 0


async def _threaded(scope, receive, send) -> None:
    """A request on this process's API threads: a download, or any other Django view."""
    if scope["method"] == "GET" and DOWNLOAD_PATH.match(scope["path"]):
        # The client's next message is its disconnect, however long the download takes.
        await downloads.serve(
            _django,
            api_app.executor,
            scope,
            receive,
            send,
            depth=SEND_QUEUE_MESSAGES,
            splice=settings.MANGO_FILE_DOWNLOAD_SPLICE,
        )
        return
    await api_app(scope, idle_limited(receive, seconds=settings.MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS), send)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        await send({"type": "websocket.close", "code": 1000})
        return
    await _access_logged(_route, scope, receive, send)
