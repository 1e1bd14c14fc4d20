"""The outbound guard (core/outbound.py) against real servers on loopback: private addresses are
refused after DNS resolution and on every redirect unless listed in MANGO_OUTBOUND_PRIVATE_HOSTS,
and a guarded request still names its host (Host header) while going to the checked address."""

import asyncio
import gzip
import http.server
import importlib.util
import pathlib
import ssl
import tempfile
import threading
import time

import httpx2
import pytest

from core import outbound, transports
from core.outbound import OutboundRefused


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/redirect" and self.server.redirect_to:
            return self._reply(302, b"", [("Location", self.server.redirect_to)])
        if self.path == "/relative":  # a relative redirect: the client builds it against the URL
            return self._reply(307, b"", [("Location", "/landing")])
        if self.path.startswith("/big/"):
            return self._reply(200, b"x" * int(self.path.rsplit("/", 1)[1]))
        if self.path.startswith("/events/"):  # /events/<status>/<event size>,<event size>,...
            _, _, status, sizes = self.path.split("/")
            body = b"".join(b"data: " + b"x" * int(size) + b"\n\n" for size in sizes.split(","))
            return self._reply(int(status), body, [("Content-Type", "text/event-stream")])
        if self.path == "/gzip":
            return self._reply(200, gzip.compress(b"x" * 100_000), [("Content-Encoding", "gzip")])
        if self.path == "/trickle":  # a byte every 0.2 s: each read is well inside its timeout
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            return None
        body = f"host={self.headers['Host']} accept-encoding={self.headers['Accept-Encoding']}"
        return self._reply(200, body.encode())

    def _reply(self, status, body, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.redirect_to = None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


PRIVATE = (
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "::1",
    "fe80::1",
    "fc00::1",
    "::ffff:127.0.0.1",
    "0.0.0.0",
    "224.0.0.1",
    # IPv6 forms that carry a private IPv4 address, and the deprecated ranges
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b:1::808:808",  # local-use NAT64 (RFC 8215), whatever it embeds
    "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "::127.0.0.1",  # IPv4-compatible
    "::a00:1",
    "::ffff:0:7f00:1",  # IPv4-translated
    "::ffff:0:a9fe:a9fe",
    "fec0::1",  # deprecated site-local
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo with a private client (192.0.2.45)
    "2001:0:a00:1::1",  # Teredo with a private server
    "2001::1",
)
PUBLIC = (
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
    "::ffff:8.8.8.8",
)


def _egress_proxy():
    """sandboxes/egress_proxy.py, a program of the proxy image (not a package of the app)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "sandboxes" / "egress_proxy.py"
    spec = importlib.util.spec_from_file_location("egress_proxy_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_public_and_private_addresses():
    for address in PRIVATE:
        assert not outbound.is_public(address), address
    for address in PUBLIC:
        assert outbound.is_public(address), address


def test_egress_proxy_judges_addresses_as_the_guard_does():
    proxy_public = _egress_proxy()._public
    for address in PRIVATE + PUBLIC:
        assert proxy_public(address) == outbound.is_public(address), address


def test_loopback_refused_by_name_and_literal_unless_listed(settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    with pytest.raises(OutboundRefused, match="private address"):
        outbound.resolve("localhost", 80)
    with pytest.raises(OutboundRefused, match="MANGO_OUTBOUND_PRIVATE_HOSTS"):
        outbound.check_url("http://127.0.0.1:9/x")
    with pytest.raises(OutboundRefused, match="private address"):
        outbound.check_url("https://[::1]/")
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["localhost:8080"]
    assert "127.0.0.1" in outbound.resolve("localhost", 8080)
    with pytest.raises(OutboundRefused):  # listed with another port only
        outbound.resolve("localhost", 8081)
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    outbound.check_url("http://127.0.0.1:9/x")  # any port of a host listed without one


def test_check_url_refuses_what_is_not_a_plain_http_url(settings):
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    for url, reason in (
        ("ftp://example.com/x", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("https://user:pw@example.com/", "credentials"),
        ("https:///path", "no host"),
        ("http://example.com:99999/", "valid"),
    ):
        with pytest.raises(OutboundRefused, match=reason):
            outbound.check_url(url)
    outbound.check_url("https://name-that-does-not-resolve.invalid/repo.git")  # fails later, at connect


def test_guarded_client_refuses_loopback_and_serves_it_when_listed(settings, server):
    port = server.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    with httpx2.Client(transport=transports.GuardedTransport()) as client, pytest.raises(OutboundRefused):
        client.get(f"http://localhost:{port}/")
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    with httpx2.Client(transport=transports.GuardedTransport()) as client:
        response = client.get(f"http://localhost:{port}/")
    assert response.status_code == 200
    assert response.text.startswith(f"host=localhost:{port} ")  # sent to the checked address, still naming its host


def test_each_redirect_is_checked(settings, server):
    port = server.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    server.redirect_to = f"http://127.0.0.1:{port}/"  # same server, by an address that is not listed
    client = httpx2.Client(transport=transports.GuardedTransport(), follow_redirects=True)
    with client, pytest.raises(OutboundRefused, match=r"127\.0\.0\.1"):
        client.get(f"http://localhost:{port}/redirect")
    server.redirect_to = f"http://localhost:{port}/"
    with httpx2.Client(transport=transports.GuardedTransport(), follow_redirects=True) as client:
        assert client.get(f"http://localhost:{port}/redirect").text.startswith(f"host=localhost:{port} ")


def test_async_transport_is_guarded_too(settings, server):
    port = server.server_address[1]

    async def fetch():
        async with httpx2.AsyncClient(transport=transports.AsyncGuardedTransport()) as client:
            return (await client.get(f"http://localhost:{port}/")).text

    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = []
    with pytest.raises(OutboundRefused):
        asyncio.run(fetch())
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    assert asyncio.run(fetch()).startswith(f"host=localhost:{port} ")


def test_a_relative_redirect_keeps_the_name(settings, server):
    """The request is sent to the checked address but keeps its URL: a relative Location is
    resolved against the name (which is allowed), not against the address (which is not)."""
    port = server.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    with httpx2.Client(transport=transports.GuardedTransport(), follow_redirects=True) as client:
        response = client.get(f"http://localhost:{port}/relative")
    assert response.status_code == 200 and str(response.url) == f"http://localhost:{port}/landing"
    assert response.text.startswith(f"host=localhost:{port} ")
    assert str(response.history[0].request.url) == f"http://localhost:{port}/relative"


@pytest.fixture
def tls_server():
    """The same handler over TLS, its certificate for `localhost` only (signed by a test CA)."""
    from tests.sessions.test_sandbox_image import _test_ca

    ca, leaves = _test_ca(["localhost"])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.redirect_to = None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:
        pem.write(leaves["localhost"])
        pem.flush()
        context.load_cert_chain(pem.name)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, ssl.create_default_context(cadata=ca)
    httpd.shutdown()
    httpd.server_close()


def test_https_keeps_the_name_for_sni_and_the_certificate_across_a_relative_redirect(settings, tls_server):
    httpd, trust = tls_server
    port = httpd.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    with httpx2.Client(transport=transports.GuardedTransport(verify=trust), follow_redirects=True) as client:
        response = client.get(f"https://localhost:{port}/relative")
    assert response.status_code == 200 and str(response.url) == f"https://localhost:{port}/landing"
    assert response.text.startswith(f"host=localhost:{port} ")


def test_a_response_body_is_read_up_to_the_limit(settings, server):
    port = server.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    settings.MANGO_OUTBOUND_RESPONSE_MAX_BYTES = 10_000
    with httpx2.Client(transport=transports.GuardedTransport()) as client:
        assert len(client.get(f"http://localhost:{port}/big/10000").content) == 10_000
        with pytest.raises(transports.ResponseRefused, match="over 10000 bytes"):
            client.get(f"http://localhost:{port}/big/10001")
        with (
            client.stream("GET", f"http://localhost:{port}/big/50000") as response,  # streamed alike
            pytest.raises(transports.ResponseRefused),
        ):
            response.read()
        # Identity is asked for, and a compressed answer (which would grow after the count) refused.
        assert "accept-encoding=identity" in client.get(f"http://localhost:{port}/").text
        with pytest.raises(transports.ResponseRefused, match="compressed"):
            client.get(f"http://localhost:{port}/gzip")
    client = httpx2.Client(transport=transports.GuardedTransport(max_response_bytes=100))
    with client, pytest.raises(transports.ResponseRefused, match="over 100 bytes"):
        client.get(f"http://localhost:{port}/big/101")

    async def fetch(path):
        async with httpx2.AsyncClient(transport=transports.AsyncGuardedTransport()) as client:
            return (await client.get(f"http://localhost:{port}{path}")).content

    # An event stream is held one event at a time: its events count each, not all together; but a
    # redirect's or an error's body is read whole, so it counts whole whatever its type.
    with httpx2.Client(transport=transports.GuardedTransport()) as client:
        assert len(client.get(f"http://localhost:{port}/events/200/6000,6000,6000").content) > 18_000
        with pytest.raises(transports.ResponseRefused, match="event is over 10000 bytes"):
            client.get(f"http://localhost:{port}/events/200/6000,10000")
        with pytest.raises(transports.ResponseRefused, match="body is over 10000 bytes"):
            client.get(f"http://localhost:{port}/events/400/6000,6000")

    assert len(asyncio.run(fetch("/big/10000"))) == 10_000
    assert len(asyncio.run(fetch("/events/200/6000,6000,6000"))) > 18_000
    with pytest.raises(transports.ResponseRefused, match="over 10000 bytes"):
        asyncio.run(fetch("/big/10001"))


def test_total_timeout_ends_a_trickling_response(settings, server):
    """Each read gets a byte within its 1 s timeout; the transport's deadline still ends it."""
    port = server.server_address[1]
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"localhost:{port}"]
    started = time.monotonic()
    client = httpx2.Client(transport=transports.GuardedTransport(total_timeout=1.5), timeout=1)
    with client, pytest.raises(httpx2.ReadTimeout):
        client.get(f"http://localhost:{port}/trickle")
    assert time.monotonic() - started < 3

    async def fetch():
        transport = transports.AsyncGuardedTransport(total_timeout=1.5)
        async with httpx2.AsyncClient(transport=transport, timeout=1) as client:
            await client.get(f"http://localhost:{port}/trickle")

    started = time.monotonic()
    with pytest.raises(httpx2.ReadTimeout):
        asyncio.run(fetch())
    assert time.monotonic() - started < 3
