"""Sandboxes sleep when idle and wake anywhere (issue 38): checkpoint into the store, removal, a
byte-identical restore at the next tool call (on a second Docker daemon too), deletion with the
session, and kill -9 of the worker at each step of checkpoint and wake. Real dockerd, store,
PostgreSQL, Redis and Celery workers throughout."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import docker
import pytest
import requests
from django.db import connection

from files import storage
from files.quotas import workspace_usage
from files.reconcile import reconcile
from sessions.models import SandboxCheckpoint, SandboxChunk, Session, SessionEvent
from sessions.runtime.sleep import sandbox_sleep
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

SLEEP_ENV = {"MANGO_SANDBOX_SLEEP_SECONDS": "1"}

# Files of every kind, with modes and mtimes, in /workspace and the outputs tree.
MAKE = r"""
set -e
cd /workspace
mkdir -p src/deep/er bin
head -c 3000000 /dev/urandom > src/big.bin
head -c 777 /dev/urandom > src/deep/er/small.dat
printf 'hello\n' > src/hello.txt
printf '#!/bin/sh\necho run\n' > bin/run.sh && chmod 750 bin/run.sh
chmod 604 src/hello.txt
ln -s ../src/hello.txt bin/link
ln -s /nonexistent dangling
: > empty
touch -d '2001-02-03 04:05:06' src/hello.txt src/deep
printf 'report\n' > /mnt/session/outputs/report.txt
mkdir -p /mnt/session/outputs/sub && head -c 5000 /dev/urandom > /mnt/session/outputs/sub/data.bin
echo made
"""
# What must come back identical: every path's type, mode, owner, mtime (to the second: Docker's
# archives carry whole seconds), link target, size and digest (stat --cached=never: the statx
# flags of a plain stat are refused under gVisor, docs/sandboxes.md#gvisor).
LIST = (
    "cd / && find workspace mnt/session/outputs -print0 | sort -z"
    " | xargs -0 stat --cached=never -c '%n|%F|%a|%u|%g|%Y|%N|%s'; "
    "find workspace mnt/session/outputs -type f -print0 | sort -z | xargs -0 sha256sum"
)


def _results(sdk, session_id: str, count: int) -> list:
    def ready():
        events = list(sdk.beta.sessions.events.list(session_id))
        done = [e for e in events if e.type == "agent.tool_result"]
        return done if len(done) >= count and events[-1].type == "session.status_idle" else None

    try:
        return wait_for(ready, 120, 0.2)
    except AssertionError:
        events = [(e.type, getattr(e, "content", None)) for e in sdk.beta.sessions.events.list(session_id)]
        raise AssertionError(f"{count} tool results not seen: {events}") from None


def _asleep(session_id: str, client: docker.DockerClient | None = None) -> Session:
    client = client or docker.from_env()

    def sleeping():
        session = Session.objects.get(pk=session_id)
        containers = client.containers.list(
            all=True, filters={"label": f"mango.session={session_id}"}, ignore_removed=True
        )
        asleep = session.sandbox_state == Session.SandboxState.SLEEPING and session.runner_token is None
        return session if asleep and not containers else None

    return wait_for(sleeping, 120, 0.2)


def _chunk_keys(workspace_id: str) -> set[str]:
    keys = set()
    for page in (
        storage.backend()
        .client.get_paginator("list_objects_v2")
        .paginate(Bucket=storage.backend().bucket, Prefix=f"sandbox_chunk/{workspace_id}/")
    ):
        keys.update(item["Key"] for item in page.get("Contents", []))
    return keys


def _send(sdk, session_id: str, words: str = "go") -> None:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": words}]}]
    )


@pytest.fixture
def agent_env(sdk):
    agent = sdk.beta.agents.create(name="sleepy", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return agent, environment


@pytest.fixture
def sleepy_worker(celery_worker):
    """The run's worker, replaced by one that puts sandboxes to sleep after 1 s; the run's kind
    again afterwards."""
    celery_worker.kill()
    yield celery_worker.start_new(MANGO_SANDBOX_IMAGE="mango-sandbox:bookworm", **SLEEP_ENV)
    celery_worker.kill()
    celery_worker.start_new()


def test_an_idle_sandbox_sleeps_and_the_next_turn_sees_its_workspace_byte_identical(
    sdk, model, sleepy_worker, agent_env, api_key, s3_bucket
):
    agent, environment = agent_env
    model.script(
        [tool_use("bash", {"command": MAKE + LIST}), text("made"), tool_use("bash", {"command": LIST}), text("same")]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    before = _results(sdk, session.id, 1)[0].content[0].text
    assert "made" in before and "src/big.bin" in before
    slept = _asleep(session.id)
    checkpoint = SandboxCheckpoint.objects.get(session_id=session.id, state="committed")
    assert checkpoint.logical_bytes > 3_000_000 and slept.sandbox_ref is None
    keys = _chunk_keys(api_key.workspace.id)
    assert keys == set(SandboxChunk.objects.filter(session_id=session.id).values_list("object_key", flat=True))
    _send(sdk, session.id)
    after = _results(sdk, session.id, 2)[1].content[0].text
    assert after == before.replace("made\n", "", 1)
    assert Session.objects.get(pk=session.id).sandbox_state == Session.SandboxState.RUNNING


def test_a_session_deleted_while_its_sandbox_sleeps_leaves_no_object_in_the_bucket(
    sdk, model, sleepy_worker, agent_env, api_key, s3_bucket
):
    agent, environment = agent_env
    model.script([tool_use("bash", {"command": MAKE}), text("made")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    _results(sdk, session.id, 1)
    _asleep(session.id)
    checkpoint = SandboxCheckpoint.objects.get(session_id=session.id, state="committed")
    # The checkpoint counts in the workspace's storage quota.
    assert workspace_usage(api_key.workspace.id).bytes >= checkpoint.stored_bytes > 3_000_000
    assert _chunk_keys(api_key.workspace.id)
    sdk.beta.sessions.delete(session.id)
    assert not SandboxChunk.objects.filter(session_id=session.id).exists()
    assert not SandboxCheckpoint.objects.filter(session_id=session.id).exists()
    wait_for(lambda: not _chunk_keys(api_key.workspace.id), 10)
    assert workspace_usage(api_key.workspace.id).bytes == 0


# --- a second Docker host ----------------------------------------------------------------------

SECOND = Path("/var/tmp/mango-sbx-dockerd2")  # its data root is kept: the image loads once
SECOND_RUN = Path("/run/mango-sbx-dockerd2")
SECOND_BRIDGE = "mgo2-sbx"  # a bridge of its own (not docker0): 15 characters at most
HELPER_IMAGE = "mango-sandbox:bookworm"


@pytest.fixture
def second_dockerd():
    """A second dockerd standing in for a second host: its own --data-root, exec root, socket,
    containerd namespace and bridge, started here and stopped afterwards. Yields its DOCKER_HOST."""
    if subprocess.run(["which", "dockerd"], capture_output=True).returncode != 0:
        pytest.skip("dockerd is not installed")
    SECOND.mkdir(parents=True, exist_ok=True)
    SECOND_RUN.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ip", "link", "del", SECOND_BRIDGE], capture_output=True)
    subprocess.run(["ip", "link", "add", "name", SECOND_BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", "10.251.0.1/24", "dev", SECOND_BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", SECOND_BRIDGE, "up"], check=True)
    host = f"unix://{SECOND_RUN}/docker.sock"
    log = open(SECOND / "dockerd.log", "ab")  # noqa: SIM115 — the daemon writes it until stopped
    daemon = subprocess.Popen(
        [
            "dockerd",
            f"--data-root={SECOND}/data",
            f"--exec-root={SECOND_RUN}/exec",
            f"--pidfile={SECOND_RUN}/dockerd.pid",
            f"--host={host}",
            f"--bridge={SECOND_BRIDGE}",
            "--containerd-namespace=mango-sbx-d2",
            "--containerd-plugins-namespace=mango-sbx-d2-plugins",
            "--iptables=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    client = docker.DockerClient(base_url=host, version="1.41", timeout=300)  # no version query before it runs
    try:
        wait_for(lambda: _answers(client), 60, 0.2)
        first = docker.from_env()
        image = first.images.get(HELPER_IMAGE)
        try:
            client.images.get(image.id)
        except docker.errors.ImageNotFound:  # once per data root: about 800 MB
            client.images.load(b"".join(first.api.get_image(HELPER_IMAGE)))
        client.images.get(image.id).tag(HELPER_IMAGE)
        yield host
    finally:
        for container in client.containers.list(all=True, filters={"label": "mango.session"}):
            container.remove(force=True, v=True)
        for volume in client.volumes.list(filters={"label": "mango.session"}):
            volume.remove(force=True)
        client.close()
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()
        subprocess.run(["ip", "link", "del", SECOND_BRIDGE], capture_output=True)


def _answers(client) -> bool:
    try:
        return client.ping()
    except (docker.errors.DockerException, OSError, requests.RequestException):
        return False


def test_a_sandbox_that_slept_on_one_docker_host_wakes_on_another(
    sdk, model, celery_worker, agent_env, api_key, s3_bucket, second_dockerd
):
    agent, environment = agent_env
    model.script(
        [tool_use("bash", {"command": MAKE + LIST}), text("made"), tool_use("bash", {"command": LIST}), text("same")]
    )
    celery_worker.kill()
    celery_worker.start_new(MANGO_SANDBOX_IMAGE=HELPER_IMAGE, **SLEEP_ENV)
    try:
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        _send(sdk, session.id)
        before = _results(sdk, session.id, 1)[0].content[0].text
        _asleep(session.id)
        # The first host's worker is gone; a worker of the second host runs the next turn.
        celery_worker.kill()
        celery_worker.start_new(MANGO_SANDBOX_IMAGE=HELPER_IMAGE, DOCKER_HOST=second_dockerd, **SLEEP_ENV)
        _send(sdk, session.id)
        after = _results(sdk, session.id, 2)[1].content[0].text
        assert after == before.replace("made\n", "", 1)
        second = docker.DockerClient(base_url=second_dockerd)
        served = second.containers.list(filters={"label": f"mango.session={session.id}"})
        assert served or Session.objects.get(pk=session.id).sandbox_state == Session.SandboxState.SLEEPING
        assert not docker.from_env().containers.list(all=True, filters={"label": f"mango.session={session.id}"})
        _asleep(session.id, second)  # and it sleeps there too
        second.close()
    finally:
        celery_worker.kill()
        celery_worker.start_new()


# --- kill -9 of the worker at each step of checkpoint and wake ---------------------------------

SLEEP_POINTS = [
    "sandbox_checkpoint_begun",
    "sandbox_chunk_before_write",
    "owned_object_before_commit",
    "sandbox_chunk_stored",
    "sandbox_checkpoint_before_commit",
    "sandbox_checkpoint_committed",
    "sandbox_sleep_removed",
]
WAKE_POINTS = ["sandbox_wake_workspace_restored", "sandbox_wake_outputs_restored"]
# The successor: recovers the dead worker's session (stale lease) and sweeps its Docker host.
RECOVERING = {"MANGO_SESSION_REAPER_SECONDS": "1", "MANGO_SANDBOX_IMAGE": HELPER_IMAGE, **SLEEP_ENV}


def _died(worker) -> None:
    wait_for(lambda: worker.process.poll() is not None, 120, 0.2)


def _no_leaks(session_id: str, workspace_id: str) -> None:
    """0 sandboxes (the session sleeps: nothing of it on the Docker host, no loop device), 0
    objects (every object under the workspace's sandbox_chunk/ prefix is a chunk its committed
    checkpoint names, and every chunk row is), once reconciliation finished the dead worker's
    open intents."""
    reconcile(grace_seconds=0)
    client = docker.from_env()
    assert not client.containers.list(all=True, filters={"label": f"mango.session={session_id}"})
    assert not client.volumes.list(filters={"label": f"mango.session={session_id}"})
    backing = [p.read_text() for p in Path("/sys/block").glob("loop*/loop/backing_file")]
    assert not [name for name in backing if session_id in name], backing
    checkpoint = SandboxCheckpoint.objects.get(session_id=session_id, state="committed")
    assert not SandboxCheckpoint.objects.filter(session_id=session_id, state="pending").exists()
    named = set(checkpoint.chunk_ids())
    rows = dict(SandboxChunk.objects.filter(session_id=session_id).values_list("id", "object_key"))
    assert set(rows) == named
    assert _chunk_keys(workspace_id) == set(rows.values())


@pytest.mark.slow
@pytest.mark.parametrize("point", SLEEP_POINTS + WAKE_POINTS)
def test_kill_9_at_each_step_of_sleep_and_wake_loses_no_byte_and_leaks_nothing(
    sdk, model, celery_worker, agent_env, api_key, s3_bucket, point
):
    agent, environment = agent_env
    waking = point in WAKE_POINTS
    model.script(
        [
            tool_use("bash", {"command": MAKE + LIST}),
            text("made"),
            *([tool_use("bash", {"command": LIST}), text("the worker died")] if waking else []),
            tool_use("bash", {"command": LIST}),
            text("same"),
        ]
    )
    crash = {"MANGO_TEST_CRASH_POINT": point}
    celery_worker.kill()
    try:
        worker = celery_worker.start_new(**RECOVERING, **({} if waking else crash))
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        _send(sdk, session.id)
        before = _results(sdk, session.id, 1)[0].content[0].text
        if waking:
            _asleep(session.id)
            celery_worker.kill()
            worker = celery_worker.start_new(**RECOVERING, **crash)
            _send(sdk, session.id)
        _died(worker)  # at the point
        celery_worker.start_new(**RECOVERING)
        if waking:  # the successor resumes the turn: the tool use the crash cut short gets an error
            assert _results(sdk, session.id, 2)[1].is_error
        _asleep(session.id)  # the successor finished the sleep (or the woken turn, then slept)
        _no_leaks(session.id, api_key.workspace.id)
        _send(sdk, session.id)
        after = _results(sdk, session.id, 3 if waking else 2)[-1].content[0].text
        assert after == before.replace("made\n", "", 1)  # 0 bytes lost
        _asleep(session.id)
        _no_leaks(session.id, api_key.workspace.id)
    finally:
        celery_worker.kill()
        celery_worker.start_new()


# --- an interrupt never waits for a checkpoint ----------------------------------------------------

BIG = "head -c 240000000 /dev/urandom > /workspace/big.bin && echo made"


def test_an_interrupt_sent_during_a_checkpoint_does_not_wait_for_it(
    sdk, model, celery_worker, agent_env, api_key, s3_bucket
):
    """The session's sandbox is being checkpointed (240 MB of random bytes: seconds of work) when
    the client interrupts: the checkpoint stops within its input check, nothing commits, the
    sandbox stays, and the interrupt is processed by a runner well before the checkpoint would
    have ended (it is timed afterwards, uninterrupted, on the same workspace)."""
    agent, environment = agent_env
    model.script([tool_use("bash", {"command": BIG}), text("made")])
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    _send(sdk, session.id)
    assert "made" in _results(sdk, session.id, 1)[0].content[0].text
    outcome = {}

    def sleep():
        try:
            outcome["result"] = sandbox_sleep(session_id=session.id, force=True)
        finally:
            outcome["ended"] = time.monotonic()
            connection.close()

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    wait_for(lambda: SandboxCheckpoint.objects.filter(session_id=session.id, state="pending").exists(), 60, 0.01)
    sent = time.monotonic()
    sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
    interrupt = SessionEvent.objects.get(session_id=session.id, type="user.interrupt")
    wait_for(lambda: SessionEvent.objects.get(pk=interrupt.pk).processed_at is not None, 10, 0.02)
    processed = time.monotonic() - sent
    sleeper.join(60)
    assert outcome["result"] == "woken"
    stopped = outcome["ended"] - sent
    assert processed < 2.0 and stopped < 2.0, (processed, stopped)
    session_row = Session.objects.get(pk=session.id)
    assert session_row.sandbox_state == Session.SandboxState.RUNNING and session_row.sandbox_ref
    assert not SandboxCheckpoint.objects.filter(session_id=session.id, state="committed").exists()
    # The same checkpoint, uninterrupted, takes longer than the interrupt waited.
    wait_for(lambda: Session.objects.get(pk=session.id).runner_token is None, 10, 0.05)
    started = time.monotonic()
    assert sandbox_sleep(session_id=session.id, force=True) == "slept"
    whole = time.monotonic() - started
    assert whole > processed, (whole, processed)
    assert SandboxCheckpoint.objects.get(session_id=session.id, state="committed").logical_bytes > 240_000_000
