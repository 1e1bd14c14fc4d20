"""The sandbox adapter and built-in tools directly (no worker): docker details the API tests do
not see, and the local_process backend."""

import io
import tarfile
import threading
import time

import pytest

import sandboxes as sandbox
from sessions.runtime import builtins

pytestmark = pytest.mark.docker


@pytest.fixture
def docker_session(settings):
    settings.MANGO_SANDBOX = "docker"
    session_id = f"sesn_test{time.time_ns()}"
    yield session_id
    sandbox.remove(session_id=session_id)


def test_docker_sandbox_lifecycle_and_outputs_archive(docker_session, docker_client):
    ref = sandbox.ensure(session_id=docker_session, workspace_id="wrkspc_t", networking={"type": "unrestricted"})
    assert sandbox.ensure(session_id=docker_session, workspace_id="wrkspc_t", networking=None) == ref  # durable
    container = docker_client.containers.get(ref)
    network = docker_client.networks.get(container.attrs["HostConfig"]["NetworkMode"])  # its own bridge
    assert network.attrs["Driver"] == "bridge"
    assert container.labels["mango.outputs_mount_version"] == "1"
    assert sandbox.has_outputs_mount(session_id=docker_session)

    sandbox.write_file(session_id=docker_session, path="/mnt/session/outputs/report.txt", data=b"result\n")
    assert sandbox.read_file(session_id=docker_session, path="/mnt/session/outputs/report.txt") == b"result\n"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file(session_id=docker_session, path="/nope")
    stream, _stat = sandbox.get_archive(session_id=docker_session)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        assert "outputs/report.txt" in tar.getnames()

    # A cancelled command is killed, with its children, well within the poll interval.
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    started = time.monotonic()
    result = sandbox.exec_command(
        session_id=docker_session, command="sleep 30 & sleep 30; echo no", timeout=60, should_cancel=flag.is_set
    )
    assert result.cancelled and time.monotonic() - started < 2
    ps = sandbox.exec_command(session_id=docker_session, command="ps -o args", timeout=10)
    assert b"sleep 30" not in ps.output

    timed = sandbox.exec_command(session_id=docker_session, command="sleep 5", timeout=0.3)
    assert timed.timed_out

    sandbox.remove(session_id=docker_session)
    assert sandbox.containers(session_id=docker_session) == []
    assert not sandbox.has_outputs_mount(session_id=docker_session)
    with pytest.raises(sandbox.SandboxError):
        sandbox.get_archive(session_id=docker_session)


def test_container_without_outputs_label_fails_closed(docker_session, docker_client, settings):
    docker_client.containers.run(
        settings.MANGO_SANDBOX_IMAGE,
        command=["/bin/sh", "-c", "sleep 60"],
        name=sandbox.container_name(docker_session),
        labels={"mango.session": docker_session},
        detach=True,
        network_mode="none",
    )
    assert not sandbox.has_outputs_mount(session_id=docker_session)
    with pytest.raises(sandbox.SandboxError):
        sandbox.get_archive(session_id=docker_session)


def test_local_process_backend(settings, tmp_path):
    settings.MANGO_SANDBOX = "local_process"
    settings.MANGO_SANDBOX_LOCAL_ROOT = tmp_path
    session_id = "sesn_local"
    root = sandbox.ensure(session_id=session_id, workspace_id="w", networking=None)
    assert root == str(tmp_path / session_id)
    outcome = builtins.run_builtin(
        session_id=session_id,
        name="bash",
        tool_input={"command": "echo hi > a.txt; cat a.txt"},
        should_cancel=lambda: False,
    )
    assert outcome.text == "hi\n\n[exit status: 0]"
    assert (tmp_path / session_id / "a.txt").read_text() == "hi\n"
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    started = time.monotonic()
    cancelled = builtins.run_builtin(
        session_id=session_id, name="bash", tool_input={"command": "sleep 30"}, should_cancel=flag.is_set
    )
    assert cancelled.cancelled and time.monotonic() - started < 2
    assert not sandbox.has_outputs_mount(session_id=session_id)  # not a docker mount: fail closed
    sandbox.remove(session_id=session_id)
    assert not (tmp_path / session_id).exists()


def test_glob_pattern_semantics():
    regex = builtins._glob_regex("**/*.txt")
    assert regex.match("a.txt") and regex.match("x/y/a.txt") and not regex.match("a.txt.bak")
    assert not builtins._glob_regex("*.txt").match("x/a.txt")
