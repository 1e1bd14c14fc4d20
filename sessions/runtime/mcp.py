"""The worker's MCP client (the official `mcp` SDK): per session turn, a connection to each of
the agent's MCP servers that a toolset references, their tools listed (once per turn's
connection, and again when the server says its tools changed), offered to the model
under names that collide with nothing, and called with a timeout and a result-size limit.

The runtime is synchronous (Celery threads); the SDK is async. One event loop in one daemon
thread per worker process carries every MCP connection of the process: each connection is one
task that enters the SDK's client and serves the calls queued for it, so the SDK's task-bound
scopes are entered and left in the same task. A turn's thread submits work and waits for it.

Credentials: the session's vaults (matched to the server by URL) supply the Authorization
header, added here, in the worker, and nowhere else; an `mcp_oauth` token is refreshed before
its expiry and once on a 401, and the new tokens are stored. Every connection goes through the
outbound guard (core/outbound.py): private addresses only if the operator listed them, checked
after DNS and on every redirect. Per workspace, open connections and calls in flight are
bounded (MANGO_WORKSPACE_MAX_MCP_CONNECTIONS, MANGO_WORKSPACE_MAX_MCP_CALLS).

Failures are McpFailure with the SDK's error type (`mcp_connection_failed_error`,
`mcp_authentication_failed_error`) and a message naming the server that never carries a
secret or an exception's text.
"""

import asyncio
import concurrent.futures
import functools
import json
import logging
import re
import ssl
import threading
from dataclasses import dataclass, field

import httpx2
from django.conf import settings
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import REQUEST_TIMEOUT

from core import oauth
from core.outbound import AsyncGuardedTransport, OutboundRefused
from core.secrets import SecretsUnavailable
from vaults.selectors import session_credentials
from vaults.services import (
    credential_mark_used,
    credential_needs_refresh,
    credential_refresh,
    credential_secrets,
)

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


class _Refused(Exception):
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


def mcp_stats() -> dict:
    """Connections and calls open now, and the most at once, in this process (bench, metrics)."""
    return {
        "connections_open": CONNECTIONS.held(),
        "connections_peak": CONNECTIONS.peak,
        "calls_in_flight": CALLS.held(),
        "calls_peak": CALLS.peak,
    }


# --- tools as the model sees them --------------------------------------------------------------


@dataclass(frozen=True)
class McpTool:
    server: str  # the agent's mcp_servers name
    name: str  # the tool's name on its server
    model_name: str  # the name offered to the model
    description: str
    input_schema: dict
    permission: str  # always_allow | always_ask | auto


def _safe(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text) or "_"


def model_tool_names(pairs: list[tuple[str, str]], taken: set[str]) -> dict[tuple[str, str], str]:
    """(server, tool) → a Messages-API tool name `mcp__<server>__<tool>` (letters, digits, _ and
    -, at most 64), distinct from `taken` (built-in and custom tools) and from each other."""
    names: dict[tuple[str, str], str] = {}
    used = set(taken)
    for server, tool in pairs:
        base = f"mcp__{_safe(server)}__{_safe(tool)}"[:TOOL_NAME_MAX]
        name, number = base, 1
        while name in used:
            number += 1
            suffix = f"_{number}"
            name = base[: TOOL_NAME_MAX - len(suffix)] + suffix
        used.add(name)
        names[(server, tool)] = name
    return names


def _tool_config(toolset: dict, tool_name: str) -> dict:
    for config in toolset.get("configs") or []:
        if config["name"] == tool_name:
            return config
    return toolset.get("default_config") or {"enabled": True, "permission_policy": {"type": "always_ask"}}


def _permission(config: dict) -> str:
    kind = (config.get("permission_policy") or {}).get("type")
    return kind if kind in ("always_allow", "always_ask", "auto") else "always_ask"


def referenced_servers(agent_snapshot: dict) -> list[tuple[dict, dict]]:
    """(mcp_servers entry, its toolset) for each server a toolset references."""
    servers = {server["name"]: server for server in agent_snapshot.get("mcp_servers") or []}
    found = []
    for tool in agent_snapshot.get("tools") or []:
        if tool.get("type") == "mcp_toolset" and tool["mcp_server_name"] in servers:
            found.append((servers[tool["mcp_server_name"]], tool))
    return found


# --- results -----------------------------------------------------------------------------------


def _content_blocks(result) -> list[dict]:
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


def _limited(blocks: list[dict], *, is_error: bool, server: str, tool: str) -> McpResult:
    size = len(json.dumps(blocks))
    limit = settings.MANGO_MCP_RESULT_MAX_BYTES
    if size > limit:
        text = f"The result of {tool} from MCP server {server!r} is {size} bytes, over the limit of {limit} bytes."
        return McpResult([{"type": "text", "text": text}], is_error=True)
    return McpResult(blocks or [{"type": "text", "text": ""}], is_error=is_error)


