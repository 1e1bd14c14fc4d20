"""Issue #22 items 1 and 3 with real Docker on the real image (mango-sandbox:bookworm): the tools
agents reach for are there, and `limited` networking is an allow-list enforced by the egress
proxy — an allowed host is reached by name over HTTP and HTTPS CONNECT, any other is refused,
and the ways around it (direct IP addresses, other ports, DNS) fail.

The allowed and the other host are containers on a network the test creates (the proxies'
egress network here, MANGO_SANDBOX_EGRESS_NETWORK); their private addresses are let through by
MANGO_SANDBOX_PRIVATE_HOSTS, as an operator would for an internal registry."""

import time
import uuid

import pytest

import sandboxes as sandbox
from sandboxes import docker as docker_backend
from sandboxes import policy, registries

pytestmark = pytest.mark.docker

REAL_IMAGE = "mango-sandbox:bookworm"
# Serves "name:port" on 80, 443 and 8080 (plain HTTP everywhere: the CONNECT tunnel carries bytes).
TARGET_SERVER = """
import http.server, socketserver, sys, threading
name = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{name}:{self.server.server_address[1]}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
for port in (443, 8080):
    threading.Thread(target=http.server.ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
"""


@pytest.fixture
def real_image(settings):
    settings.MANGO_SANDBOX = "docker"
    settings.MANGO_SANDBOX_IMAGE = REAL_IMAGE
    settings.MANGO_SANDBOX_PROXY_IMAGE = REAL_IMAGE


@pytest.fixture
def sandboxes(real_image):
    made = []

    def make(networking: dict | None = None, workspace_id: str = "wrkspc_img") -> str:
        session_id = f"sesn_img{time.time_ns()}"
        made.append(session_id)
        sandbox.ensure(session_id=session_id, workspace_id=workspace_id, networking=networking)
        return session_id

    yield make
    for session_id in made:
        sandbox.remove(session_id=session_id)


@pytest.fixture
def egress(settings, docker_client):
    """An egress network of the test's own with two web servers on it: (allowed, other) names."""
    suffix = uuid.uuid4().hex[:8]
    network = docker_client.networks.create(f"mango-test-egress-{suffix}", driver="bridge")
    names = (f"allowed-{suffix}", f"other-{suffix}")
    targets = [
        docker_client.containers.run(
            REAL_IMAGE, ["python3", "-c", TARGET_SERVER, name], name=name, network=network.name, detach=True
        )
        for name in names
    ]
    settings.MANGO_SANDBOX_EGRESS_NETWORK = network.name
    settings.MANGO_SANDBOX_PRIVATE_HOSTS = list(names)
    for target in targets:  # listening before the test starts
        deadline = time.monotonic() + 90
        while target.exec_run(
            ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 80))"]
        ).exit_code:
            assert time.monotonic() < deadline, target.logs()
            time.sleep(0.2)
    yield names
    for target in targets:
        target.remove(force=True)
    network.reload()
    for container in network.containers:  # proxies of sandboxes a failed test left
        network.disconnect(container, force=True)
    network.remove()


def sh(session_id: str, command: str, timeout: float = 60) -> tuple[int | None, str]:
    result = sandbox.exec_command(session_id=session_id, command=command, timeout=timeout)
    return result.exit_code, result.output.decode(errors="replace")


def test_real_image_has_the_tools_and_runs_them_as_the_sandbox_user(sandboxes, settings):
    box = sandboxes()
    status, out = sh(
        box,
        "python3 --version && pip --version && python3 -m venv /tmp/v && /tmp/v/bin/python -c 'print(42)' && "
        "git --version && node -e 'console.log(6*7)' && npm --version && curl --version && rg --version && "
        "jq --version && ps --version && gcc --version && make --version && id -u",
    )
    assert status == 0, out
    for tool in ("Python 3.11", "pip ", "git version", "curl ", "ripgrep", "jq-", "procps", "gcc ", "GNU Make"):
        assert tool in out, tool
    assert out.count("42") >= 2 and out.strip().endswith(str(settings.MANGO_SANDBOX_UID))
    # A C program builds and runs, and git works in the workspace without any global config.
    status, out = sh(
        box,
        "cd /workspace && printf 'int main(){return 7;}' > a.c && gcc a.c -o a && ./a; echo rc=$?; "
        "git init -q r && cd r && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m one && "
        "git log --oneline",
    )
    assert "rc=7" in out and "one" in out, out


