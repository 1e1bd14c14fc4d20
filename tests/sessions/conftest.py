"""Fixtures for the sessions runtime: the scripted model upstream, a real Celery worker wired to
it and to the test database, and Docker cleanup per test."""

import contextlib
import os
import shutil
import time

import docker
import pytest
import redis
from django.conf import settings

# The run-wide worker and scripted model live in tests/sessions/fixtures.py, registered once for the
# whole run by tests/conftest.py (pytest_plugins): tests/webhooks share the same two, never a second
# worker on the same queue. Re-exported here for the tests that import them.
from tests.sessions.fixtures import WorkerHandle, worker_env  # noqa: F401
from tests.worker import TEST_LEASE_SECONDS  # noqa: F401

# Session tasks of this pytest process go to a queue of its own: concurrent runs share Redis /14.
settings.MANGO_SESSIONS_QUEUE = f"mango-test-{os.getpid()}"


def not_under_gvisor(reason: str):
    """Skips a check that cannot hold under MANGO_SANDBOX_RUNTIME=runsc, naming why (each is listed
    in docs/sandboxes.md#gvisor)."""
    return pytest.mark.skipif(
        settings.MANGO_SANDBOX_RUNTIME == "runsc", reason=f"not under gVisor: {reason} (docs/sandboxes.md#gvisor)"
    )


@pytest.fixture(scope="session", autouse=True)
def _sandbox_runtime():
    """MANGO_SANDBOX_RUNTIME=runsc (with DOCKER_HOST at a dockerd that has it registered, e.g.
    scripts/runsc_dockerd.sh's) runs the sandbox tests under gVisor; without runsc, or with a
    dockerd that lacks the runtime, they are skipped with the reason."""
    runtime = settings.MANGO_SANDBOX_RUNTIME
    if runtime == "runc":
        return
    if runtime == "runsc" and shutil.which("runsc") is None:
        pytest.skip("MANGO_SANDBOX_RUNTIME=runsc, but runsc is not installed (apt-get install runsc)")
    try:
        client = docker.from_env()
        runtimes = client.info().get("Runtimes") or {}
        client.close()
    except docker.errors.DockerException as exc:
        pytest.skip(f"MANGO_SANDBOX_RUNTIME={runtime}: dockerd unreachable ({exc})")
    if runtime not in runtimes:
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        pytest.skip(
            f"MANGO_SANDBOX_RUNTIME={runtime}, but the dockerd at {where} has no such runtime"
            " (scripts/runsc_dockerd.sh starts one that has)"
        )


@pytest.fixture
def no_turns(settings):
    """This test's sessions send their turns to a queue no worker reads, so that their event
    logs hold only what the test appends, even when an earlier test of the run started the
    session-scoped worker (which then keeps reading the run's queue)."""
    queue = settings.MANGO_SESSIONS_QUEUE = f"mango-test-no-turns-{os.getpid()}"
    yield
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(queue)
    client.close()


@pytest.fixture
def docker_client():
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _remove_test_sandboxes(request):
    """Containers, volumes and networks a test's sessions created are removed afterwards."""
    if "api_key" not in request.fixturenames:
        yield
        return
    workspace_id = request.getfixturevalue("api_key").workspace.id
    yield
    try:
        client = docker.from_env()
    except docker.errors.DockerException:  # no dockerd: nothing can have been created
        return
    try:
        # A worker may be removing the same ones (a session delete): gone or going is fine.
        for container in client.containers.list(
            all=True, filters={"label": f"mango.workspace={workspace_id}"}, ignore_removed=True
        ):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
        for volume in client.volumes.list(filters={"label": f"mango.workspace={workspace_id}"}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                volume.remove(force=True)
        for network in client.networks.list(filters={"label": f"mango.workspace={workspace_id}"}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                network.remove()
    finally:
        client.close()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
