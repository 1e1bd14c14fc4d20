"""The worker's MCP client for a session turn: a connection to each of the agent's MCP servers
that a toolset references (integrations/mcp.py holds the connection, its loop and bounds), their
tools listed (once per turn's connection, and again when the server says its tools changed),
offered to the model under names that collide with nothing, and called with a timeout and a
result-size limit.

Credentials: the session's vaults (matched to the server by URL) supply the Authorization
header, added here, in the worker, and nowhere else; an `mcp_oauth` token is refreshed before
its expiry and once on a 401, and the new tokens are stored.
"""

import logging
import re
from dataclasses import dataclass

from django.conf import settings
from mcp_types import REQUEST_TIMEOUT

from core import oauth
from core.outbound import OutboundRefused
from core.secrets import SecretsUnavailable
from integrations.mcp import (
    AUTHENTICATION_FAILED,
    CALLS,
    CONNECTION_FAILED,
    CONNECTIONS,
    TOOL_NAME_MAX,
    McpAuth,
    McpConnection,
    McpFailure,
    McpRefused,
    McpResult,
    content_blocks,
    limited_result,
    outbound_refusal,
)
from vaults.selectors import session_credentials
from vaults.services import (
    credential_mark_used,
    credential_needs_refresh,
    credential_refresh,
    credential_secrets,
)

logger = logging.getLogger(__name__)


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


def _refused(name: str, refusal: OutboundRefused) -> McpFailure:
    """The guard's refusal in words that name its real cause: a private address (which the
    operator can allow), or a host that does not resolve, or a URL the worker may not use."""
    if refusal.private:
        message = (
            f"MCP server {name!r} is on a private address this server may not reach"
            " (the operator can allow it in MANGO_OUTBOUND_PRIVATE_HOSTS)."
        )
    else:
        message = f"MCP server {name!r} could not be reached: {refusal.for_client()}."
    return McpFailure(server=name, error_type=CONNECTION_FAILED, message=message)


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
        self.connections: dict[str, McpConnection] = {}
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

    def _auth(self, url: str, *, refresh: bool = False) -> McpAuth:
        credential = self._credential_for(url)
        if credential is None:
            return McpAuth()
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
                    return McpAuth(credential_id=credential.id, kind=credential.auth_type, header={})
        secret = credential_secrets(credential)
        token = secret.get("token") or secret.get("access_token") or ""
        header = {"Authorization": f"Bearer {token}"}
        return McpAuth(credential_id=credential.id, kind=credential.auth_type, header=header)

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

    def _connect(self, name: str, url: str) -> McpConnection:
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

    def _try_connect(self, name: str, url: str, *, refresh: bool) -> McpConnection:
        try:
            auth = self._auth(url, refresh=refresh)
        except SecretsUnavailable:
            raise McpFailure(
                server=name,
                error_type=AUTHENTICATION_FAILED,
                message=f"MCP server {name!r}: this server cannot read its credential (MANGO_VAULT_KEY changed).",
            ) from None
        connection = McpConnection(name=name, url=url, auth=auth)
        try:
            connection.open()
        except OutboundRefused as refusal:
            connection.close()
            raise _refused(name, refusal) from None
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
            refusal = outbound_refusal(exc)
            if refusal is not None:
                raise _refused(name, refusal) from None
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
            except McpRefused:
                if connection.auth.kind != "mcp_oauth":
                    raise
                connection.close()
                connection = self._try_connect(server, self._urls[server], refresh=True)
                self.connections[server] = connection
                result = self._call_once(connection, server, tool, arguments)
        except McpRefused:
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
        return limited_result(content_blocks(result), is_error=bool(result.is_error), server=server, tool=tool)

    def _call_once(self, connection: "McpConnection", server: str, tool: str, arguments: dict):
        """The SDK's result, or None for a failed call; McpRefused on a 401/403."""
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
                raise McpRefused() from None
            if getattr(getattr(exc, "error", None), "code", None) == REQUEST_TIMEOUT:
                raise TimeoutError() from None
            logger.info("MCP call failed: %s", type(exc).__name__, extra={"mcp_server": server})
            return None

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
            CONNECTIONS.release(self.workspace_id)
        self.connections.clear()