def test_limited_allows_only_the_listed_hosts_by_name(sandboxes, egress, docker_client):
    allowed, other = egress
    box = sandboxes({"type": "limited", "allowed_hosts": [allowed]})
    # HTTP through the proxy, by name.
    status, out = sh(box, f"curl -sS --max-time 10 http://{allowed}/")
    assert (status, out) == (0, f"{allowed}:80"), out
    # HTTPS CONNECT to 443 (a tunnel: the bytes inside are the client's).
    status, out = sh(box, f"curl -sS --max-time 10 -p http://{allowed}:443/")
    assert (status, out) == (0, f"{allowed}:443"), out
    # Python's and node's clients read the same variables.
    status, out = sh(
        box, f"python3 -c \"import urllib.request; print(urllib.request.urlopen('http://{allowed}/').read())\""
    )
    assert f"{allowed}:80" in out, out
    # Another host: refused by the proxy, naming why.
    status, out = sh(box, f"curl -sS --max-time 10 -w ' %{{http_code}}' http://{other}/")
    assert "not in the environment's allowed hosts" in out and out.endswith(" 403"), out
    status, out = sh(box, f"curl -sS --max-time 10 -p http://{other}:443/ 2>&1")
    assert status != 0 and "403" in out, out
    # Another port of the allowed host: refused.
    status, out = sh(box, f"curl -sS --max-time 10 -w ' %{{http_code}}' http://{allowed}:8080/")
    assert "port 8080 is not allowed" in out and out.endswith(" 403"), out
    status, out = sh(box, f"curl -sS --max-time 10 -p http://{allowed}:8080/ 2>&1")
    assert status != 0, out
    # The allowed host's address, through the proxy: refused (names only).
    target_ip = docker_client.containers.get(allowed).attrs["NetworkSettings"]["Networks"]
    (target_ip,) = [n["IPAddress"] for n in target_ip.values()]
    status, out = sh(box, f"curl -sS --max-time 10 -w ' %{{http_code}}' http://{target_ip}/")
    assert "IP addresses are not allowed" in out and out.endswith(" 403"), out
    # Around the proxy: no route to the address, no DNS, no other way out.
    status, out = sh(box, f"curl -sS --noproxy '*' --max-time 5 http://{target_ip}/ 2>&1; echo rc=$?")
    assert "rc=0" not in out and allowed not in out, out
    # A lookup fails (or times out): no resolver answers. All at once: each may wait out its timeout.
    names = [allowed, *registries.package_registries()]
    for name, out in at_once(box, [f"timeout 20 getent hosts {name}" for name in names]).items():
        assert "rc=0" not in out and "." not in out.split("rc=")[0].strip(), (name, out)
    # Docker gives the internal bridge a gateway, but nothing is forwarded off it, and the host
    # drops what the bridge sends it (sandboxes/firewall.py).
    connect = "python3 -c \"import socket; socket.create_connection(('{}', {}), 3)\" 2>&1"
    targets = [("1.1.1.1", 53), ("1.1.1.1", 443), (target_ip, 80)]
    for command, out in at_once(box, [connect.format(address, port) for address, port in targets]).items():
        assert "rc=1" in out and ("TimeoutError" in out or "unreachable" in out.lower()), (command, out)


