"""The OAuth 2.0 refresh-token grant (RFC 6749 §6) against a tenant's token endpoint, through the
outbound guard (core/outbound.py): the endpoint must be public unless the operator allowed it,
checked after DNS and on every redirect. Each exchange (a refresh, a probe) ends within its
`timeout` as a whole, however slowly the server answers, and reads at most RESPONSE_MAX_BYTES
of an answer's body (of a redirect's too).

Client authentication at the token endpoint (RFC 6749 §2.3.1): ``none`` (client_id in the
body), ``client_secret_basic`` (HTTP Basic) or ``client_secret_post`` (client_id and
client_secret in the body). The secrets passed in are never logged or put in an exception's
message; an error response's body is kept only with every secret value scrubbed from it.
"""

import functools
import json
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx2

from core.outbound import OutboundRefused
from core.transports import GuardedTransport, ResponseRefused

BODY_MAX_CHARS = 2048
RESPONSE_MAX_BYTES = 64 * 1024
AUTH_TYPES = ("none", "client_secret_basic", "client_secret_post")


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context (the CA bundle loaded once) for the process's token and probe requests."""
    return httpx2.create_ssl_context()


@dataclass(frozen=True)
class HttpSummary:
    """An HTTP response as the validation probe reports it: secrets scrubbed, body truncated."""

    status_code: int
    content_type: str
    body: str
    body_truncated: bool

    def to_wire(self) -> dict:
        return {
            "status_code": self.status_code,
            "content_type": self.content_type,
            "body": self.body,
            "body_truncated": self.body_truncated,
        }


@dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str | None
    expires_at: datetime | None


class RefreshFailed(Exception):
    """The token endpoint answered with an error (`response`), or its answer had no token."""

    def __init__(self, message: str, response: HttpSummary | None = None):
        super().__init__(message)
        self.response = response


class RefreshUnreachable(Exception):
    """The token endpoint could not be reached (DNS, TLS, connection, the outbound guard)."""


def _client(*, timeout: float, follow_redirects: bool) -> httpx2.Client:
    """A client for one exchange: all of it within `timeout`, RESPONSE_MAX_BYTES of a body."""
    transport = GuardedTransport(verify=_tls(), total_timeout=timeout, max_response_bytes=RESPONSE_MAX_BYTES)
    return httpx2.Client(transport=transport, timeout=timeout, follow_redirects=follow_redirects)


def _read(response: httpx2.Response) -> tuple[bytes, bool]:
    """The first RESPONSE_MAX_BYTES of a streamed response's body, and whether there was more;
    the rest is never read."""
    body = bytearray()
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > RESPONSE_MAX_BYTES:
                return bytes(body[:RESPONSE_MAX_BYTES]), True
    except ResponseRefused:  # the transport's own limit, RESPONSE_MAX_BYTES as well
        return bytes(body[:RESPONSE_MAX_BYTES]), True
    return bytes(body), False


def summarize(
    response: httpx2.Response, body: bytes, *, truncated: bool = False, secrets: tuple[str, ...]
) -> HttpSummary:
    text = body.decode("utf-8", "replace")
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return HttpSummary(
        status_code=response.status_code,
        content_type=response.headers.get("content-type", ""),
        body=text[:BODY_MAX_CHARS],
        body_truncated=truncated or len(text) > BODY_MAX_CHARS,
    )


def refresh(
    *,
    token_endpoint: str,
    client_id: str,
    refresh_token: str,
    auth_type: str,
    client_secret: str | None,
    scope: str | None,
    resource: str | None,
    timeout: float,
) -> Tokens:
    """New tokens for `refresh_token`, within `timeout` in all; RefreshFailed or RefreshUnreachable."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if scope:
        form["scope"] = scope
    if resource:
        form["resource"] = resource
    basic = None
    if auth_type == "client_secret_basic":
        basic = httpx2.BasicAuth(client_id, client_secret or "")
    else:
        form["client_id"] = client_id
        if auth_type == "client_secret_post":
            form["client_secret"] = client_secret or ""
    secrets = (refresh_token, client_secret or "")
    headers = {"Accept": "application/json"}
    try:
        with (
            _client(timeout=timeout, follow_redirects=False) as client,
            client.stream("POST", token_endpoint, data=form, auth=basic, headers=headers) as response,
        ):
            content, truncated = _read(response)
    except OutboundRefused as exc:
        raise RefreshUnreachable(f"the token endpoint is not reachable: {exc}") from None
    except ResponseRefused as exc:
        raise RefreshFailed(f"the token endpoint's answer was refused: {exc}") from None
    except httpx2.TimeoutException:
        raise RefreshUnreachable(f"the token endpoint did not answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise RefreshUnreachable(f"the token endpoint is not reachable: {type(exc).__name__}") from None
    summary = summarize(response, content, truncated=truncated, secrets=secrets)
    if response.status_code != 200:
        raise RefreshFailed(f"the token endpoint answered {response.status_code}", summary)
    if truncated:
        raise RefreshFailed(f"the token endpoint's answer is over {RESPONSE_MAX_BYTES} bytes", summary)
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("access_token"), str) or not body["access_token"]:
        raise RefreshFailed("the token endpoint's answer holds no access_token", summary)
    expires_in = body.get("expires_in")
    expires_at = None
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_at = datetime.now(UTC) + timedelta(seconds=float(expires_in))
    new_refresh = body.get("refresh_token") if isinstance(body.get("refresh_token"), str) else None
    return Tokens(access_token=body["access_token"], refresh_token=new_refresh or None, expires_at=expires_at)


class ProbeRejected(Exception):
    """The MCP server answered the probe's `initialize` with an error status."""

    def __init__(self, response: HttpSummary):
        super().__init__(f"the MCP server answered {response.status_code}")
        self.response = response


def mcp_probe(*, url: str, access_token: str, timeout: float) -> None:
    """An MCP `initialize` request (streamable HTTP) with the access token, within `timeout` in
    all: returns if the server accepts it; ProbeRejected with the (scrubbed, truncated) answer, or
    RefreshUnreachable if unreachable, too slow, or its answer was refused."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "mango-credential-probe", "version": "1"},
        },
    }
    headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream"}
    content, truncated = b"", False
    try:
        with (
            _client(timeout=timeout, follow_redirects=True) as client,
            client.stream("POST", url, json=body, headers=headers) as response,
        ):
            if response.status_code >= 400:
                content, truncated = _read(response)
    except OutboundRefused as exc:
        raise RefreshUnreachable(f"the MCP server is not reachable: {exc}") from None
    except ResponseRefused as exc:
        raise RefreshUnreachable(f"the MCP server's answer was refused: {exc}") from None
    except httpx2.TimeoutException:
        raise RefreshUnreachable(f"the MCP server did not answer within {timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise RefreshUnreachable(f"the MCP server is not reachable: {type(exc).__name__}") from None
    if response.status_code >= 400:
        raise ProbeRejected(summarize(response, content, truncated=truncated, secrets=(access_token,)))
