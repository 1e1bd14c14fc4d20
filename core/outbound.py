"""The outbound guard: every connection the worker opens for a tenant (MCP servers, OAuth token
endpoints, git hosts) goes to a public address, unless the operator listed its host (or
host:port) in MANGO_OUTBOUND_PRIVATE_HOSTS.

A name is checked after DNS resolution, every address it resolves to (one private address
refuses the name: a tenant's DNS could otherwise return it on the next lookup), and the
connection then goes to the address that was checked, so a second lookup cannot rebind it:

* ``resolve`` / ``aresolve``: the checked addresses of host:port (raises OutboundRefused);
* ``check_url``: the same for a URL given at create time (a 400 there); a name that does not
  resolve yet passes (the connection fails later, with the transport's own error);
* ``GuardedTransport`` / ``AsyncGuardedTransport``: httpx2 transports that check each request,
  redirects included (the client sends each hop through the transport), and connect to the
  checked address with the original name kept for the Host header, SNI and certificate checks.
"""

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

import httpx2
from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}


class OutboundRefused(Exception):
    """The destination is private and not allowed, or not a URL the worker may reach."""


def _allowed_private(host: str, port: int) -> bool:
    listed = {entry.strip().lower() for entry in settings.MANGO_OUTBOUND_PRIVATE_HOSTS if entry.strip()}
    host = host.lower().strip("[]")
    return host in listed or f"{host}:{port}" in listed or f"[{host}]:{port}" in listed


# IPv6 ranges refused whatever they hold: deprecated site-local (RFC 3879) and local-use NAT64
# (RFC 8215: where the IPv4 sits depends on the operator's prefix, so it cannot be checked).
_DENIED_V6 = (ipaddress.IPv6Network("fec0::/10"), ipaddress.IPv6Network("64:ff9b:1::/48"))
# IPv6 forms whose last 32 bits are an IPv4 address: IPv4-compatible, IPv4-translated, NAT64.
_LOW_V4 = (
    ipaddress.IPv6Network("::/96"),
    ipaddress.IPv6Network("::ffff:0:0:0/96"),
    ipaddress.IPv6Network("64:ff9b::/96"),
)


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address reaches (mapped, 6to4, Teredo server and client, ...)."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip.teredo is not None:
        return ip.teredo
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if any(ip in network for network in _LOW_V4):
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    return ()


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _DENIED_V6):
            return False
        embedded = _embedded_v4(ip)
        if embedded:
            return all(v4.is_global and not v4.is_multicast for v4 in embedded)
    return ip.is_global and not ip.is_multicast


def _checked(host: str, port: int, infos: list) -> list[str]:
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise OutboundRefused(f"{host} has no address")
    if _allowed_private(host, port):
        return addresses
    for address in addresses:
        if not is_public(address):
            raise OutboundRefused(
                f"{host}:{port} resolves to a private address ({address}); the operator can allow it "
                "in MANGO_OUTBOUND_PRIVATE_HOSTS"
            )
    return addresses


def resolve(host: str, port: int) -> list[str]:
    """The addresses of host:port that the worker may connect to (all of them, or OutboundRefused)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OutboundRefused(f"{host} does not resolve: {exc.strerror}") from exc
    return _checked(host, port, infos)


async def aresolve(host: str, port: int) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OutboundRefused(f"{host} does not resolve: {exc.strerror}") from exc
    return _checked(host, port, infos)


def url_target(url: str, *, schemes: tuple[str, ...] = ("https", "http")) -> tuple[str, int]:
    """(host, port) of an http(s) URL; OutboundRefused for anything else (other schemes, userinfo)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL: {exc}") from exc
    if parts.scheme not in schemes:
        raise OutboundRefused(f"the URL's scheme must be {' or '.join(schemes)}")
    if not parts.hostname:
        raise OutboundRefused("the URL has no host")
    if parts.username or parts.password:
        raise OutboundRefused("the URL must not carry credentials")
    return parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def check_url(url: str, *, schemes: tuple[str, ...] = ("https", "http")) -> None:
    """At create time: refuse a URL the worker would not connect to. A literal private address, or
    a name resolving to one, is refused unless allowed; a name that does not resolve passes."""
    host, port = url_target(url, schemes=schemes)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            resolve(host, port)
        except OutboundRefused as exc:
            if "does not resolve" in str(exc):
                return
            raise
        return
    _checked(host, port, [(None, None, None, None, (host, port))])


def _pinned(request: httpx2.Request, address: str) -> httpx2.Request:
    """The request sent to `address`, still naming its host (Host header, SNI, certificate)."""
    host = request.url.host
    request.url = request.url.copy_with(host=address)
    request.headers.setdefault("Host", request.headers.get("Host") or _host_header(host, request.url))
    if request.url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": host}
    return request


def _host_header(host: str, url: httpx2.URL) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if url.port in (None, DEFAULT_PORTS.get(url.scheme)) else f"{name}:{url.port}"


def _target(request: httpx2.Request) -> tuple[str, int]:
    if request.url.scheme not in DEFAULT_PORTS:
        raise OutboundRefused(f"scheme {request.url.scheme} is not allowed")
    return request.url.host, request.url.port or DEFAULT_PORTS[request.url.scheme]


class GuardedTransport(httpx2.BaseTransport):
    def __init__(self, **kwargs):
        self._inner = httpx2.HTTPTransport(**kwargs)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        host, port = _target(request)
        return self._inner.handle_request(_pinned(request, resolve(host, port)[0]))

    def close(self) -> None:
        self._inner.close()


class AsyncGuardedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, **kwargs):
        self._inner = httpx2.AsyncHTTPTransport(**kwargs)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        host, port = _target(request)
        return await self._inner.handle_async_request(_pinned(request, (await aresolve(host, port))[0]))

    async def aclose(self) -> None:
        await self._inner.aclose()
