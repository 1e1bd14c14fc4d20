"""`GET /v1/environments/{id}/work/poll` on the event loop (config/asgi.py routes the path here):
the long poll of the SDK's EnvironmentWorker. It holds no thread and no database connection while
it waits: the credential check and each claim attempt are short calls on core.serving's small
thread pool (db_call), and the wait between them (at most block_ms, 999 ms) is a Redis wake-up
on this event loop's one pub/sub connection (sessions.queue.services publishes after the commit
that queues an item), or the timeout."""

import asyncio
import contextlib
import json
import logging
import re
from urllib.parse import parse_qs

import redis
import redis.asyncio as aioredis
from django.conf import settings

from core.api import require_beta
from core.auth import raw_key_from_meta
from core.errors import AuthenticationFailed, api_error_for, scope_request_id
from core.serving import PerLoop, db_call
from sessions.queue.apis import WORKER_ID_HEADER, poll_once, poll_parameters
from sessions.queue.auth import worker_credential_authenticate
from sessions.queue.services import work_channel
from sessions.streams.endpoint import meta_from_scope, send_error

logger = logging.getLogger(__name__)

WORK_POLL_PATH = re.compile(r"^/v1/environments/(?P<environment_id>[^/]+)/work/poll$")


def is_work_poll_request(scope) -> bool:
    return (
        scope.get("type") == "http"
        and scope.get("method") == "GET"
        and WORK_POLL_PATH.match(scope.get("path", "")) is not None
    )


class WorkWakeups:
    """This event loop's waits for work: one Redis pub/sub connection, a channel per environment
    that has a waiting poll, each wake-up resolving every poll waiting on that environment."""

    def __init__(self):
        self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=None)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.waiters: dict[str, set[asyncio.Future]] = {}
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task | None = None
        self.prefix = work_channel("")

    async def wait(self, environment_id: str, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting = self.waiters.setdefault(environment_id, set())
        first = not waiting
        waiting.add(future)
        try:
            async with asyncio.timeout(seconds):
                if first:
                    await self._subscribe(environment_id)
                await future
        except TimeoutError:
            pass
        finally:
            waiting.discard(future)
            if not waiting and self.waiters.get(environment_id) is waiting:
                del self.waiters[environment_id]
                asyncio.get_running_loop().create_task(self._unsubscribe(environment_id))

    async def _subscribe(self, environment_id: str) -> None:
        async with self.lock:
            try:
                await self.pubsub.subscribe(work_channel(environment_id))
            except (redis.RedisError, OSError):
                logger.warning("work wake-ups unavailable (Redis): polls wait out block_ms")
                return
            if self.reader is None or self.reader.done():
                self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _unsubscribe(self, environment_id: str) -> None:
        async with self.lock:
            if environment_id in self.waiters:  # waited on again meanwhile
                return
            with contextlib.suppress(redis.RedisError, OSError):
                await self.pubsub.unsubscribe(work_channel(environment_id))

    async def _read(self) -> None:
        while True:
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 — Redis trouble: waits time out meanwhile
                await asyncio.sleep(1.0)
                continue
            if message is None:
                continue
            channel = message["channel"]
            channel = channel.decode() if isinstance(channel, bytes) else channel
            for future in self.waiters.get(channel[len(self.prefix) :], ()):
                if not future.done():
                    future.set_result(None)


wakeups = PerLoop(WorkWakeups)


def _authenticate(*, meta: dict, path: str) -> None:
    if worker_credential_authenticate(meta, method="GET", path=path) is None:
        if raw_key_from_meta(meta):
            raise AuthenticationFailed(
                "This route takes the environment's key (the SDK's environment_key), not an API key."
            )
        raise AuthenticationFailed("Missing environment key: send `Authorization: Bearer ENVIRONMENT_KEY`.")


async def _poll(scope) -> dict | None:
    meta = meta_from_scope(scope)
    query = {name: values[0] for name, values in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
    params = poll_parameters(query)
    await db_call(_authenticate, meta=meta, path=scope["path"])
    require_beta(meta, settings.MANGO_AGENTS_BETA)
    claim = {
        "environment_id": WORK_POLL_PATH.match(scope["path"]).group("environment_id"),
        "worker_id": meta.get(WORKER_ID_HEADER, ""),
        "reclaim_older_than_ms": params["reclaim_older_than_ms"],
    }
    found = await db_call(poll_once, **claim)
    if found is None and params["block_ms"]:
        await wakeups().wait(claim["environment_id"], params["block_ms"] / 1000)
        found = await db_call(poll_once, **claim)
    return found


async def work_poll_endpoint(scope, receive, send) -> None:
    request_id = scope_request_id(scope)
    try:
        found = await _poll(scope)
    except Exception as exc:  # noqa: BLE001 — api_error_for logs the unexpected and answers 500
        error = api_error_for(exc, request_id=request_id)
        await send_error(send, error, request_id)
        return
    body = json.dumps(found, separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"request-id", request_id.encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
