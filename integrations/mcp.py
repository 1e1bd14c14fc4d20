"""MCP servers reached for tenants, through the official `mcp` SDK: one connection (a task on the
process's MCP event loop, holding the SDK's client and serving the calls queued for it), the loop
itself, the per-workspace bounds on connections and calls, and results cut to their limits.
Sessions use it through sessions/runtime/mcp.py (which servers a turn connects to, with which
credential, under which tool names).

The runtime is synchronous (Celery threads); the SDK is async. One event loop in one daemon
thread per worker process carries every MCP connection of the process: each connection is one
task that enters the SDK's client and serves the calls queued for it, so the SDK's task-bound
scopes are entered and left in the same task. A turn's thread submits work and waits for it.

Every connection goes through the outbound guard (core/outbound.py): private addresses only if
the operator listed them, checked after DNS and on every redirect. Per workspace, open
connections and calls in flight are bounded (MANGO_WORKSPACE_MAX_MCP_CONNECTIONS,
MANGO_WORKSPACE_MAX_MCP_CALLS). Failures are McpFailure with the SDK's error type
(`mcp_connection_failed_error`, `mcp_authentication_failed_error`) and a message naming the
server that never carries a secret or an exception's text.
"""

import asyncio
import concurrent.futures
import functools
import json
import logging
import ssl
import threading
from dataclasses import dataclass, field

import httpx2
from django.conf import settings
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from core.outbound import OutboundRefused
from core.transports import AsyncGuardedTransport

logger = logging.getLogger(__name__)

CONNECTION_FAILED = "mcp_connection_failed_error"
AUTHENTICATION_FAILED = "mcp_authentication_failed_error"
TOOL_NAME_MAX = 64
MAX_TOOLS_PER_SERVER = 256
_LIST_PAGES_MAX = 20
# A call's own timeout is the SDK's, per request, and leaves the connection open. The HTTP read
# under it, and the caller's wait for the connection's loop, allow this much more, so the SDK's
# timeout always fires first: an HTTP read timeout ends the SDK's transport, and every later call
# of the turn would find the connection lost.
_TIMEOUT_MARGIN_SECONDS = 5


class McpRefused(Exception):
    """The server answered a call with 401/403."""


class McpFailure(Exception):
    def __init__(self, *, server: str, error_type: str, message: str):
        super().__init__(message)
        self.server = server
        self.error_type = error_type
        self.message = message


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context (the CA bundle loaded once) for every MCP connection of the process: a
    context per connection costs about 30 ms of CPU."""
    return httpx2.create_ssl_context()


# --- the process's event loop ------------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or not _loop.is_running():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run():
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="mcp-client-loop", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def _run(coro, *, timeout: float):
    future = asyncio.run_coroutine_threadsafe(coro, _event_loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError() from None


# --- per-workspace bounds ----------------------------------------------------------------------


class _Bound:
    """At most `limit()` holders per workspace in this process; `peak` is the most seen at once."""

    def __init__(self, limit):
        self._limit = limit
        self._held: dict[str, int] = {}
        self._cond = threading.Condition()
        self.peak = 0
        self.total = 0

    def acquire(self, workspace_id: str, *, timeout: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self._held.get(workspace_id, 0) < self._limit(), timeout=timeout):
                return False
            self._held[workspace_id] = self._held.get(workspace_id, 0) + 1
            self.total += 1
            self.peak = max(self.peak, self.total)
            return True

    def release(self, workspace_id: str) -> None:
        with self._cond:
            held = self._held.get(workspace_id, 0) - 1
            if held <= 0:
                self._held.pop(workspace_id, None)
            else:
                self._held[workspace_id] = held
            self.total -= 1
            self._cond.notify_all()

    def held(self, workspace_id: str | None = None) -> int:
        with self._cond:
            return self.total if workspace_id is None else self._held.get(workspace_id, 0)


CONNECTIONS = _Bound(lambda: settings.MANGO_WORKSPACE_MAX_MCP_CONNECTIONS)
CALLS = _Bound(lambda: settings.MANGO_WORKSPACE_MAX_MCP_CALLS)


# --- results, cut to their limits --------------------------------------------------------------


def content_blocks(result) -> list[dict]:
    """The SDK's content blocks (text, image) of an MCP result; other kinds as text."""
    blocks = []
    for item in result.content or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append({"type": "text", "text": item.text})
        elif kind == "image":
            blocks.append(
                {"type": "image", "source": {"type": "base64", "media_type": item.mime_type, "data": item.data}}
            )
        elif kind == "resource_link":
            blocks.append({"type": "text", "text": f"[resource] {item.uri}"})
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            blocks.append({"type": "text", "text": text if text is not None else f"[resource] {resource.uri}"})
        else:
            blocks.append({"type": "text", "text": f"[{kind} content]"})
    if not blocks and result.structured_content is not None:
        blocks.append({"type": "text", "text": json.dumps(result.structured_content)})
    return blocks