# --- one connection ----------------------------------------------------------------------------


@dataclass
class _Auth:
    credential_id: str | None = None
    kind: str | None = None
    header: dict = field(default_factory=dict, repr=False)  # the Authorization: never in a repr or a log


class _Connection:
    """One MCP server for one session turn: a task on the process loop that holds the SDK client
    and serves the calls queued for it."""

    def __init__(self, *, name: str, url: str, auth: _Auth):
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
            if self.auth_refused() or _outbound_refused(first) or isinstance(first, TimeoutError):
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


class SessionMcp:
    """The MCP servers of one session turn. `open()` connects to each referenced server and
    returns the failures (each becomes a session.error; the other servers' tools stay offered);
    `tools()` what the model is offered; `call()` runs one tool; `close()` ends the turn's
    connections and gives back their slots."""

    def __init__(self, *, session_id: str, workspace_id: str, agent_snapshot: dict, vault_ids: list[str]):
        self.session_id = session_id
        self.workspace_id = workspace_id
        self.vault_ids = list(vault_ids or [])
        self.servers = referenced_servers(agent_snapshot)
        self.connections: dict[str, _Connection] = {}
        self._toolsets = {server["name"]: toolset for server, toolset in self.servers}
        self._urls = {server["name"]: server["url"] for server, _ in self.servers}
        self._credentials = None

    def __bool__(self) -> bool:
        return bool(self.servers)

    def _credential_for(self, url: str):
        if self._credentials is None:
            self._credentials = (
                session_credentials(workspace_id=self.workspace_id, vault_ids=self.vault_ids) if self.vault_ids else {}
            )
        return self._credentials.get(url)

    def _auth(self, url: str, *, refresh: bool = False) -> _Auth:
        credential = self._credential_for(url)
        if credential is None:
            return _Auth()
        if credential.auth_type == "mcp_oauth" and (refresh or credential_needs_refresh(credential)):
            try:
                # Within the connect timeout: the turn's thread waits for it.
                timeout = settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS
                credential = credential_refresh(credential_id=credential.id, timeout=timeout)
                self._credentials[url] = credential
            except (oauth.RefreshFailed, oauth.RefreshUnreachable, ValueError) as exc:
                logger.info(
                    "MCP credential refresh failed: %s", type(exc).__name__, extra={"session_id": self.session_id}
                )
                if refresh:
                    return _Auth(credential_id=credential.id, kind=credential.auth_type, header={})
        secret = credential_secrets(credential)
        token = secret.get("token") or secret.get("access_token") or ""
        header = {"Authorization": f"Bearer {token}"}
        return _Auth(credential_id=credential.id, kind=credential.auth_type, header=header)

    def open(self) -> list[McpFailure]:
        failures = []
        for server, _ in self.servers:
            if server["name"] in self.connections:
                continue
            try:
                self._connect(server["name"], server["url"])
            except McpFailure as failure:
                failures.append(failure)
        return failures

    def _connect(self, name: str, url: str) -> _Connection:
        if not CONNECTIONS.acquire(self.workspace_id, timeout=settings.MANGO_MCP_CONNECT_TIMEOUT_SECONDS):
            raise McpFailure(
                server=name,
                error_type=CONNECTION_FAILED,
                message=f"MCP server {name!r}: the workspace has its limit of MCP connections open; try again later.",
            )
        try:
            connection = self._try_connect(name, url, refresh=False)
        except McpFailure:
            CONNECTIONS.release(self.workspace_id)
            raise
        self.connections[name] = connection
        return connection

    def _try_connect(self, name: str, url: str, *, refresh: bool) -> _Connection:
        try:
            auth = self._auth(url, refresh=refresh)
        except SecretsUnavailable:
            raise McpFailure(
                server=name,
                error_type=AUTHENTICATION_FAILED,
                message=f"MCP server {name!r}: this server cannot read its credential (MANGO_VAULT_KEY changed).",
            ) from None
        connection = _Connection(name=name, url=url, auth=auth)
        try:
            connection.open()
        except OutboundRefused:
            connection.close()
            raise McpFailure(
                server=name,
                error_type=CONNECTION_FAILED,
                message=f"MCP server {name!r} is on a private address this server may not reach"
                " (the operator can allow it in MANGO_OUTBOUND_PRIVATE_HOSTS).",
            ) from None
        except Exception as exc:  # noqa: BLE001 — every failure to connect becomes an McpFailure
            connection.close()
            if connection.auth_refused():
                if auth.kind == "mcp_oauth" and not refresh:
                    return self._try_connect(name, url, refresh=True)
                which = "no credential in the session's vaults" if auth.credential_id is None else "its credential"
                raise McpFailure(
                    server=name,
                    error_type=AUTHENTICATION_FAILED,
                    message=f"MCP server {name!r} refused the authorization ({which}).",
                ) from None
            if _outbound_refused(exc):
                raise McpFailure(
                    server=name,
                    error_type=CONNECTION_FAILED,
                    message=f"MCP server {name!r} is on a private address this server may not reach"
                    " (the operator can allow it in MANGO_OUTBOUND_PRIVATE_HOSTS).",
                ) from None
            reason = "timed out" if isinstance(exc, TimeoutError) else "could not be reached or answered with an error"
            raise McpFailure(
                server=name, error_type=CONNECTION_FAILED, message=f"MCP server {name!r} {reason}."
            ) from None
        if auth.credential_id:
            credential_mark_used(credential_id=auth.credential_id)
        return connection

    def stale(self) -> bool:
        """Whether a server said its tools changed since they were listed."""
        return any(connection.stale for connection in self.connections.values())

    def tools(self, *, taken: set[str]) -> list[McpTool]:
        """The enabled tools of the connected servers, named for the model."""
        for name, connection in self.connections.items():
            if connection.stale:
                try:
                    connection.relist()
                except Exception:  # noqa: BLE001 — the last listing stays offered
                    logger.warning("MCP tools could not be listed again", extra={"mcp_server": name})
        pairs, found = [], []
        for name, connection in self.connections.items():
            toolset = self._toolsets[name]
            for tool in connection.tools:
                config = _tool_config(toolset, tool.name)
                if not config.get("enabled", True):
                    continue
                pairs.append((name, tool.name))
                found.append((name, tool, config))
        names = model_tool_names(pairs, taken)
        return [
            McpTool(
                server=name,
                name=tool.name,
                model_name=names[(name, tool.name)],
                description=(tool.description or "")[:4096],
                input_schema=tool.input_schema or {"type": "object"},
                permission=_permission(config),
            )
            for name, tool, config in found
        ]

    def call(self, *, server: str, tool: str, arguments: dict) -> McpResult:
        """Run one tool (bounded per workspace, with the call timeout); a failure to reach the
        server raises McpFailure, a tool's own error is an error result. A 401 mid-session
        (an OAuth token that expired meanwhile) reconnects once with a refreshed token."""
        if server not in self._urls:
            return McpResult([{"type": "text", "text": f"No MCP server {server!r}."}], is_error=True)
        connection = self.connections.get(server) or self._connect(server, self._urls[server])
        if not CALLS.acquire(self.workspace_id, timeout=settings.MANGO_MCP_CALL_TIMEOUT_SECONDS):
            text = "The workspace has its limit of MCP calls in flight; try again."
            return McpResult([{"type": "text", "text": text}], is_error=True)
        try:
            try:
                result = self._call_once(connection, server, tool, arguments)
            except _Refused:
                if connection.auth.kind != "mcp_oauth":
                    raise
                connection.close()
                connection = self._try_connect(server, self._urls[server], refresh=True)
                self.connections[server] = connection
                result = self._call_once(connection, server, tool, arguments)
        except _Refused:
            raise McpFailure(
                server=server,
                error_type=AUTHENTICATION_FAILED,
                message=f"MCP server {server!r} refused the authorization.",
            ) from None
        except TimeoutError:
            limit = settings.MANGO_MCP_CALL_TIMEOUT_SECONDS
            text = f"The call of {tool} on MCP server {server!r} timed out after {limit:g} s."
            return McpResult([{"type": "text", "text": text}], is_error=True)
        finally:
            CALLS.release(self.workspace_id)
        if result is None:
            text = f"The call of {tool} on MCP server {server!r} failed."
            return McpResult([{"type": "text", "text": text}], is_error=True)
        return _limited(_content_blocks(result), is_error=bool(result.is_error), server=server, tool=tool)

    def _call_once(self, connection: "_Connection", server: str, tool: str, arguments: dict):
        """The SDK's result, or None for a failed call; _Refused on a 401/403."""
        seen = len(connection.statuses)
        try:
            return connection.call(tool, arguments if isinstance(arguments, dict) else {})
        except TimeoutError:
            raise
        except ConnectionError:
            raise McpFailure(
                server=server, error_type=CONNECTION_FAILED, message=f"MCP server {server!r}: the connection was lost."
            ) from None
        except Exception as exc:  # noqa: BLE001 — the SDK's and the transport's errors alike
            if any(status in (401, 403) for status in connection.statuses[seen:]):
                raise _Refused() from None
            if getattr(getattr(exc, "error", None), "code", None) == REQUEST_TIMEOUT:
                raise TimeoutError() from None
            logger.info("MCP call failed: %s", type(exc).__name__, extra={"mcp_server": server})
            return None

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
            CONNECTIONS.release(self.workspace_id)
        self.connections.clear()


def _outbound_refused(exc: BaseException) -> bool:
    if isinstance(exc, OutboundRefused):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_outbound_refused(inner) for inner in exc.exceptions)
    return exc.__cause__ is not None and _outbound_refused(exc.__cause__)
