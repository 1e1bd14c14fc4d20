"""`GET /v1/sessions/{id}/events/stream`: a session's live events as SSE, served on the event loop.

A stream holds no thread and no database connection while it waits. Per process (per event loop)
one Redis pub/sub connection carries the wake-ups and delta previews of every followed session,
and one feed per session reads each batch of new events once — in a short call on a small
thread pool that gives its database connection back at once — and fans the encoded frames out to
every stream following that session. Wire format (api-contract.md "SSE framing"): a `: connected`
comment, then `event: <type>\\ndata: <json>\\n\\n` per event, `event: ping` heartbeats after
MANGO_SSE_HEARTBEAT_SECONDS of silence, `event_start` / `event_delta` previews with
`event_deltas[]=agent.message`, and the end after `session.deleted`.

`stream_endpoint` is the ASGI view (config/asgi.py routes the path to it). WSGI-only servers (the
test live server, runserver) reach the same code through `event_stream_view`, which runs it on a
private event loop in the request's thread.
"""

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qs

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse

from core import caps, metrics
from core.api import beta_values
from core.auth import api_key_authenticate_meta
from core.errors import ApiError, AuthenticationFailed, InvalidRequest, error_body, to_api_error
from core.serving import db_call
from sessions import notify
from sessions.models import Session
from sessions.selectors import session_events_after, session_get
from sessions.serializers.events import event_to_wire

logger = logging.getLogger(__name__)

STREAM_PATH_PREFIX = "/v1/sessions/"
STREAM_PATH_SUFFIX = "/events/stream"
# How often a feed re-reads the log without a Redis wake-up (lost publish, Redis down).
STREAM_POLL_SECONDS = 2.0
# Frames a stream may fall behind (a client that stopped reading) before it is ended.
MAX_QUEUED_FRAMES = 5000
EVENT_BATCH = 500
DELTA_KINDS = ("agent.message", "agent.thinking")

_END = None
_CONNECTED = b": connected\n\n"


