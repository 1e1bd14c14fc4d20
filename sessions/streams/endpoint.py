"""The ASGI view of `GET /v1/sessions/{id}/events/stream` (config/asgi.py routes the path here),
and the small ASGI helpers the upload gate shares (`meta_from_scope`, `send_error`)."""

import asyncio
import contextlib
import logging
from urllib.parse import parse_qs

from django.conf import settings

from core import caps
from core.api import require_beta
from core.auth import api_key_authenticate_meta
from core.errors import (
    ApiError,
    InvalidRequest,
    ServiceUnavailable,
    api_error_for,
    error_json,
    new_request_id,
    scope_request_id,
)
from core.serving import db_call
from sessions.queue.auth import worker_credential_authenticate
from sessions.selectors import session_get, session_thread_get
from sessions.streams.hub import draining, event_frames

logger = logging.getLogger(__name__)

STREAM_PATH_PREFIX = "/v1/sessions/"
DELTA_KINDS = ("agent.message", "agent.thinking")

_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def _stream_target(path: str) -> tuple[str, str | None] | None:
    """(session id, thread id or None) of a stream path: /v1/sessions/{id}/events/stream or
    /v1/sessions/{id}/threads/{thread_id}/stream; None for any other path."""
    if not path.startswith(STREAM_PATH_PREFIX):
        return None
    parts = path[len(STREAM_PATH_PREFIX) :].split("/")
    if len(parts) == 3 and parts[0] and parts[1:] == ["events", "stream"]:
        return parts[0], None
    if len(parts) == 4 and parts[0] and parts[1] == "threads" and parts[2] and parts[3] == "stream":
        return parts[0], parts[2]
    return None


def is_stream_request(scope) -> bool:
    return (
        scope.get("type") == "http"
        and scope.get("method") == "GET"
        and _stream_target(scope.get("path", "")) is not None
    )


def meta_from_scope(scope) -> dict:
    """The request headers as WSGI-style META keys (what core.auth reads)."""
    meta = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = "HTTP_" + raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        meta[name] = f"{meta[name]},{value}" if name in meta else value
    return meta


async def send_error(send, error: ApiError, request_id: str | None) -> None:
    """An error envelope straight from the event loop."""
    request_id = request_id or new_request_id()
    body = error_json(error, request_id)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"request-id", request_id.encode()),
        *_SECURITY_HEADERS,
        *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _authenticate(*, meta: dict, path: str) -> str:
    """The caller's workspace: an API key's, or a self-hosted worker's for its session's stream."""
    worker = worker_credential_authenticate(meta, method="GET", path=path)
    if worker is not None:
        return worker[0].id
    return api_key_authenticate_meta(meta).workspace_id


def _session_check(*, workspace_id: str, session_id: str, thread_id: str | None = None) -> str:
    """The session row whose log the stream follows: the session's, or its thread's (a child
    thread of a multiagent session has a log of its own)."""
    session = session_get(workspace=workspace_id, session_id=session_id)
    return session.id if thread_id is None else session_thread_get(session=session, thread_id=thread_id).id


async def _admit(scope) -> tuple[str, list[str], caps.Slot | None]:
    """Headers and query (no I/O), the key (one short read), the workspace's stream cap (Redis),
    the session (one short read). Returns the session id, the delta kinds and the cap slot."""
    if draining():
        raise ServiceUnavailable("This server process is shutting down; retry.", headers={"retry-after": "1"})
    meta = meta_from_scope(scope)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    event_deltas = query.get("event_deltas[]", []) + query.get("event_deltas", [])
    if any(kind not in DELTA_KINDS for kind in event_deltas):
        raise InvalidRequest("event_deltas: only agent.message and agent.thinking.")
    workspace_id = await db_call(_authenticate, meta=meta, path=scope["path"])
    require_beta(meta, settings.MANGO_AGENTS_BETA)
    slot = await caps.gate().take(kind="streams", workspace_id=workspace_id, limit=settings.MANGO_WORKSPACE_MAX_STREAMS)
    try:
        session_id, thread_id = _stream_target(scope["path"])
        session_id = await db_call(
            _session_check, workspace_id=workspace_id, session_id=session_id, thread_id=thread_id
        )
    except BaseException:
        await caps.gate().release(slot)
        raise
    return session_id, event_deltas, slot


async def _pump(send, *, request_id: str, session_id: str, deltas: frozenset[str]) -> None:
    """The response starts only once the stream's start is fixed (its first chunk, `: connected`,
    comes after its feed subscribed and read where the log ends): a client that lists the log
    after the response headers arrive (the SDK's session tool runner does) misses nothing
    appended in between."""
    frames = event_frames(session_id=session_id, deltas=deltas, heartbeat_seconds=settings.MANGO_SSE_HEARTBEAT_SECONDS)
    try:
        first = await anext(frames, b"")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    (b"request-id", request_id.encode()),
                    *_SECURITY_HEADERS,
                ],
            }
        )
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        async for frame in frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
    finally:
        await frames.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def stream_endpoint(scope, receive, send) -> None:
    """The ASGI view: admitted (or an error envelope), then the stream until it ends or the
    client leaves; the cap slot is given back either way."""
    request_id = scope_request_id(scope)
    try:
        session_id, event_deltas, slot = await _admit(scope)
    except Exception as exc:  # noqa: BLE001 — api_error_for logs the unexpected and answers 500
        error = api_error_for(exc, request_id=request_id)
        await send_error(send, error, request_id)
        return
    streamer = asyncio.ensure_future(
        _pump(send, request_id=request_id, session_id=session_id, deltas=frozenset(event_deltas))
    )
    watcher = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({streamer, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (streamer, watcher):
            task.cancel()
        for task in (streamer, watcher):
            with contextlib.suppress(BaseException):
                await task
        await caps.gate().release(slot)