def at_once(box: str, commands: list[str]) -> dict[str, str]:
    """Runs the commands side by side in one exec; each one's output and its `rc=` exit status."""
    parts = [f"({command} > /tmp/at{n} 2>&1; echo rc=$? >> /tmp/at{n}) &" for n, command in enumerate(commands)]
    script = " ".join(parts) + " wait; " + "; ".join(f"echo '@@{n}'; cat /tmp/at{n}" for n in range(len(commands)))
    _status, out = sh(box, script)
    chunks = out.split("@@")[1:]
    outputs = {commands[int(chunk.split("\n", 1)[0])]: chunk.split("\n", 1)[1] for chunk in chunks}
    assert len(outputs) == len(commands), out
    return outputs


def test_the_workers_private_hosts_are_not_the_sandboxes(sandboxes, egress, settings):
    """MANGO_OUTBOUND_PRIVATE_HOSTS is for the worker's own connections (an internal git server,
    a local MCP server): a tenant's sandbox that lists such a host is still refused its private
    address; only MANGO_SANDBOX_PRIVATE_HOSTS lets a sandbox's proxy reach one."""
    allowed, _ = egress
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [allowed, f"{allowed}:80", f"{allowed}:443"]
    settings.MANGO_SANDBOX_PRIVATE_HOSTS = []
    box = sandboxes({"type": "limited", "allowed_hosts": [allowed]})
    status, out = sh(box, f"curl -sS --max-time 10 -w ' %{{http_code}}' http://{allowed}/")
    assert "resolves to a private address" in out and out.endswith(" 403"), out
    status, out = sh(box, f"curl -sS --max-time 10 -p http://{allowed}:443/ 2>&1")
    assert status != 0 and "403" in out, out


def test_limited_package_managers_and_mcp_hosts_join_the_allow_list(settings):
    settings.MANGO_SANDBOX_PACKAGE_REGISTRIES = ["mirror.example.org", "Files.Example.org "]
    networking = {"type": "limited", "allowed_hosts": ["git.example.com"], "allow_package_managers": True}
    assert policy.egress_hosts(networking) == ["files.example.org", "git.example.com", "mirror.example.org"]
    # Unset, the registries are this machine's: apt's sources, pip's index, npm's registry.
    settings.MANGO_SANDBOX_PACKAGE_REGISTRIES = []
    machine = registries.machine_registries()
    assert (
        machine["apt"]
        and machine["pip"]
        and policy.egress_hosts(networking)
        == sorted({"git.example.com", *machine["apt"], *machine["pip"], *machine["npm"]})
    )
    networking = {"type": "limited", "allowed_hosts": [], "allow_mcp_servers": True}
    assert policy.egress_hosts(networking, ["https://mcp.example.com/mcp", "http://tools.internal:8080/sse"]) == [
        "mcp.example.com",
        "tools.internal",
    ]
    assert policy.egress_hosts({"type": "limited", "allowed_hosts": []}) == []  # no network at all
    assert policy.egress_hosts({"type": "unrestricted"}) == []


def test_limited_without_an_allow_list_has_no_network_and_no_proxy(sandboxes, docker_client):
    box = sandboxes({"type": "limited", "allowed_hosts": []})
    container = docker_client.containers.get(sandbox.container_name(box))
    assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    assert not docker_client.containers.list(all=True, filters={"name": docker_backend.proxy_name(box)})


