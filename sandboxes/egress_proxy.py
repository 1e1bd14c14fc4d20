"""The egress proxy of a `limited` sandbox: the only thing the sandbox's network can reach.

It runs in a container of its own (sandboxes/docker/egress.py starts it with this file as its
program, standard library only), attached to the sandbox's internal network (no route out) and to
an egress network. Clients in the sandbox reach it through HTTP_PROXY / HTTPS_PROXY:

* ``CONNECT host:443`` (HTTPS, tunnelled as is) and absolute-form ``GET http://host/...`` (plain
  HTTP on port 80, one request per connection) to hosts of the allow-list only: exact names, or
  ``*.example.com`` for its subdomains;
* refused with 403: every other host, IP literals (no way around the names), other ports;
* the proxy resolves names itself and connects only to public addresses, unless the host (or
  host:port) is in ``private_hosts`` (the deployment's MANGO_SANDBOX_PRIVATE_HOSTS and package
  registries);
* the request reaches the host it was checked for: its Host header must name that host (and
  port) or be absent (the proxy sets it), else 403 — on a shared host or CDN another Host would
  route it to another app;
* bounded: at most ``max_connections`` tunnels at once (503 beyond), a request head of 16 KiB
  read within 30 s, a tunnel closed after ``idle_seconds`` without traffic.

Credentials (vault ``environment_variable`` credentials): the sandbox holds only a placeholder
in the variable; on requests to a credential's hosts the proxy replaces the placeholder with the
secret, in header values and/or in bodies with a Content-Length, as the credential allows. For
HTTPS that means terminating the client's TLS: the proxy makes a CA of its own at start (its key
never leaves this process), prints the CA certificate for the sandbox to trust, issues a
certificate per host, and opens its own verified TLS connection upstream (one request per
connection, its target origin-form only: an absolute URI would name another host). Requests to
any other host pass untouched, placeholder included, and so do plain-HTTP requests, to the
credential's hosts too (cleartext: anyone on the path would read the secret): the secret goes
nowhere else. The secrets arrive on stdin, never in the container's environment or arguments.

Configuration: the JSON in $MANGO_EGRESS (allowed — ``*`` for every name —, private_hosts,
listen_port, max_connections, idle_seconds, credentials_on_stdin, upstream_ca); with
credentials_on_stdin, one JSON line on stdin: {"credentials": [{placeholder, value, hosts (null:
every host), header, body}]}. Prints the CA between ``ca-begin``/``ca-end`` when it has
credentials, then ``ready``, on stdout; one line per refusal on stderr.
"""

import asyncio
import datetime
import ipaddress
import json
import os
import socket
import ssl
import sys
import tempfile

HEAD_MAX_BYTES = 16 * 1024
BODY_MAX_BYTES = 16 * 1024 * 1024  # a body the proxy reads whole to substitute into
HEAD_TIMEOUT_SECONDS = 30
CONNECT_PORTS = (443,)
HTTP_PORTS = (80,)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def host_allowed(host: str, allowed: list[str]) -> bool:
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().rstrip(".")
        if entry == "*":
            return True
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


# The address checks are core/outbound.py's (is_public), copied: this program runs with the
# standard library only. tests/core/test_outbound.py holds the two to the same answers.

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


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _DENIED_V6):
            return False
        embedded = _embedded_v4(ip)
        if embedded:
            return all(v4.is_global and not v4.is_multicast for v4 in embedded)
    return ip.is_global and not ip.is_multicast


