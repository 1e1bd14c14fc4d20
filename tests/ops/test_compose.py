"""The compose stack, up for real on images built from Debian's packages (`make compose-images`,
deploy/compose.debian.yml): PostgreSQL, Redis, SeaweedFS, the bucket, migrations, the API, a
worker and beat, the Docker API proxy and the sandbox image. The official SDK uploads and lists
a file, and a session's turn runs against the scripted upstream (on the host, reached from the
worker's container), its bash call in the stack's Debian sandbox (python3, git, the sandbox
user); then the session is deleted (its sandbox removed) and the stack and its volumes are torn
down.

The images are built by scripts/compose_images.sh, which reuses Docker's build cache: a cold
build takes minutes (docs/packaging.md has the figures), a cached one seconds. Skipped without
docker-compose or dockerd; MANGO_TEST_COMPOSE=0 skips it too."""

import ipaddress
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import anthropic
import httpx
import pytest

from tests.ops.checkout import free_port
from tests.scripted_model import ScriptedModel, echo, tool_use

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed (.ci/run has it)"),
    pytest.mark.skipif(os.environ.get("MANGO_TEST_COMPOSE") == "0", reason="MANGO_TEST_COMPOSE=0"),
]


def _docker_bridge_gateway() -> str:
    out = subprocess.run(
        ["docker", "network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    config = json.loads(out)[0]  # the host's docker0 address, where host-gateway points
    return config.get("Gateway") or str(ipaddress.ip_network(config["Subnet"])[1])


class Stack:
    def __init__(self, tmp_path: Path, *, api_port: int, model_url: str):
        self.project = f"mango-ops-{os.getpid()}"
        override = tmp_path / "compose.test.yml"
        # The worker reaches the scripted upstream on the host's docker0 address.
        override.write_text(
            'version: "3.8"\nservices:\n  worker:\n    extra_hosts: ["host.docker.internal:host-gateway"]\n'
        )
        self.files = ["-f", "docker-compose.yml", "-f", "deploy/compose.debian.yml", "-f", str(override)]
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "ANTHROPIC_", "DJANGO_"))},
            "POSTGRES_PASSWORD": "pg-secret-ops",
            "DJANGO_SECRET_KEY": "k" * 60,
            "MANGO_S3_SECRET": "s3-secret-ops",
            "MANGO_S3_ADMIN_SECRET": "s3-admin-secret-ops",
            "MANGO_API_PORT": str(api_port),
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted",
        }

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["docker-compose", "-p", self.project, *self.files, *args], cwd=ROOT, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check:
            command = " ".join(args)
            assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        return result

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60", check=False, timeout=120).stdout[-12000:]


def _sandboxes(session_id: str, kind: str = "container") -> list[str]:
    """The session's sandbox containers (or volumes) on the host's engine: the stack's worker
    makes them."""
    listing = ["docker", "ps", "-aq"] if kind == "container" else ["docker", "volume", "ls", "-q"]
    listed = subprocess.run(
        [*listing, "--filter", f"label=mango.session={session_id}"], capture_output=True, text=True, timeout=30,
        check=True,
    )  # fmt: skip
    return listed.stdout.split()


def test_the_compose_stack_serves_files_and_runs_a_turn(tmp_path):
    timings = {}
    started = time.monotonic()
    built = subprocess.run(
        ["bash", "scripts/compose_images.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1500
    )
    assert built.returncode == 0, built.stderr[-5000:]
    timings["images"] = time.monotonic() - started

    gateway = _docker_bridge_gateway()
    model = ScriptedModel(default=echo, host=gateway)
    port = model.url.rsplit(":", 1)[1]
    api_port = free_port()
    stack = Stack(tmp_path, api_port=api_port, model_url=f"http://host.docker.internal:{port}")
    session = None
    try:
        up_started = time.monotonic()
        stack.compose("up", "-d", "--no-build", timeout=900)
        url = f"http://127.0.0.1:{api_port}"
        deadline = time.monotonic() + 300
        ready = None
        while time.monotonic() < deadline:
            try:
                ready = httpx.get(f"{url}/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except httpx.TransportError as exc:
                ready = exc
            time.sleep(2)
        assert isinstance(ready, httpx.Response) and ready.status_code == 200, f"{ready}\n{stack.logs()}"
        timings["up"] = time.monotonic() - up_started
        assert ready.json()["checks"] == {
            "postgresql": "ok", "redis": "ok", "celery_worker": "ok", "object_store": "ok",
        }  # fmt: skip

        # Migrations ran (the one-shot migrate service) and a key is made in the API's container.
        created = stack.compose("exec", "-T", "api", "python", "manage.py", "create_api_key", "--workspace", "ops")
        key = created.stdout.strip().splitlines()[-1]
        client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=2)
        uploaded = client.beta.files.upload(file=("hello.txt", b"hello from compose\n", "text/plain"))
        assert [f.id for f in client.beta.files.list().data] == [uploaded.id]
        assert client.beta.files.retrieve_metadata(uploaded.id).size_bytes == 19

        agent = client.beta.agents.create(
            name="ops", model="claude-sonnet-5-5", tools=[{"type": "agent_toolset_20260401"}]
        )
        environment = client.beta.environments.create(name="ops")
        session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        # One bash call in the sandbox, then the echo: the stack's sandbox is the Debian one.
        model.script([tool_use("bash", {"command": "python3 -c 'print(6 * 7)' && git --version && id -u"})])
        answer, types, results = [], [], []
        with client.beta.sessions.events.stream(session.id) as stream:
            client.beta.sessions.events.send(
                session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "ping"}]}]
            )
            for event in stream:
                types.append(event.type)
                if event.type == "agent.message":
                    answer += [block.text for block in event.content if block.type == "text"]
                if event.type == "agent.tool_result":
                    results += [block.text for block in event.content or [] if block.type == "text"]
                if event.type == "session.status_idle":
                    break
        assert answer == ["(scripted model) You said: ping"], (types, stack.logs())
        # python3, git and the sandbox user (uid 10001) of deploy/sandbox-debian.Dockerfile.
        assert results and results[0].startswith("42\ngit version 2.39") and "\n10001\n" in results[0], (
            results,
            stack.logs(),
        )
        assert _sandboxes(session.id) and _sandboxes(session.id, "volume")
        client.beta.sessions.delete(session.id)
        deadline = time.monotonic() + 120  # the worker removes the deleted session's sandbox
        while _sandboxes(session.id) or _sandboxes(session.id, "volume"):
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(1)
        sent = {name.lower(): value for name, value in model.requests[-1]["headers"].items()}
        # The stack's ANTHROPIC_API_KEY reached the upstream (as x-api-key or a bearer token).
        assert "sk-ant-scripted" in sent.get("x-api-key", "") + sent.get("authorization", ""), sorted(sent)
        timings["total"] = time.monotonic() - started
        print(f"compose stack timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    finally:
        if session is not None:  # what a failure before the delete left
            for kind, remove in (("container", ["docker", "rm", "-f"]), ("volume", ["docker", "volume", "rm"])):
                if left := _sandboxes(session.id, kind):
                    subprocess.run([*remove, *left], capture_output=True, timeout=60)
        stack.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False, timeout=300)
        model.close()
    leftover = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={stack.project}"],
        capture_output=True, text=True, timeout=30,
    ).stdout.split()  # fmt: skip
    assert not leftover
