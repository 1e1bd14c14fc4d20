"""The egress proxy of a `limited` sandbox: the only thing the sandbox's network can reach.

It runs in a container of its own (sessions/sandbox/egress.py starts it with this file as its
program, standard library only), attached to the sandbox's internal network (no route out) and to
an egress network. Clients in the sandbox reach it through HTTP_PROXY / HTTPS_PROXY:

* ``CONNECT host:443`` (HTTPS, tunnelled as is) and absolute-form ``GET http://host/...`` (plain
  HTTP on port 80, one request per connection) to hosts of the allow-list only: exact names, or
  ``*.example.com`` for its subdomains;
* refused with 403: every other host, IP literals (no way around the names), other ports;
* the proxy resolves names itself and connects only to public addresses, unless the host (or
  host:port) is in ``private_hosts`` (the deployment's MANGO_OUTBOUND_PRIVATE_HOSTS);
* bounded: at most ``max_connections`` tunnels at once (503 beyond), a request head of 16 KiB
  read within 30 s, a tunnel closed after ``idle_seconds`` without traffic.

Configuration: the JSON in $MANGO_EGRESS (allowed, private_hosts, listen_port, max_connections,
idle_seconds). Prints ``ready`` on stdout once listening; one line per refusal on stderr.
"""

import asyncio
import ipaddress
import json
import os
import socket
import sys

HEAD_MAX_BYTES = 16 * 1024
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
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class Proxy:
    def __init__(self, config: dict):
        self.allowed = list(config.get("allowed") or [])
        self.private_hosts = {entry.lower() for entry in config.get("private_hosts") or []}
        self.idle_seconds = float(config.get("idle_seconds", 300))
        self.slots = asyncio.Semaphore(int(config.get("max_connections", 64)))
        self.port = int(config.get("listen_port", 3128))

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
            kept = [line for line in lines[1:] if line and not line.lower().startswith(("proxy-", "connection:"))]
            rest = "\r\n".join([f"{method} /{path} {version}", *kept, "Connection: close", "", ""]).encode("latin-1")
        else:
            await _reply(writer, 400, "only CONNECT and absolute http:// requests go through this proxy")
            return
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            await _reply(writer, 400, "bad port")
            return
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
    proxy = Proxy(json.loads(os.environ.get("MANGO_EGRESS", "{}")))
    server = await asyncio.start_server(proxy.handle, "0.0.0.0", proxy.port, limit=HEAD_MAX_BYTES)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