def _sse(event_type: str, data: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


_PING = _sse("ping", {"type": "ping"})


# --- database reads (each through core.serving.db_call) --------------------------------------------------------


def _authenticate(*, meta: dict) -> str:
    return api_key_authenticate_meta(meta).workspace_id


def _session_check(*, workspace_id: str, session_id: str) -> str:
    return session_get(workspace=workspace_id, session_id=session_id).id


def _last_seq(*, session_id: str) -> int:
    return Session.objects.filter(id=session_id).values_list("last_seq", flat=True).first() or 0


def _frames_after(*, session_id: str, after_seq: int) -> list[tuple[int, str, bytes]]:
    return [
        (event.seq, event.type, _sse(event.type, event_to_wire(event)))
        for event in session_events_after(session_id=session_id, after_seq=after_seq, limit=EVENT_BATCH)
    ]


# --- fan-out ---------------------------------------------------------------------------------


class _Follower:
    """One open stream: frames queued for it, and where it starts (events up to `after_seq`
    existed before it opened and are not sent)."""

    def __init__(self, *, deltas: bool):
        self.deltas = deltas
        self.after_seq: int | None = None
        self.queue: asyncio.Queue = asyncio.Queue()

    def offer(self, item) -> None:
        if self.queue.qsize() >= MAX_QUEUED_FRAMES:
            # The client stopped reading: end its stream rather than buffer without bound.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(_END)
            return
        self.queue.put_nowait(item)


class _Feed:
    """One session's events for every stream following it in this process."""

    def __init__(self, hub: "_Hub", session_id: str):
        self.hub = hub
        self.session_id = session_id
        self.followers: set[_Follower] = set()
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.last_seq = 0
        self.ended = False
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.last_seq = await db_call(_last_seq, session_id=self.session_id)
            last_read = loop.time()
            pending = None
            while not self.ended:
                if pending is not None:
                    (kind, data), pending = pending, None
                else:
                    wait = max(0.0, last_read + STREAM_POLL_SECONDS - loop.time())
                    try:
                        kind, data = await asyncio.wait_for(self.inbox.get(), wait)
                    except TimeoutError:
                        kind, data = "events", None
                if kind == "delta":
                    frame = _delta_frame(data)
                    if frame:
                        for follower in list(self.followers):
                            if follower.deltas:
                                follower.offer((None, frame))
                    continue
                # Wake-ups queued meanwhile are served by this one read (order kept for deltas).
                while not self.inbox.empty():
                    pending = self.inbox.get_nowait()
                    if pending[0] != "events":
                        break
                    pending = None
                last_read = loop.time()
                await self._read()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("event feed ended by an error", extra={"session_id": self.session_id}, exc_info=True)
            self._end()

    async def _read(self) -> None:
        while True:
            try:
                batch = await db_call(_frames_after, session_id=self.session_id, after_seq=self.last_seq)
            except Exception:
                logger.warning("event feed read failed", extra={"session_id": self.session_id}, exc_info=True)
                return
            for seq, event_type, frame in batch:
                self.last_seq = seq
                for follower in list(self.followers):
                    follower.offer((seq, frame))
                if event_type == "session.deleted":
                    self._end()
                    return
            if len(batch) < EVENT_BATCH:
                return

    def _end(self) -> None:
        self.ended = True
        for follower in list(self.followers):
            follower.offer(_END)
        self.hub.drop(self)


def _delta_frame(data) -> bytes | None:
    try:
        preview = json.loads(data if isinstance(data, str) else data.decode())
        return _sse(preview["type"], preview)
    except (ValueError, KeyError, TypeError):
        return None


class _Hub:
    """This event loop's Redis subscription and feeds."""

    def __init__(self):
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=None)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.feeds: dict[str, _Feed] = {}
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task | None = None
        self.events_prefix = notify.events_channel("")
        self.deltas_prefix = notify.deltas_channel("")

    async def follow(self, session_id: str, follower: _Follower) -> _Feed:
        feed = self.feeds.get(session_id)
        if feed is not None:
            feed.followers.add(follower)
            return feed
        feed = self.feeds[session_id] = _Feed(self, session_id)
        feed.followers.add(follower)
        await self._subscribe(session_id)
        feed.start()
        return feed

    def unfollow(self, feed: _Feed, follower: _Follower) -> None:
        feed.followers.discard(follower)
        if not feed.followers:
            if feed.task is not None:
                feed.task.cancel()
            self.drop(feed)

    def drop(self, feed: _Feed) -> None:
        if self.feeds.get(feed.session_id) is feed:
            del self.feeds[feed.session_id]
            asyncio.get_running_loop().create_task(self._unsubscribe(feed.session_id))

    async def _subscribe(self, session_id: str) -> None:
        channels = [notify.events_channel(session_id), notify.deltas_channel(session_id)]
        async with self.lock:
            try:
                await self.pubsub.subscribe(*channels)
            except (redis.RedisError, OSError):
                logger.warning("SSE wake-ups unavailable (Redis); polling", extra={"session_id": session_id})
                return
            if self.reader is None or self.reader.done():
                self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _unsubscribe(self, session_id: str) -> None:
        async with self.lock:
            if session_id in self.feeds:  # followed again meanwhile
                return
            try:
                await self.pubsub.unsubscribe(notify.events_channel(session_id), notify.deltas_channel(session_id))
            except (redis.RedisError, OSError):
                pass

    async def _read(self) -> None:
        while True:
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 — Redis trouble: feeds still poll; reconnect later
                await asyncio.sleep(1.0)
                continue
            if message is None:
                continue
            channel = message["channel"]
            channel = channel.decode() if isinstance(channel, bytes) else channel
            if channel.startswith(self.deltas_prefix):
                feed, kind = self.feeds.get(channel[len(self.deltas_prefix) :]), "delta"
            else:
                feed, kind = self.feeds.get(channel[len(self.events_prefix) :]), "events"
            if feed is not None:
                feed.inbox.put_nowait((kind, message["data"]))

    async def aclose(self) -> None:
        for feed in list(self.feeds.values()):
            if feed.task is not None:
                feed.task.cancel()
        if self.reader is not None:
            self.reader.cancel()
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()
        with contextlib.suppress(Exception):
            await self.redis.aclose()


