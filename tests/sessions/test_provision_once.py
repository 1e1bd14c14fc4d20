"""Provision once (issue 38): a tool call in a running sandbox makes one Docker call, its exec
(create, start, inspect), and no other: no container or network read, no proxy check, no vault
credentials read again. Measured on the wire: the worker reaches dockerd through a proxy of this
test that records every request line. Real worker, dockerd, database."""

import os
import re
import socket
import threading

import pytest
from django.conf import settings

from sessions.models import Session
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

REQUEST = re.compile(rb"(GET|POST|PUT|DELETE|HEAD) (/[^ ]*) HTTP/1\.1\r\n")


class DockerWire:
    """A unix socket relayed to dockerd's, recording each request (method, path) in order."""

    def __init__(self, path: str, upstream: str = "/var/run/docker.sock"):
        self.path, self.upstream = path, upstream
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        if os.path.exists(path):
            os.unlink(path)
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.upstream)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source, target, record: bool) -> None:
        try:
            while data := source.recv(65536):
                if record:
                    with self.lock:
                        self.requests += [(m.decode(), p.decode().split("?")[0]) for m, p in REQUEST.findall(data)]
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()
        os.unlink(self.path)


@pytest.fixture
def wire(celery_worker):
    recorder = DockerWire(f"/tmp/mango-sbx-wire-{os.getpid()}.sock")
    celery_worker.kill()
    celery_worker.start_new(DOCKER_HOST=f"unix://{recorder.path}")
    yield recorder
    celery_worker.kill()
    celery_worker.start_new()
    recorder.close()


def test_the_second_tool_call_of_a_turn_is_one_docker_exec(sdk, model, wire, api_key):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    model.script([tool_use("bash", {"command": "echo one"}), tool_use("bash", {"command": "echo two"}), text("done")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )

    def results():
        events = list(sdk.beta.sessions.events.list(session.id))
        done = [e for e in events if e.type == "agent.tool_result"]
        return done if len(done) == 2 and events[-1].type == "session.status_idle" else None

    first, second = wait_for(results, 60)
    assert first.content[0].text.startswith("one") and second.content[0].text.startswith("two")
    with wire.lock:
        seen = list(wire.requests)
    inspects = [n for n, (method, path) in enumerate(seen) if re.fullmatch(r".*/exec/[0-9a-f]+/json", path)]
    assert len(inspects) >= 2, seen
    between = [(method, re.sub(r"/v1\.\d+", "", path)) for method, path in seen[inspects[0] + 1 : inspects[1] + 1]]
    name = f"mango-sbx-{session.id}"
    assert [(m, re.sub(r"[0-9a-f]{64}", "ID", p)) for m, p in between] == [
        ("POST", f"/containers/{name}/exec"),
        ("POST", "/exec/ID/start"),
        ("GET", "/exec/ID/json"),
    ], between
    assert Session.objects.get(pk=session.id).sandbox_provisioned == Session.objects.get(pk=session.id).sandbox_changes
    assert settings.MANGO_SANDBOX == "docker"