class Proxy:
    def __init__(self, config: dict):
        self.allowed = list(config.get("allowed") or [])
        self.private_hosts = {entry.lower() for entry in config.get("private_hosts") or []}
        self.idle_seconds = float(config.get("idle_seconds", 300))
        self.slots = asyncio.Semaphore(int(config.get("max_connections", 64)))
        self.port = int(config.get("listen_port", 3128))
        self.credentials: list[dict] = []
        self.upstream_ca = config.get("upstream_ca") or None
        self.authority = None

    def credentials_for(self, host: str) -> list[dict]:
        return [c for c in self.credentials if c.get("hosts") is None or host_allowed(host, c["hosts"])]

    def refusal(self, host: str, port: int) -> str | None:
        """Why host:port is refused, or None."""
        if _is_ip(host):
            return f"{host}: IP addresses are not allowed, only the environment's allowed hosts by name"
        if not host_allowed(host, self.allowed):
            return f"{host} is not in the environment's allowed hosts"
        return None

    async def resolve(self, host: str, port: int) -> str:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        if not addresses:
            raise OSError(f"{host} has no address")
        if host.lower() not in self.private_hosts and f"{host.lower()}:{port}" not in self.private_hosts:
            for address in addresses:
                if not _public(address):
                    raise PermissionError(f"{host} resolves to a private address")
        return addresses[0]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.slots.locked():
            await _reply(writer, 503, "too many connections through this sandbox's proxy")
            return
        async with self.slots:
            try:
                await self._handle(reader, writer)
            except Exception as exc:  # noqa: BLE001 (a broken client or upstream ends its own connection only)
                print(f"proxy: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            finally:
                writer.close()

    async def _handle(self, reader, writer) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            await _reply(writer, 400, "bad or incomplete request head")
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            await _reply(writer, 400, "bad request line")
            return
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            ports = CONNECT_PORTS
            rest = b""
        elif target.startswith("http://"):
            authority, _, path = target[len("http://") :].partition("/")
            host, _, port_text = authority.rpartition(":") if ":" in authority.strip("[]") else (authority, "", "80")
            ports = HTTP_PORTS
        else:
            await _reply(writer, 400, "only CONNECT and absolute http:// requests go through this proxy")
            return
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            await _reply(writer, 400, "bad port")
            return
        if method != "CONNECT":
            try:
                kept = _headers_for(lines[1:], host, port, default_port=80)
            except HostMismatch as exc:
                print(f"proxy refused {method} {host}:{port}: {exc}", file=sys.stderr, flush=True)
                await _reply(writer, 403, str(exc))
                return
            rest = "\r\n".join([f"{method} /{path} {version}", *kept, "Connection: close", "", ""]).encode("latin-1")
        reason = self.refusal(host, port)
        if reason is None and port not in ports:
            reason = f"port {port} is not allowed ({'/'.join(map(str, ports))} only)"
        if reason is not None:
            print(f"proxy refused {method} {host}:{port}: {reason}", file=sys.stderr, flush=True)
            await _reply(writer, 403, reason)
            return
        try:
            address = await self.resolve(host, port)
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(address, port), HEAD_TIMEOUT_SECONDS
            )
        except PermissionError as exc:
            await _reply(writer, 403, str(exc))
            return
        except (OSError, TimeoutError) as exc:
            await _reply(writer, 502, f"cannot reach {host}:{port}: {exc}")
            return
        # Secrets go only into TLS the proxy opened itself: never into cleartext HTTP.
        credentials = self.credentials_for(host) if method == "CONNECT" else []
        if credentials:
            upstream_writer.close()
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._intercept(reader, writer, host, address, port, credentials)
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            upstream_writer.write(rest)
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer), return_exceptions=True
            )
        finally:
            upstream_writer.close()

    async def _intercept(self, reader, writer, host: str, address: str, port: int, credentials: list[dict]) -> None:
        """TLS to the client with a certificate of ours for `host`, one request read, the
        placeholders replaced, sent over our own verified TLS to the host; the answer streamed back."""
        await writer.start_tls(self.authority.server_context(host))
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[1].startswith("/"):
            # An absolute-form target would name a host of its own: only the one CONNECT named.
            await _reply(writer, 400, "inside an intercepted TLS connection only origin-form targets (/path)")
            return
        try:
            kept = _headers_for(lines[1:], host, port, default_port=443)
        except HostMismatch as exc:
            print(f"proxy refused a request inside CONNECT {host}:{port}: {exc}", file=sys.stderr, flush=True)
            await _reply(writer, 403, str(exc))
            return
        request = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
        request = await _substituted(request, reader, credentials)
        context = ssl.create_default_context()
        if self.upstream_ca:
            context.load_verify_locations(cadata=self.upstream_ca)
        upstream_reader, upstream_writer = await asyncio.wait_for(
            asyncio.open_connection(address, port, ssl=context, server_hostname=host), HEAD_TIMEOUT_SECONDS
        )
        upstream_writer.write(request)
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer), return_exceptions=True
            )
        finally:
            upstream_writer.close()

    async def _pipe(self, reader, writer) -> None:
        try:
            while True:
                chunk = await asyncio.wait_for(reader.read(65536), self.idle_seconds)
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                writer.close()


class HostMismatch(Exception):
    """The request's Host header names another host than the one the proxy connects to."""