def test_proxy_is_bounded_and_goes_with_its_sandbox(sandboxes, egress, docker_client, settings):
    """What one sandbox can make its proxy hold: at most MANGO_SANDBOX_PROXY_MAX_CONNECTIONS tunnels
    (503 beyond), in a container of fixed memory and pids; removing the session removes it."""
    allowed, _ = egress
    settings.MANGO_SANDBOX_PROXY_MAX_CONNECTIONS = 3
    box = sandboxes({"type": "limited", "allowed_hosts": [allowed]})
    proxy = docker_client.containers.get(docker_backend.proxy_name(box))
    host_config = proxy.attrs["HostConfig"]
    assert host_config["CapDrop"] == ["ALL"] and host_config["ReadonlyRootfs"] is True
    assert host_config["Memory"] == 96 * 1024 * 1024 and host_config["PidsLimit"] == policy.pids_limit(32)
    # Three idle tunnels held open, then a fourth connection: refused with 503.
    script = (
        "import os, socket, time\n"
        "host, port = os.environ['HTTP_PROXY'].rsplit('/', 1)[1].split(':')\n"
        "held = []\n"
        "for _ in range(3):\n"
        "    s = socket.create_connection((host, int(port)), 5)\n"
        f"    s.sendall(b'CONNECT {allowed}:443 HTTP/1.1\\r\\n\\r\\n')\n"
        "    assert b' 200 ' in s.recv(100); held.append(s)\n"
        "s = socket.create_connection((host, int(port)), 5)\n"
        f"s.sendall(b'CONNECT {allowed}:443 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(200).split(b'\\r\\n')[0].decode())\n"
    )
    sandbox.write_file(session_id=box, path="/tmp/hold.py", data=script.encode())
    _, out = sh(box, "python3 /tmp/hold.py")
    assert out.strip() == "HTTP/1.1 503 Service Unavailable", out
    sandbox.remove(session_id=box)
    assert not docker_client.containers.list(all=True, filters={"name": docker_backend.proxy_name(box)})


# Echoes what it received — the Authorization header and the body — over TLS on 443 (a
# certificate for its name from the test's CA, given in $CERT) and plain HTTP on 80.
ECHO_SERVER = """
import http.server, json, os, ssl, threading
open("/tmp/cert.pem", "w").write(os.environ["CERT"])
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        out = json.dumps({"auth": self.headers.get("Authorization"), "body": body, "host": self.headers.get("Host")})
        out = out.encode()
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
tls = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain("/tmp/cert.pem")
tls.socket = context.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
"""


def _test_ca(names: list[str]) -> tuple[str, dict[str, str]]:
    """A CA of the test's own and a certificate (with its key) per name, as PEM."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test upstream CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    leaves = {}
    for name in names:
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(subject)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        leaves[name] = (
            leaf.public_bytes(pem)
            + leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        ).decode()
    return ca.public_bytes(serialization.Encoding.PEM).decode(), leaves


@pytest.fixture
def echo_hosts(settings, docker_client, tmp_path):
    """Two TLS echo servers on an egress network of the test's own, their CA trusted upstream."""
    suffix = uuid.uuid4().hex[:8]
    names = (f"api-{suffix}", f"elsewhere-{suffix}")
    ca, leaves = _test_ca(list(names))
    (tmp_path / "ca.pem").write_text(ca)
    settings.MANGO_OUTBOUND_CA_FILE = str(tmp_path / "ca.pem")
    network = docker_client.networks.create(f"mango-test-egress-{suffix}", driver="bridge")
    servers = [
        docker_client.containers.run(
            REAL_IMAGE,
            ["python3", "-c", ECHO_SERVER],
            name=name,
            network=network.name,
            detach=True,
            environment={"CERT": leaves[name]},
        )
        for name in names
    ]
    settings.MANGO_SANDBOX_EGRESS_NETWORK = network.name
    settings.MANGO_SANDBOX_PRIVATE_HOSTS = list(names)
    for server in servers:
        deadline = time.monotonic() + 90
        while server.exec_run(
            ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 443))"]
        ).exit_code:
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.2)
    yield names
    for server in servers:
        server.remove(force=True)
    network.reload()
    for container in network.containers:
        network.disconnect(container, force=True)
    network.remove()


SECRET = "vault-secret-5b1d9e"
PLACEHOLDER = "mango-credential-placeholder-0f3c"