_hubs: dict[int, _Hub] = {}


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(id(loop))
    if hub is None:
        hub = _hubs[id(loop)] = _Hub()
    return hub


async def event_frames(*, session_id: str, deltas: bool, heartbeat_seconds: float) -> AsyncIterator[bytes]:
    """The SSE bytes of one stream: follows the session before reading where the log ends, so
    nothing appended in between is missed; ends after session.deleted."""
    hub = _hub()
    follower = _Follower(deltas=deltas)
    feed = await hub.follow(session_id, follower)
    metrics.EVENT_STREAMS_OPEN.inc()
    try:
        follower.after_seq = await db_call(_last_seq, session_id=session_id)
        yield _CONNECTED
        loop = asyncio.get_running_loop()
        last_sent = loop.time()
        while True:
            wait = last_sent + heartbeat_seconds - loop.time()
            if wait <= 0:
                last_sent = loop.time()
                yield _PING
                continue
            try:
                item = await asyncio.wait_for(follower.queue.get(), wait)
            except TimeoutError:
                continue
            if item is _END:
                return
            seq, frame = item
            if seq is not None and seq <= follower.after_seq:
                continue
            last_sent = loop.time()
            yield frame
    finally:
        metrics.EVENT_STREAMS_OPEN.dec()
        hub.unfollow(feed, follower)


# --- the ASGI view ---------------------------------------------------------------------------


def is_stream_request(scope) -> bool:
    path = scope.get("path", "")
    return (
        scope.get("type") == "http"
        and scope.get("method") == "GET"
        and path.startswith(STREAM_PATH_PREFIX)
        and path.endswith(STREAM_PATH_SUFFIX)
        and "/" not in path[len(STREAM_PATH_PREFIX) : -len(STREAM_PATH_SUFFIX)]
        and len(path) > len(STREAM_PATH_PREFIX) + len(STREAM_PATH_SUFFIX)
    )


def meta_from_scope(scope) -> dict:
    """The request headers as WSGI-style META keys (what core.auth reads)."""
    meta = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = "HTTP_" + raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        meta[name] = f"{meta[name]},{value}" if name in meta else value
    return meta


_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


async def send_error(send, error: ApiError, request_id: str | None) -> None:
    """An error envelope straight from the event loop."""
    request_id = request_id or f"req_{uuid.uuid4().hex}"
    body = json.dumps(
        error_body(
            status=error.status, type=error.type, message=error.message, details=error.details, request_id=request_id
        )
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"request-id", request_id.encode()),
        *_SECURITY_HEADERS,
        *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def stream_endpoint(scope, receive, send) -> None:
    """The ASGI view. Order: headers and query (no I/O), the key (one short read), the
    workspace's stream cap (Redis), the session (one short read); then the stream."""
    request_id = scope.get("mango.request_id") or f"req_{uuid.uuid4().hex}"
    session_id = scope["path"][len(STREAM_PATH_PREFIX) : -len(STREAM_PATH_SUFFIX)]
    slot = None
    try:
        meta = meta_from_scope(scope)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        event_deltas = query.get("event_deltas[]", []) + query.get("event_deltas", [])
        if any(kind not in DELTA_KINDS for kind in event_deltas):
            raise InvalidRequest("event_deltas: only agent.message and agent.thinking.")
        workspace_id = await db_call(_authenticate, meta=meta)
        if settings.MANGO_STRICT and settings.MANGO_AGENTS_BETA not in beta_values(_Meta(meta)):
            raise InvalidRequest(
                f"Missing required header: anthropic-beta must include {settings.MANGO_AGENTS_BETA!r} "
                "(strict mode is on)."
            )
        slot = await caps.gate().take(
            kind="streams", workspace_id=workspace_id, limit=settings.MANGO_WORKSPACE_MAX_STREAMS
        )
        session_id = await db_call(_session_check, workspace_id=workspace_id, session_id=session_id)
    except Exception as exc:
        await caps.gate().release(slot)
        error = to_api_error(exc)
        if error is None:
            logger.exception("unhandled error", extra={"request_id": request_id})
            error = ApiError()
        if isinstance(error, AuthenticationFailed):
            error.headers = {**error.headers, "WWW-Authenticate": "Bearer"}
        await send_error(send, error, request_id)
        return

    async def pump() -> None:
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
        frames = event_frames(
            session_id=session_id,
            deltas="agent.message" in event_deltas,
            heartbeat_seconds=settings.MANGO_SSE_HEARTBEAT_SECONDS,
        )
        try:
            async for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        finally:
            await frames.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    streamer = asyncio.ensure_future(pump())
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


