"""Sandboxes sleep when idle and wake anywhere (issue 38): checkpoint into the store, removal, a
byte-identical restore at the next tool call (on a second Docker daemon too), deletion with the
session, and kill -9 of the worker at each step of checkpoint and wake. Real dockerd, store,
PostgreSQL, Redis and Celery workers throughout."""

import docker
import pytest

from files import storage
from files.quotas import workspace_usage
from sessions.models import SandboxCheckpoint, SandboxChunk, Session
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
# archives carry whole seconds), link target, size and digest.
LIST = (
    "cd / && find workspace mnt/session/outputs -print0 | sort -z | xargs -0 stat -c '%n|%F|%a|%u|%g|%Y|%N|%s'; "
    "find workspace mnt/session/outputs -type f -print0 | sort -z | xargs -0 sha256sum"
)


def _results(sdk, session_id: str, count: int) -> list:
    def ready():
        events = list(sdk.beta.sessions.events.list(session_id))
        done = [e for e in events if e.type == "agent.tool_result"]
        return done if len(done) >= count and events[-1].type == "session.status_idle" else None

    return wait_for(ready, 120, 0.2)


def _asleep(session_id: str, client: docker.DockerClient | None = None) -> Session:
    client = client or docker.from_env()

    def sleeping():
        session = Session.objects.get(pk=session_id)
        containers = client.containers.list(all=True, filters={"label": f"mango.session={session_id}"})
        return session if session.sandbox_state == Session.SandboxState.SLEEPING and not containers else None

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