@pytest.mark.parametrize("kind", ["limited", "unrestricted"])
def test_environment_variable_credentials_are_substituted_by_the_proxy_only(sandboxes, echo_hosts, docker_client, kind):
    """The sandbox holds a placeholder; the proxy puts the secret into requests to the
    credential's hosts (headers and bodies, as allowed), over HTTPS too, and nowhere else. The
    secret is in no variable, file or argument of the sandbox or the proxy."""
    api, elsewhere = echo_hosts
    credential = {
        "name": "API_TOKEN",
        "placeholder": PLACEHOLDER,
        "value": SECRET,
        "hosts": [api],
        "header": True,
        "body": True,
    }
    networking = {"type": kind, "allowed_hosts": [api, elsewhere], "credentials": [credential]}
    if kind == "unrestricted":
        networking = {"type": "unrestricted", "credentials": [credential]}
    box = sandboxes(networking)
    assert sh(box, "echo $API_TOKEN")[1].strip() == PLACEHOLDER
    # HTTPS to the credential's host: the proxy terminates TLS with a CA the sandbox trusts.
    status, out = sh(box, f'curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://{api}/')
    assert status == 0 and f'"auth": "Bearer {SECRET}"' in out, out
    status, out = sh(box, f'curl -sS --max-time 10 -d "token=$API_TOKEN" https://{api}/')
    assert f'"body": "token={SECRET}"' in out, out
    fetch = (
        "import os, urllib.request as u; "
        f"r = u.Request('https://{api}/', headers={{'Authorization': os.environ['API_TOKEN']}}); "
        "print(u.urlopen(r).read().decode())"
    )
    sandbox.write_file(session_id=box, path="/tmp/fetch.py", data=fetch.encode())
    status, out = sh(box, "python3 /tmp/fetch.py")
    assert f'"auth": "{SECRET}"' in out, out
    # Plain HTTP to it: never substituted (cleartext); the placeholder passes as it is.
    status, out = sh(box, f'curl -sS --max-time 10 -H "Authorization: $API_TOKEN" -d "t=$API_TOKEN" http://{api}/')
    assert PLACEHOLDER in out and SECRET not in out and f'"host": "{api}"' in out, out
    # Another host: the placeholder passes untouched (TLS end to end: the proxy only tunnels).
    status, out = sh(
        box, f'curl -sS -k --max-time 10 -H "Authorization: $API_TOKEN" -d "t=$API_TOKEN" https://{elsewhere}/'
    )
    assert PLACEHOLDER in out and SECRET not in out, out
    status, out = sh(box, f'curl -sS --max-time 10 -H "Authorization: $API_TOKEN" http://{elsewhere}/')
    assert PLACEHOLDER in out and SECRET not in out, out
    # Nowhere in the sandbox, nor in what Docker keeps of either container.
    status, out = sh(
        box,
        "env; cat /proc/1/environ /proc/self/environ; ls -la /usr/local/share/mango-ca; "
        "grep -rl vault-secret /etc /usr/local /workspace /tmp 2>/dev/null; true",
    )
    assert SECRET not in out and "proxy-ca.pem" in out, out
    for name in (sandbox.container_name(box), docker_backend.proxy_name(box)):
        assert SECRET not in str(docker_client.api.inspect_container(name)), name