class _Meta:
    """Just enough of a request for core.api.beta_values."""

    def __init__(self, meta: dict):
        self.META = meta


# --- the same view for WSGI servers ----------------------------------------------------------


def _scope_from_request(request) -> dict:
    headers = []
    for key, value in request.META.items():
        if key.startswith("HTTP_"):
            headers.append((key[5:].lower().replace("_", "-").encode("latin-1"), str(value).encode("latin-1")))
    return {
        "type": "http",
        "method": request.method,
        "path": request.path,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "mango.request_id": getattr(request, "request_id", None),
    }


class _PrivateLoop:
    """Runs stream_endpoint on an event loop owned by this thread (a WSGI request)."""

    def __init__(self, scope: dict):
        self.loop = asyncio.new_event_loop()
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.disconnected = self.loop.create_future()
        self.task = self.loop.create_task(stream_endpoint(scope, self._receive, self._send))

    async def _receive(self):
        await self.disconnected
        return {"type": "http.disconnect"}

    async def _send(self, message) -> None:
        await self.outbox.put(message)

    def next_message(self) -> dict | None:
        get = self.loop.create_task(self.outbox.get())
        self.loop.run_until_complete(asyncio.wait({get, self.task}, return_when=asyncio.FIRST_COMPLETED))
        if get.done():
            return get.result()
        get.cancel()
        self.task.result()  # raises what ended the endpoint
        return None

    def body(self):
        try:
            while True:
                message = self.next_message()
                if message is None:
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    return
        finally:
            self.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if not self.disconnected.done():
            self.disconnected.set_result(None)
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.task, 10))
        except BaseException:  # noqa: BLE001 — closing: nothing left to report to
            pass
        self.loop.run_until_complete(self._shutdown())
        self.loop.close()

    async def _shutdown(self) -> None:
        hub = _hubs.pop(id(self.loop), None)
        if hub is not None:
            await hub.aclose()
        gate = caps.gate()
        caps.forget_gate()
        with contextlib.suppress(Exception):
            await gate.redis.aclose()
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def event_stream_view(request, session_id: str):
    """For WSGI servers: the ASGI view on a private loop, its messages as a Django response."""
    private = _PrivateLoop(_scope_from_request(request))
    start = private.next_message()
    if start is None or start["type"] != "http.response.start":
        private.close()
        raise RuntimeError("the stream endpoint sent no response")
    headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in start["headers"]]
    content_type = dict(headers).get("content-type")
    if start["status"] != 200:
        body = b"".join(private.body())
        response = HttpResponse(body, status=start["status"], content_type=content_type)
    else:
        response = StreamingHttpResponse(private.body(), status=start["status"], content_type=content_type)
    for name, value in headers:
        if name not in ("content-type", "content-length"):
            response[name] = value
    return response
