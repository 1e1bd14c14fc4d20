"""End to end: the official SDK's EnvironmentWorker, unmodified
(`client.beta.environments.work.worker(environment_id=…, environment_key=…, workdir=…).run()`, in a
process of its own), against `make run`'s serving layout (gunicorn + uvicorn running config.asgi),
the real Celery worker running the model against the scripted upstream. A self_hosted session's
bash, write and read calls run in the worker's workdir and their results come back; a killed
worker's item is reclaimed by a second worker once its lease runs out, and the session completes."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anthropic
import pytest
from anthropic.lib import files_from_dir
from django.conf import settings

from sessions.models import WorkItem
from sessions.queue.credentials import work_token
from sessions.queue.services import environment_key_create
from tests.files.server import ROOT, AsgiServer
from tests.scripted_model import request_system, text, tool_use, tool_uses
from tests.sdk_venvs import OLDEST_WORKER_SDK, sdk_python
from tests.sessions.conftest import wait_for
from tests.sessions.test_skills import make_skill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

LEASE_SECONDS = 3
TOOLSET = [{"type": "agent_toolset_20260401"}]


@pytest.fixture
def server(tmp_path, s3_bucket):
    server = AsgiServer(
        log_path=tmp_path / "asgi.log",
        env={
            "MANGO_WORK_LEASE_SECONDS": str(LEASE_SECONDS),
            "MANGO_SESSIONS_QUEUE": settings.MANGO_SESSIONS_QUEUE,
            "PGAPPNAME": f"mango-test-{uuid.uuid4().hex[:12]}",
        },
    ).start()
    yield server
    server.stop()


class SdkWorker:
    def __init__(self, server, environment_id: str, key: str, workdir: Path, log: Path, python: str, env=None):
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._log = open(log, "wb")  # noqa: SIM115 — closed in stop()
        self.process = subprocess.Popen(
            [python, "-m", "tests.sdk_environment_worker", server.url, environment_id, str(workdir)],
            cwd=ROOT,
            env={**os.environ, "MANGO_TEST_ENVIRONMENT_KEY": key, **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        self.kill()
        self._log.close()


@pytest.fixture
def workers(tmp_path):
    started = []

    def start(server, environment_id, key, name, python=sys.executable, env=None):
        worker = SdkWorker(server, environment_id, key, tmp_path / name, tmp_path / f"{name}.log", str(python), env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def _client(server, key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=str(key), max_retries=0, _strict_response_validation=True)


def _setup(client):
    environment = client.beta.environments.create(name="laptop", config={"type": "self_hosted"})
    _, key = environment_key_create(environment_id=environment.id)
    agent = client.beta.agents.create(name="local", model="claude-sonnet-4-5", tools=TOOLSET)
    return environment, key, agent


def _events(client, session_id):
    return list(client.beta.sessions.events.list(session_id))


def _ended(client, session_id):
    events = _events(client, session_id)
    last = events[-1] if events else None
    if last is not None and last.type == "session.status_idle" and last.stop_reason.type == "end_turn":
        return events
    return None


def _results(events) -> dict[str, str]:
    """tool_use id → the text of its result."""
    return {
        e.tool_use_id: "".join(getattr(block, "text", "") for block in e.content or [])
        for e in events
        if e.type == "user.tool_result"
    }


@pytest.mark.parametrize("sdk", ["pinned", OLDEST_WORKER_SDK])
def test_the_sdk_worker_runs_a_sessions_tools_in_its_workdir(
    server, api_key, model, celery_worker, workers, tmp_path, sdk
):
    """The pinned SDK's worker, and beside it the oldest release's that Mango still supports."""
    python = sys.executable if sdk == "pinned" else sdk_python(sdk)
    client = _client(server, api_key)
    environment, key, agent = _setup(client)
    model.script(
        [
            tool_use("bash", {"command": "echo from-bash > made_by_bash.txt && pwd"}),
            tool_use("write", {"file_path": "notes.txt", "content": "written by the model\n"}),
            tool_use("read", {"file_path": "made_by_bash.txt"}),
            text("All done."),
        ]
    )
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    worker = workers(server, environment.id, key, "one", python)
    events = wait_for(lambda: _ended(client, session.id), timeout=90, interval=0.3)
    assert f"worker started {anthropic.__version__ if sdk == 'pinned' else sdk}" in worker.log.read_text()

    workdir = tmp_path / "one"
    assert (workdir / "made_by_bash.txt").read_text() == "from-bash\n"
    assert (workdir / "notes.txt").read_text() == "written by the model\n"
    uses = [e for e in events if e.type == "agent.tool_use"]
    assert [u.name for u in uses] == ["bash", "write", "read"]
    results = _results(events)
    assert str(workdir.resolve()) in results[uses[0].id]  # pwd: the worker's workdir
    assert "from-bash" in results[uses[2].id]
    assert not [e for e in events if e.type == "agent.tool_result"]  # nothing ran in a Mango sandbox
    assert len(model.requests) == 4
    assert [e.content[0].text for e in events if e.type == "agent.message"] == ["All done."]
    item = WorkItem.objects.get(session_id=session.id)
    assert item.state in ("active", "stopped") and item.claims == 1
    assert worker.process.poll() is None  # still serving (it stops the item after max_idle)
    # The worker's credentials are in no log line of the API and in no event.
    token = work_token(work_id=item.id, session_id=session.id, claim=item.claims)
    logged = server.log_text()
    assert logged and key not in logged and token not in logged
    assert not [e for e in events if key in e.model_dump_json() or token in e.model_dump_json()]


def test_a_killed_workers_item_is_reclaimed_by_a_second_worker(
    server, api_key, model, celery_worker, workers, tmp_path
):
    client = _client(server, api_key)
    environment, key, agent = _setup(client)
    model.script(
        [
            tool_use("bash", {"command": "echo one >> log.txt"}),
            # Slow enough that the first worker is gone before the second call exists.
            tool_use("bash", {"command": "echo two >> log.txt"}, delay=2.0),
            text("Both steps ran."),
        ]
    )
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    first = workers(server, environment.id, key, "first")
    wait_for(lambda: _results(_events(client, session.id)), timeout=60, interval=0.1)
    first.kill()  # the machine is gone: no stop, no more heartbeats
    assert (tmp_path / "first" / "log.txt").read_text() == "one\n"
    second = workers(server, environment.id, key, "second")
    events = wait_for(lambda: _ended(client, session.id), timeout=90, interval=0.3)

    assert (tmp_path / "second" / "log.txt").read_text() == "two\n"
    assert (tmp_path / "first" / "log.txt").read_text() == "one\n"
    assert len(_results(events)) == 2 and [e.content[0].text for e in events if e.type == "agent.message"] == [
        "Both steps ran."
    ]
    item = WorkItem.objects.get(session_id=session.id)
    assert item.claims == 2 and item.state == "active"
    assert second.process.poll() is None


def test_an_archived_sessions_worker_exits(server, api_key, model, celery_worker, workers):
    """Archive terminates: the session is `terminated` with its session.status_terminated and its
    work item stopped, and the pinned SDK's worker serving the item (handle_item, idle after a
    turn, with a minute of max_idle left) lets it go and exits; the session refuses input."""
    client = _client(server, api_key)
    environment, key, agent = _setup(client)
    model.script([tool_use("bash", {"command": "echo ran > ran.txt"}), text("Done.")])
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    poller = anthropic.Anthropic(base_url=server.url, auth_token=key, max_retries=0, _strict_response_validation=True)
    work = wait_for(lambda: poller.beta.environments.work.poll(environment.id, block_ms=500), timeout=30)
    assert work.data.id == session.id
    poller.beta.environments.work.ack(work.id, environment_id=environment.id)  # as the SDK's poller does
    env = {"MANGO_TEST_WORK_ID": work.id, "MANGO_TEST_SESSION_ID": session.id, "MANGO_TEST_WORK_SECRET": work.secret}
    worker = workers(server, environment.id, key, "item", env=env)
    wait_for(lambda: _ended(client, session.id), timeout=90, interval=0.3)
    assert worker.process.poll() is None  # idle, waiting for more of the session

    archived = client.beta.sessions.archive(session.id)
    assert archived.status == "terminated" and archived.archived_at is not None
    assert worker.process.wait(30) == 0
    assert "item done" in worker.log.read_text()
    assert client.beta.sessions.retrieve(session.id).status == "terminated"
    events = _events(client, session.id)
    assert events[-1].type == "session.status_terminated"
    assert [e.type for e in events].count("session.status_terminated") == 1
    assert WorkItem.objects.get(id=work.id).state == "stopped"
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "more"}]}]
        )


# A self_hosted multiagent session (issue 39): the coordinator's thread tools run on the server;
# every subagent thread's tool calls are cross-posted to the session's stream with
# session_thread_id and run by the worker in its one workdir (the self-hosted counterpart of the
# shared sandbox), their results routed back to each thread; the worker downloads the subagents'
# skills too.

MODEL = "claude-sonnet-4-5"


def _texts(body: dict, kind: str) -> list[str]:
    found = []
    for message in body.get("messages") or []:
        if message["role"] != "user" or isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block.get("type") == kind == "text":
                found.append(block["text"])
            elif block.get("type") == kind == "tool_result":
                content = block.get("content")
                found.append(content if isinstance(content, str) else "".join(b.get("text", "") for b in content))
    return found


def _decide(body: dict) -> dict:
    if request_system(body).startswith("You coordinate"):
        reports = [t.split("\n", 1)[1] for t in _texts(body, "text") if t.startswith("[Message from the agent")]
        if not _texts(body, "tool_result"):
            return tool_uses(
                [("spawn_agent", {"agent": name, "message": f"Work, {name}."}) for name in ("alpha", "beta")]
            )
        if len(reports) < 2:
            return text("Waiting.")
        return text("Done: " + " | ".join(sorted(reports)))
    name = request_system(body).removeprefix("You are ").split(".")[0]
    results = _texts(body, "tool_result")
    if not results:
        return tool_use("bash", {"command": f"echo {name} > {name}.txt && cat {name}.txt"})
    return text(f"{name} wrote {results[-1].split()[0]}")


def test_the_sdk_worker_serves_every_thread_of_a_multiagent_session(
    server, api_key, model, celery_worker, workers, tmp_path
):
    client = _client(server, api_key)
    environment = client.beta.environments.create(name="laptop", config={"type": "self_hosted"})
    _, key = environment_key_create(environment_id=environment.id)
    skill = client.beta.skills.create(files=files_from_dir(make_skill(tmp_path / "src", name="beta-notes")))
    alpha = client.beta.agents.create(name="alpha", model=MODEL, system="You are alpha.", tools=TOOLSET)
    beta = client.beta.agents.create(
        name="beta",
        model=MODEL,
        system="You are beta.",
        tools=TOOLSET,
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    lead = client.beta.agents.create(
        name="lead",
        model=MODEL,
        system="You coordinate alpha and beta.",
        tools=TOOLSET,
        multiagent={"type": "coordinator", "agents": [alpha.id, beta.id]},
    )
    model.default = _decide
    session = client.beta.sessions.create(agent=lead.id, environment_id=environment.id)
    client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    workers(server, environment.id, key, "one")
    events = wait_for(lambda: _ended(client, session.id), timeout=120, interval=0.3)

    workdir = tmp_path / "one"
    assert (workdir / "alpha.txt").read_text() == "alpha\n" and (workdir / "beta.txt").read_text() == "beta\n"
    answer = [e for e in events if e.type == "agent.message"][-1].content[0].text
    assert answer == "Done: alpha wrote alpha | beta wrote beta"
    threads = {t.agent.name: t.id for t in client.beta.sessions.threads.list(session.id) if t.parent_thread_id}
    # Each thread's bash call, cross-posted to the session's stream, was answered there by the
    # worker and routed to the thread; the coordinator's own spawns ran on the server.
    copies = [e for e in events if e.type == "agent.tool_use" and e.session_thread_id]
    assert sorted(e.session_thread_id for e in copies) == sorted(threads.values())
    answered = [e for e in events if e.type == "user.tool_result"]
    assert sorted(e.session_thread_id for e in answered) == sorted(threads.values())
    assert sorted(e.tool_use_id for e in answered) == sorted(e.id for e in copies)
    spawns = [e for e in events if e.type == "agent.tool_use" and not e.session_thread_id]
    assert [e.name for e in spawns] == ["spawn_agent", "spawn_agent"]
    assert len([e for e in events if e.type == "agent.tool_result"]) == 2  # the spawns' results, by the server
    for name, thread_id in threads.items():
        own = list(client.beta.sessions.threads.events.list(thread_id, session_id=session.id))
        (result,) = [e for e in own if e.type == "user.tool_result"]
        assert result.session_thread_id == thread_id and name in result.content[0].text
    # The worker downloaded the subagent's skill into its workdir.
    assert (workdir / "skills" / "beta-notes" / "SKILL.md").is_file()