def test_the_proxy_sends_a_secret_only_to_the_host_it_connected_to(sandboxes, echo_hosts):
    """A Host header naming another host (a shared host or CDN would route by it, secret
    included) is refused inside the intercepted TLS and in plain HTTP; inside the TLS only an
    origin-form target goes; the Host that goes upstream is the CONNECT's."""
    api, elsewhere = echo_hosts
    credential = {"name": "API_TOKEN", "placeholder": PLACEHOLDER, "value": SECRET, "hosts": [api], "header": True}
    credential["body"] = True
    box = sandboxes({"type": "limited", "allowed_hosts": [api, elsewhere], "credentials": [credential]})
    curl = 'curl -sS --max-time 10 -w " %{http_code}" -H "Authorization: Bearer $API_TOKEN"'
    _, out = sh(box, f"{curl} https://{api}/")
    assert f'"auth": "Bearer {SECRET}"' in out and f'"host": "{api}"' in out and out.endswith(" 200"), out
    _, out = sh(box, f"{curl} -H 'Host: {api}:443' https://{api}/")  # the same host, port spelled out
    assert f'"auth": "Bearer {SECRET}"' in out and out.endswith(" 200"), out
    for host in (elsewhere, "evil.example", f"{api}.evil.example", f"{api}:8443"):
        _, out = sh(box, f"{curl} -H 'Host: {host}' https://{api}/")
        assert "the Host header names" in out and out.endswith(" 403") and SECRET not in out, (host, out)
        _, out = sh(box, f"{curl} -H 'Host: {host}' http://{api}/")
        assert "the Host header names" in out and out.endswith(" 403") and SECRET not in out, (host, out)
    # Two Host headers: refused as well.
    two = (
        "import http.client, os\n"
        "host, port = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')\n"
        "c = http.client.HTTPSConnection(host, int(port), timeout=10)\n"
        f"c.set_tunnel('{api}', 443)\n"
        "c.putrequest('GET', '/', skip_host=True)\n"
        f"c.putheader('Host', '{api}'); c.putheader('Host', '{elsewhere}')\n"
        f"c.putheader('Authorization', '{PLACEHOLDER}'); c.endheaders()\n"
        "r = c.getresponse(); print(r.status, r.read().decode())\n"
    )
    sandbox.write_file(session_id=box, path="/tmp/two.py", data=two.encode())
    _, out = sh(box, "python3 /tmp/two.py")
    assert out.startswith("403 ") and "more than one Host header" in out and SECRET not in out, out
    # Absolute-form targets inside the intercepted TLS connection: refused.
    for target in (f"https://{elsewhere}/", f"https://{api}/", "*"):
        _, out = sh(box, f"{curl} --request-target '{target}' https://{api}/")
        assert "only origin-form targets" in out and out.endswith(" 400") and SECRET not in out, (target, out)


@pytest.mark.django_db(transaction=True)
def test_a_sessions_vault_credentials_go_to_its_proxy_and_only_placeholders_to_its_sandbox(
    sdk, api_key, no_turns, real_image, echo_hosts, docker_client
):
    """The wiring: a session's vault_ids → the worker's networking (sessions/runtime/sandbox_ready.py) →
    the proxy substitutes the vault's value; the sandbox sees a placeholder derived per session."""
    from sessions.models import Session
    from sessions.runtime.sandbox_ready import sandbox_networking

    api, elsewhere = echo_hosts
    vault = sdk.beta.vaults.create(display_name="team")
    sdk.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_TOKEN",
            "secret_value": SECRET,
            "networking": {"type": "limited", "allowed_hosts": [api]},
        },
    )
    env = sdk.beta.environments.create(
        name="e", config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": [api, elsewhere]}}
    )
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    row = Session.objects.get(id=session.id)
    networking = sandbox_networking(row)
    (credential,) = networking["credentials"]
    assert credential["hosts"] == [api] and credential["header"] is True and credential["body"] is False
    sandbox.ensure(session_id=row.id, workspace_id=row.workspace_id, networking=networking)
    try:
        placeholder = sh(row.id, "echo $API_TOKEN")[1].strip()
        assert placeholder.startswith("mango-vault-") and placeholder == credential["placeholder"]
        _, out = sh(row.id, f'curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://{api}/')
        assert f'"auth": "Bearer {SECRET}"' in out, out
        _, out = sh(row.id, f'curl -sS --max-time 10 -d "t=$API_TOKEN" https://{api}/')
        assert SECRET not in out and placeholder in out, out  # no body substitution unless the credential says so
        _, out = sh(row.id, f'curl -sS --max-time 10 -H "Authorization: $API_TOKEN" http://{elsewhere}/')
        assert placeholder in out and SECRET not in out, out
        assert SECRET not in sh(row.id, "env; cat /proc/*/environ 2>/dev/null")[1]
        for name in (sandbox.container_name(row.id), docker_backend.proxy_name(row.id)):
            assert SECRET not in str(docker_client.api.inspect_container(name)), name
    finally:
        sandbox.remove(session_id=row.id)


class _Control:
    """What the tool executor asks of its turn: nothing stops here."""

    def check_stop(self) -> None:
        pass

    def check_deleted(self) -> None:
        pass


