"""The outbound guard: every connection the worker opens for a tenant (MCP servers, OAuth token
endpoints, git hosts) goes to a public address, unless the operator listed its host (or
host:port) in MANGO_OUTBOUND_PRIVATE_HOSTS.

A name is checked after DNS resolution, every address it resolves to (one private address
refuses the name: a tenant's DNS could otherwise return it on the next lookup), and the
connection then goes to the address that was checked, so a second lookup cannot rebind it:

* ``resolve`` / ``aresolve``: the checked addresses of host:port (raises OutboundRefused);
* ``check_url``: the same for a URL given at create time (a 400 there); a name that does not
  resolve yet passes (the connection fails later, with the transport's own error);
* ``GuardedTransport`` / ``AsyncGuardedTransport`` (core/transports.py): httpx2 transports whose
  every connection, redirects included, goes to the checked address of its host, reading what a
  tenant's server sends to a bound and by a deadline.
"""

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}


class OutboundRefused(Exception):
    """The destination is private and not allowed, or not a URL the worker may reach."""

    def __init__(self, message: str, *, private: bool = False):
        super().__init__(message)
        self.private = private

    def for_client(self) -> str:
        """The refusal as an API answer may give it: never the address a name resolved to (the
        server's DNS answers are not the client's to learn)."""
        if self.private:
            return (
                "the host is or resolves to a private address (loopback, link-local or a private range), which "
                "this server does not connect to; the operator can allow it in MANGO_OUTBOUND_PRIVATE_HOSTS"
            )
        return str(self)


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
                "in MANGO_OUTBOUND_PRIVATE_HOSTS",
                private=True,
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