def _headers_for(headers: list[str], host: str, port: int, *, default_port: int) -> list[str]:
    """The request's headers to send upstream: without hop-by-hop proxy headers, and with one
    Host that names the host (and port) the proxy connects to. A Host naming anything else is
    refused, not rewritten: on a shared host or CDN it would route the request (and any secret
    in it) to another tenant's app, and no honest client sends one, so a refusal that says why
    is both the safe and the simplest answer."""
    kept, named = [], []
    for line in headers:
        if not line or line.lower().startswith(("proxy-", "connection:")):
            continue
        if line.lower().startswith("host:"):
            named.append(line.split(":", 1)[1].strip())
            continue
        kept.append(line)
    if len(named) > 1:
        raise HostMismatch("more than one Host header")
    authority = host if port == default_port else f"{host}:{port}"
    if named:
        value = named[0].lower()
        name, _, port_text = value.rpartition(":") if ":" in value else (value, "", str(default_port))
        if name.rstrip(".") != host.lower().rstrip(".") or port_text != str(port):
            raise HostMismatch(f"the Host header names {named[0][:100]!r}, not {authority}, which this request goes to")
    return [f"Host: {authority}", *kept]


async def _substituted(head: bytes, reader: asyncio.StreamReader, credentials: list[dict]) -> bytes:
    """The request head (ending in a blank line) with placeholders replaced in header values,
    followed by its body when it has a Content-Length and a credential substitutes into bodies
    (read whole, bounded, the length set again). Other bodies are left to the pipe, untouched."""
    text = head.decode("latin-1")
    request_line, _, rest = text.partition("\r\n")
    headers = rest.split("\r\n")
    for credential in credentials:
        if credential.get("header", True):
            headers = [
                line if ":" not in line else _replace_value(line, credential["placeholder"], credential["value"])
                for line in headers
            ]
    length = next(
        (line.split(":", 1)[1].strip() for line in headers if line.lower().startswith("content-length:")), None
    )
    body = b""
    if length is not None and length.isdigit() and any(c.get("body") for c in credentials):
        size = int(length)
        if size <= BODY_MAX_BYTES:
            body = await reader.readexactly(size)
            for credential in credentials:
                if credential.get("body"):
                    body = body.replace(credential["placeholder"].encode(), credential["value"].encode())
            headers = [line for line in headers if not line.lower().startswith("content-length:")]
            headers.insert(0, f"Content-Length: {len(body)}")
    return ("\r\n".join([request_line, *[h for h in headers if h], "", ""])).encode("latin-1") + body


def _replace_value(line: str, placeholder: str, value: str) -> str:
    name, _, header_value = line.partition(":")
    return f"{name}:{header_value.replace(placeholder, value)}"


class Authority:
    """The proxy's own CA (made at start, in memory) and a certificate per intercepted host."""

    def __init__(self):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._serialization, self._oid = x509, hashes, serialization, NameOID
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.leaf_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Mango sandbox egress proxy")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._dir = tempfile.mkdtemp()

    def pem(self) -> str:
        return self.cert.public_bytes(self._serialization.Encoding.PEM).decode()

    def server_context(self, host: str) -> ssl.SSLContext:
        if host in self._contexts:
            return self._contexts[host]
        x509 = self._x509
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(self._oid.COMMON_NAME, host)]))
            .issuer_name(self.cert.subject)
            .public_key(self.leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, self._hashes.SHA256())
        )
        path = os.path.join(self._dir, f"{len(self._contexts)}.pem")
        encoding = self._serialization.Encoding.PEM
        key = self.leaf_key.private_bytes(
            encoding, self._serialization.PrivateFormat.PKCS8, self._serialization.NoEncryption()
        )
        with open(path, "wb") as handle:  # a tmpfs of the proxy's own; the leaf key is worthless elsewhere
            handle.write(cert.public_bytes(encoding) + key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(path)
        os.unlink(path)
        context.set_alpn_protocols(["http/1.1"])
        self._contexts[host] = context
        return context


async def _reply(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}
    body = f"mango egress proxy: {message}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + body
    )
    try:
        await writer.drain()
    except OSError:
        pass


async def main() -> None:
    config = json.loads(os.environ.get("MANGO_EGRESS", "{}"))
    proxy = Proxy(config)
    if config.get("credentials_on_stdin"):
        proxy.credentials = json.loads(sys.stdin.readline() or "{}").get("credentials") or []
        sys.stdin.close()
    if proxy.credentials:
        proxy.authority = Authority()
        print(f"ca-begin\n{proxy.authority.pem()}ca-end", flush=True)
    server = await asyncio.start_server(proxy.handle, "0.0.0.0", proxy.port, limit=HEAD_MAX_BYTES)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