def _session_with_vault(sdk, *, allowed_hosts: list[str], credential_hosts: list[str]):
    vault = sdk.beta.vaults.create(display_name="team")
    credential = sdk.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_TOKEN",
            "secret_value": SECRET,
            "networking": {"type": "limited", "allowed_hosts": credential_hosts},
        },
    )
    env = sdk.beta.environments.create(
        name="e", config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": allowed_hosts}}
    )
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    return vault, credential, session


def _tool_call_sandbox(session_id: str) -> None:
    """What a sandbox tool call does first (sessions/runtime/sandbox_ready.py): the sandbox made,
    or its proxy brought up to date."""
    from sessions.models import Session
    from sessions.runtime.sandbox_ready import sandbox_ready

    sandbox_ready(_Control(), Session.objects.get(id=session_id))


@pytest.mark.django_db(transaction=True)
def _worker_removes_the_proxy(session_id: str) -> None:
    """The task the vault change enqueued (sessions.sandbox_proxy_remove), run as a worker runs it:
    this test's turns go to a queue no worker reads (no_turns)."""
    from sessions.tasks import session_sandbox_proxy_remove

    session_sandbox_proxy_remove(session_id)


def test_a_revoked_or_changed_credential_leaves_the_running_sandboxs_proxy(
    sdk, api_key, no_turns, real_image, echo_hosts, docker_client
):
    """A new secret, an archived credential or vault: after the commit the running sandbox's
    egress proxy (which held the secret since it started) is gone, so no request carries the old
    value; the next tool call makes it again with what the vault holds then. The removal is a
    worker's task (the API does not call Docker): the test runs it as the worker would."""
    api, elsewhere = echo_hosts
    vault, credential, session = _session_with_vault(sdk, allowed_hosts=[api, elsewhere], credential_hosts=[api])
    new_secret = "vault-secret-rotated-3e8a"
    fetch = f'curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://{api}/'
    try:
        _tool_call_sandbox(session.id)
        _, out = sh(session.id, fetch)
        assert f'"auth": "Bearer {SECRET}"' in out, out

        # A new secret: the proxy that holds the old one goes at the commit.
        sdk.beta.vaults.credentials.update(
            credential.id, vault_id=vault.id, auth={"type": "environment_variable", "secret_value": new_secret}
        )
        _worker_removes_the_proxy(session.id)
        assert not docker_client.containers.list(all=True, filters={"name": docker_backend.proxy_name(session.id)})
        _, out = sh(session.id, fetch)
        assert SECRET not in out and new_secret not in out, out
        _tool_call_sandbox(session.id)
        _, out = sh(session.id, fetch)
        assert f'"auth": "Bearer {new_secret}"' in out and SECRET not in out, out
        # The same sandbox (its placeholder and files stay), a new proxy.
        assert sh(session.id, "echo $API_TOKEN")[1].strip().startswith("mango-vault-")

        # Archived: gone at the commit; the proxy made again substitutes nothing.
        sdk.beta.vaults.credentials.archive(credential.id, vault_id=vault.id)
        _worker_removes_the_proxy(session.id)
        _, out = sh(session.id, fetch)
        assert new_secret not in out and SECRET not in out, out
        _tool_call_sandbox(session.id)
        _, out = sh(session.id, fetch.replace("curl ", "curl -k "))  # tunnelled untouched: the host's own TLS
        assert '"auth": "Bearer mango-vault-' in out and new_secret not in out, out
    finally:
        sandbox.remove(session_id=session.id)

    # An archived vault: the same, for a session of another vault.
    vault, credential, session = _session_with_vault(sdk, allowed_hosts=[api], credential_hosts=[api])
    try:
        _tool_call_sandbox(session.id)
        assert f'"auth": "Bearer {SECRET}"' in sh(session.id, fetch)[1]
        sdk.beta.vaults.archive(vault.id)
        _worker_removes_the_proxy(session.id)
        assert not docker_client.containers.list(all=True, filters={"name": docker_backend.proxy_name(session.id)})
        _tool_call_sandbox(session.id)
        _, out = sh(session.id, fetch.replace("curl ", "curl -k "))
        assert '"auth": "Bearer mango-vault-' in out and SECRET not in out, out
    finally:
        sandbox.remove(session_id=session.id)