@dataclass
class McpResult:
    content: list[dict]
    is_error: bool = False


def limited_result(blocks: list[dict], *, is_error: bool, server: str, tool: str) -> McpResult:
    size = len(json.dumps(blocks))
    limit = settings.MANGO_MCP_RESULT_MAX_BYTES
    if size > limit:
        text = f"The result of {tool} from MCP server {server!r} is {size} bytes, over the limit of {limit} bytes."
        return McpResult([{"type": "text", "text": text}], is_error=True)
    return McpResult(blocks or [{"type": "text", "text": ""}], is_error=is_error)


# --- one connection ----------------------------------------------------------------------------


@dataclass
class McpAuth:
    credential_id: str | None = None
    kind: str | None = None
    header: dict = field(default_factory=dict, repr=False)  # the Authorization: never in a repr or a log


class McpConnection:
    """One MCP server for one session turn: a task on the process loop that holds the SDK client
    and serves the calls queued for it."""

    def __init__(self, *, name: str, url: str, auth: McpAuth):
        self.name = name
        self.url = url
        self.auth = auth
        self.statuses: list[int] = []
        self.stale = False
        self.tools: list = []
        self._jobs: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None

    async def _hook(self, response: httpx2.Response) -> None:
        self.statuses.append(response.status_code)

    async def _on_message(self, message) -> None:
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method == "notifications/tools/list_changed":
            self.stale = True

    def _http(self) -> httpx2.AsyncClient:
        timeout = httpx2.Timeout(
            settings.MANGO_MCP_CALL_TIMEOUT_SECONDS + _TIMEOUT_MARGIN_SECONDS,
            connect=settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS,
        )
        return httpx2.AsyncClient(
            transport=AsyncGuardedTransport(verify=_tls()),
            headers=self.auth.header,
            timeout=timeout,
            event_hooks={"response": [self._hook]},
        )

    async def _serve(self, ready: asyncio.Future, sse: bool) -> None:
        job = None
        try:
            async with self._http() as http:
                if sse:
                    transport = sse_client(
                        self.url,
                        headers=self.auth.header,
                        timeout=settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS,
                        httpx_client_factory=lambda **kwargs: self._http(),
                    )
                else:
                    transport = streamable_http_client(self.url, http_client=http)
                client = Client(
                    transport,
                    cache=None,
                    message_handler=self._on_message,
                    read_timeout_seconds=settings.MANGO_MCP_CALL_TIMEOUT_SECONDS,
                )
                async with client:
                    self.tools = await _list_tools(client)
                    listener = self._listen(client)
                    ready.set_result(None)
                    try:
                        while (job := await self._jobs.get()) is not None:
                            work, done = job
                            try:
                                done.set_result(await work(client))
                            except Exception as exc:  # noqa: BLE001 — handed to the caller, who classifies it
                                done.set_exception(exc)
                    finally:
                        if listener is not None:
                            listener.cancel()
                            await asyncio.gather(listener, return_exceptions=True)
        except BaseException as exc:  # noqa: BLE001 — reported to the waiting caller, never raised in the loop
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
        finally:
            # The job in progress too: the SDK's transport failing (a reply over the outbound
            # limit, a dropped connection) cancels this task mid-call.
            pending = [job] if job is not None else []
            while self._jobs is not None and not self._jobs.empty():
                pending.append(self._jobs.get_nowait())
            for each in pending:
                if each is not None and not each[1].done():
                    each[1].set_exception(ConnectionError("the MCP connection closed"))

    def _listen(self, client) -> asyncio.Task | None:
        """On a 2026-07-28 server that says its tool list changes, a `subscriptions/listen`
        stream for it (older servers send the notification on the session's own stream, which
        `_on_message` sees): each event marks the listing stale."""
        capabilities = client.server_capabilities
        if not (capabilities.tools and capabilities.tools.list_changed):
            return None
        if client.protocol_version < "2026-07-28":
            return None

        async def listen():
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    async for _event in subscription:
                        self.stale = True
            except Exception:  # noqa: BLE001 — without the stream the listing is only not refreshed
                logger.info("MCP tools/list_changed stream unavailable", extra={"mcp_server": self.name})

        return asyncio.get_running_loop().create_task(listen())

    async def _open(self, sse: bool) -> None:
        self._jobs = asyncio.Queue()
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._serve(ready, sse))
        await ready

    def open(self) -> None:
        """Connect and list the tools (streamable HTTP; SSE for an older server that refuses it)."""
        timeout = settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS
        try:
            _run(self._open(False), timeout=timeout)
        except Exception as first:  # re-raised unless an older (SSE) server may answer
            if self.auth_refused() or outbound_refused(first) or isinstance(first, TimeoutError):
                raise
            if not any(status in (400, 404, 405) for status in self.statuses):
                raise
            self.close()
            self.statuses.clear()
            _run(self._open(True), timeout=timeout)

    def auth_refused(self) -> bool:
        return any(status in (401, 403) for status in self.statuses)

    async def _submit(self, work):
        if self._task is None or self._task.done():
            raise ConnectionError("the MCP connection closed")
        done = asyncio.get_running_loop().create_future()
        await self._jobs.put((work, done))
        return await done

    def call(self, tool: str, arguments: dict):
        timeout = settings.MANGO_MCP_CALL_TIMEOUT_SECONDS
        return _run(
            self._submit(lambda client: client.call_tool(tool, arguments, read_timeout_seconds=timeout)),
            timeout=timeout + _TIMEOUT_MARGIN_SECONDS,
        )

    def relist(self) -> None:
        async def work(client):
            self.tools = await _list_tools(client)

        _run(self._submit(work), timeout=settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS)
        self.stale = False

    async def _close(self) -> None:
        if self._task is None:
            return
        if not self._task.done():
            await self._jobs.put(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        self._task = None

    def close(self) -> None:
        try:
            _run(self._close(), timeout=10)
        except Exception:  # noqa: BLE001 — closing is best effort; the loop drops the task
            logger.warning("closing an MCP connection failed", extra={"mcp_server": self.name})


async def _list_tools(client) -> list:
    tools, cursor = [], None
    for _ in range(_LIST_PAGES_MAX):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor or len(tools) >= MAX_TOOLS_PER_SERVER:
            break
    return tools[:MAX_TOOLS_PER_SERVER]


# --- the session's MCP client ------------------------------------------------------------------


def outbound_refusal(exc: BaseException) -> OutboundRefused | None:
    """The outbound guard's refusal behind a failure (in an exception group or as a cause), if any."""
    if isinstance(exc, OutboundRefused):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((found for inner in exc.exceptions if (found := outbound_refusal(inner))), None)
    return outbound_refusal(exc.__cause__) if exc.__cause__ is not None else None


def outbound_refused(exc: BaseException) -> bool:
    return outbound_refusal(exc) is not None