@pytest.mark.django_db(transaction=True)
def test_a_credential_for_hosts_the_environment_does_not_allow_is_a_session_error(
    sdk, api_key, no_turns, real_image, echo_hosts
):
    """When the sandbox is made (once), each environment_variable credential whose hosts the
    `limited` environment does not let through is a credential_host_unreachable_error naming the
    credential and its vault, as the SDK parses it; a reachable one is none."""
    api, elsewhere = echo_hosts
    vault, credential, session = _session_with_vault(sdk, allowed_hosts=[elsewhere], credential_hosts=[api])
    try:
        _tool_call_sandbox(session.id)
        _tool_call_sandbox(session.id)  # the sandbox is not made again: no second error
        errors = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
        assert len(errors) == 1, errors
        error = errors[0].error
        assert error.type == "credential_host_unreachable_error"
        assert (error.credential_id, error.vault_id, error.retry_status.type) == (credential.id, vault.id, "exhausted")
        assert api in error.message and SECRET not in error.model_dump_json()
    finally:
        sandbox.remove(session_id=session.id)
    _, _, session = _session_with_vault(sdk, allowed_hosts=[f"*.{api}", api], credential_hosts=[api])
    try:
        _tool_call_sandbox(session.id)
        assert not [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
    finally:
        sandbox.remove(session_id=session.id)


@pytest.mark.django_db(transaction=True)
def test_a_credential_the_server_can_no_longer_decrypt_is_a_session_error_and_the_sandbox_starts(
    sdk, api_key, no_turns, real_image, echo_hosts, settings
):
    """MANGO_VAULT_KEY lost the key a credential was stored under: the tool call still gets its
    sandbox (it was a failed tool call with an unknown error), without that credential's
    variable, and the session says once, in words the SDK parses, which credential of which
    vault it could not read."""
    from cryptography.fernet import Fernet

    api, _ = echo_hosts
    vault, credential, session = _session_with_vault(sdk, allowed_hosts=[api], credential_hosts=[api])
    settings.MANGO_VAULT_KEY = [Fernet.generate_key().decode()]  # another key: the stored secret is unreadable
    try:
        _tool_call_sandbox(session.id)
        _tool_call_sandbox(session.id)  # the sandbox is not made again: no second error
        assert sh(session.id, 'echo "[${API_TOKEN-unset}]"')[1].strip() == "[unset]"
        errors = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
        assert len(errors) == 1, errors
        error = errors[0].error
        assert (error.type, error.retry_status.type) == ("unknown_error", "exhausted")
        assert credential.id in error.message and vault.id in error.message and SECRET not in error.model_dump_json()
    finally:
        sandbox.remove(session_id=session.id)


def test_which_credential_hosts_a_limited_environment_reaches():
    limited = {"type": "limited"}
    check = policy.unreachable_credential_hosts
    assert check(["api.example.com"], limited, ["api.example.com"]) == []
    assert check(["api.example.com"], limited, ["*.example.com"]) == []
    assert check(["api.example.com", "other.example"], limited, ["api.example.com"]) == ["other.example"]
    assert check(["10.0.0.5"], limited, ["10.0.0.5"]) == ["10.0.0.5"]  # the proxy takes names only
    assert check(["*.example.com"], limited, ["api.example.com"]) == []  # some name under it
    assert check(["*.example.com"], limited, ["*.api.example.com"]) == []
    assert check(["*.api.example.com"], limited, ["*.example.com"]) == []
    assert check(["*.example.com"], limited, ["example.com", "api.other.com"]) == ["*.example.com"]
    assert check(["api.example.com"], limited, []) == ["api.example.com"]  # no network at all
    assert check(["api.example.com"], {"type": "unrestricted"}, []) == []
    assert check(None, limited, []) == []  # every host: nothing to name
