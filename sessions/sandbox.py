"""Session sandboxes: the only module that talks to Docker (STYLE.md 8).

Chosen by MANGO_SANDBOX:

* ``docker`` (default): one durable container per session, created lazily on the first tool call,
  from MANGO_SANDBOX_IMAGE (it needs nothing but /bin/sh). CPU, memory and PID limits; network
  ``none`` unless the environment's networking is ``unrestricted`` (a ``limited`` allow-list cannot
  be enforced here, so it fails closed to no network). Labels: ``mango.session``,
  ``mango.workspace`` and ``mango.outputs_mount_version`` — ``/mnt/session/outputs`` is the docker
  named volume ``mango-outputs-<session>``. Containers without that label predate the mount and
  callers must treat them as having no outputs (fail closed).
* ``local_process``: a working folder per session under MANGO_SANDBOX_LOCAL_ROOT and commands run
  as plain child processes of the worker. **Not isolated in any way** — the agent can read and
  write anything the worker's user can. For development only.

Public functions (all keyword-only): ensure, exec_command, write_file, read_file, remove,
containers, get_archive, has_outputs_mount, describe.
"""

import io
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
from django.conf import settings
from docker.errors import APIError, NotFound

from core.streams import buffered_reader

logger = logging.getLogger(__name__)

OUTPUTS_PATH = "/mnt/session/outputs"
OUTPUTS_MOUNT_VERSION = "1"
LABEL_SESSION = "mango.session"
LABEL_WORKSPACE = "mango.workspace"
LABEL_OUTPUTS_MOUNT = "mango.outputs_mount_version"
# Owner of file resources placed in a sandbox ("nobody"): not the sandbox's root.
RESOURCE_OWNER_UID = 65534
WORKDIR = "/workspace"
MAX_OUTPUT_BYTES = 1024 * 1024

_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


class SandboxError(Exception):
    """The sandbox could not be created or reached."""


@dataclass
class ExecResult:
    output: bytes
    exit_code: int | None
    timed_out: bool = False
    cancelled: bool = False
    truncated: bool = False


def _backend() -> str:
    return settings.MANGO_SANDBOX


# --- docker ----------------------------------------------------------------------------------

_client_lock = threading.Lock()
_client: docker.DockerClient | None = None


def _docker() -> docker.DockerClient:
    global _client
    with _client_lock:
        if _client is None:
            if settings.DOCKER_HOST:
                _client = docker.DockerClient(base_url=settings.DOCKER_HOST, timeout=60)
            else:
                _client = docker.from_env(timeout=60)
        return _client


def container_name(session_id: str) -> str:
    return f"mango-sbx-{session_id}"


def volume_name(session_id: str) -> str:
    return f"mango-outputs-{session_id}"


def _get_container(session_id: str):
    try:
        return _docker().containers.get(container_name(session_id))
    except NotFound:
        return None


def _network_mode(networking: dict | None) -> str:
    if networking and networking.get("type") == "unrestricted":
        return "bridge"
    return "none"


def _docker_ensure(*, session_id: str, workspace_id: str, networking: dict | None) -> str:
    container = _get_container(session_id)
    if container is None:
        client = _docker()
        labels = {LABEL_SESSION: session_id, LABEL_WORKSPACE: workspace_id}
        try:
            client.volumes.create(name=volume_name(session_id), labels=labels)
        except APIError as exc:  # already there (a recovered turn)
            if exc.status_code != 409:
                raise SandboxError(f"could not create the outputs volume: {exc}") from exc
        try:
            container = client.containers.run(
                settings.MANGO_SANDBOX_IMAGE,
                command=["/bin/sh", "-c", _KEEPALIVE],
                name=container_name(session_id),
                detach=True,
                labels={**labels, LABEL_OUTPUTS_MOUNT: OUTPUTS_MOUNT_VERSION},
                network_mode=_network_mode(networking),
                nano_cpus=int(settings.MANGO_SANDBOX_CPUS * 1e9),
                mem_limit=settings.MANGO_SANDBOX_MEMORY,
                pids_limit=settings.MANGO_SANDBOX_PIDS,
                volumes={volume_name(session_id): {"bind": OUTPUTS_PATH, "mode": "rw"}},
                working_dir=WORKDIR,
                security_opt=["no-new-privileges"],
                # Without DAC_OVERRIDE, FOWNER and CHOWN, root in the sandbox cannot write, chmod
                # or chown the read-only file resources (owned by RESOURCE_OWNER_UID).
                cap_drop=["NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "DAC_OVERRIDE", "FOWNER", "CHOWN"],
                environment={"HOME": "/root", "PATH": "/bin:/usr/bin:/sbin:/usr/sbin"},
            )
        except APIError as exc:
            if exc.status_code == 409:  # created concurrently
                container = _get_container(session_id)
            else:
                raise SandboxError(f"could not create the sandbox container: {exc}") from exc
    if container.status != "running":
        container.start()
    return container.id


def _docker_exec(
    *, session_id: str, command: str, timeout: float, should_cancel: Callable[[], bool], workdir: str | None
) -> ExecResult:
    container = _get_container(session_id)
    if container is None:
        raise SandboxError("the sandbox container is gone")
    api = _docker().api
    token = os.urandom(8).hex()
    pidfile = f"/tmp/.mango-exec-{token}.pid"
    # The exec'd shell leads its own process group: record its pid so a cancel can kill the group.
    wrapper = f'echo $$ > {pidfile}; exec /bin/sh -c "$1"'
    exec_id = api.exec_create(
        container.id, ["/bin/sh", "-c", wrapper, "sh", command], stdout=True, stderr=True, workdir=workdir or WORKDIR
    )["Id"]
    chunks: list[bytes] = []
    size = [0]
    truncated = [False]

    def read():
        try:
            for chunk in api.exec_start(exec_id, stream=True):
                if size[0] < MAX_OUTPUT_BYTES:
                    chunks.append(chunk[: MAX_OUTPUT_BYTES - size[0]])
                    truncated[0] = truncated[0] or size[0] + len(chunk) > MAX_OUTPUT_BYTES
                else:
                    truncated[0] = True
                size[0] += len(chunk)
        except Exception:
            logger.debug("exec stream ended", exc_info=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    cancelled = timed_out = False
    while reader.is_alive():
        reader.join(0.1)
        if not reader.is_alive():
            break
        if should_cancel():
            cancelled = True
        elif time.monotonic() > deadline:
            timed_out = True
        if cancelled or timed_out:
            _docker_kill_exec(container, pidfile)
            reader.join(1.0)
            break
    exit_code = None
    if not (cancelled or timed_out):
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
    try:
        container.exec_run(["rm", "-f", pidfile])
    except APIError:
        pass
    return ExecResult(b"".join(chunks), exit_code, timed_out=timed_out, cancelled=cancelled, truncated=truncated[0])


def _docker_kill_exec(container, pidfile: str) -> None:
    try:
        container.exec_run(["/bin/sh", "-c", f'p=$(cat {pidfile}) && kill -KILL -"$p" "$p" 2>/dev/null; true'])
    except APIError:
        logger.warning("could not kill a sandbox command", exc_info=True)


def _tar_one(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _docker_write(*, session_id: str, path: str, data: bytes) -> None:
    container = _get_container(session_id)
    if container is None:
        raise SandboxError("the sandbox container is gone")
    directory, name = os.path.split(path)
    result = container.exec_run(["mkdir", "-p", directory or "/"])
    if result.exit_code != 0:
        raise SandboxError(result.output.decode(errors="replace").strip() or f"cannot create {directory}")
    if not container.put_archive(directory or "/", _tar_one(name, data)):
        raise SandboxError(f"could not write {path}")


def _docker_read(*, session_id: str, path: str, max_bytes: int) -> bytes:
    container = _get_container(session_id)
    if container is None:
        raise SandboxError("the sandbox container is gone")
    try:
        stream, stat = container.get_archive(path)
    except NotFound:
        raise FileNotFoundError(path) from None
    if stat.get("size", 0) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    if stat.get("mode", 0) & (1 << 31):
        raise IsADirectoryError(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise IsADirectoryError(path)
        return tar.extractfile(member).read()


# --- local_process -------------------------------------------------------------------------


def local_root(session_id: str) -> Path:
    return Path(settings.MANGO_SANDBOX_LOCAL_ROOT) / session_id


def _local_path(session_id: str, path: str) -> Path:
    # Unisolated by design (dev only): relative paths land in the session folder.
    candidate = Path(path)
    return candidate if candidate.is_absolute() else local_root(session_id) / candidate


def _local_ensure(*, session_id: str) -> str:
    root = local_root(session_id)
    (root / "outputs").mkdir(parents=True, exist_ok=True)
    return str(root)


def _local_exec(*, session_id: str, command: str, timeout: float, should_cancel: Callable[[], bool]) -> ExecResult:
    root = Path(_local_ensure(session_id=session_id))
    process = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    chunks: list[bytes] = []

    def read():
        for chunk in iter(lambda: process.stdout.read1(65536), b""):
            if sum(map(len, chunks)) < MAX_OUTPUT_BYTES:
                chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    cancelled = timed_out = False
    while process.poll() is None:
        time.sleep(0.1)
        cancelled = should_cancel()
        timed_out = time.monotonic() > deadline
        if cancelled or timed_out:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            break
    reader.join(1.0)
    exit_code = None if (cancelled or timed_out) else process.returncode
    return ExecResult(b"".join(chunks)[:MAX_OUTPUT_BYTES], exit_code, timed_out=timed_out, cancelled=cancelled)


# --- public API ------------------------------------------------------------------------------


def ensure(*, session_id: str, workspace_id: str, networking: dict | None) -> str:
    """Create the session's sandbox if needed and return its reference (container id or folder)."""
    if _backend() == "local_process":
        return _local_ensure(session_id=session_id)
    try:
        return _docker_ensure(session_id=session_id, workspace_id=workspace_id, networking=networking)
    except docker.errors.DockerException as exc:
        raise SandboxError(str(exc)) from exc


def exec_command(
    *,
    session_id: str,
    command: str,
    timeout: float,
    should_cancel: Callable[[], bool] = lambda: False,
    workdir: str | None = None,
) -> ExecResult:
    """Run `command` with /bin/sh in the sandbox; combined stdout+stderr. Polls `should_cancel`
    every 100 ms and kills the command's process group when it says so (or on timeout)."""
    if _backend() == "local_process":
        return _local_exec(session_id=session_id, command=command, timeout=timeout, should_cancel=should_cancel)
    try:
        return _docker_exec(
            session_id=session_id, command=command, timeout=timeout, should_cancel=should_cancel, workdir=workdir
        )
    except docker.errors.DockerException as exc:
        raise SandboxError(str(exc)) from exc


def exec_argv(*, session_id: str, argv: list[str], timeout: float = 60) -> ExecResult:
    return exec_command(session_id=session_id, command=shlex.join(argv), timeout=timeout)


def write_file(*, session_id: str, path: str, data: bytes) -> None:
    if _backend() == "local_process":
        target = _local_path(session_id, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return
    _docker_write(session_id=session_id, path=path, data=data)


def read_file(*, session_id: str, path: str, max_bytes: int = 10 * 1024 * 1024) -> bytes:
    """Raises FileNotFoundError, IsADirectoryError or ValueError (too large)."""
    if _backend() == "local_process":
        target = _local_path(session_id, path)
        if target.is_dir():
            raise IsADirectoryError(path)
        if target.stat().st_size > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes} bytes")
        return target.read_bytes()
    return _docker_read(session_id=session_id, path=path, max_bytes=max_bytes)


def remove(*, session_id: str) -> None:
    """Stop and remove the session's sandbox and its outputs volume. Idempotent."""
    if _backend() == "local_process":
        shutil.rmtree(local_root(session_id), ignore_errors=True)
        return
    client = _docker()
    for container in client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    ):
        try:
            container.remove(force=True, v=True)
        except NotFound:
            pass
    try:
        client.volumes.get(volume_name(session_id)).remove(force=True)
    except NotFound:
        pass


def containers(*, session_id: str) -> list[dict]:
    """The docker containers labelled with this session (empty for local_process)."""
    if _backend() == "local_process":
        return []
    found = _docker().containers.list(all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True)
    return [{"id": c.id, "name": c.name, "status": c.status, "labels": c.labels} for c in found]


def has_outputs_mount(*, session_id: str) -> bool:
    """True only for a docker container labelled with the current outputs mount version.
    Anything else (no container, an older container, local_process) must be treated as having
    no outputs mount: fail closed."""
    if _backend() == "local_process":
        return False
    container = _get_container(session_id)
    return container is not None and container.labels.get(LABEL_OUTPUTS_MOUNT) == OUTPUTS_MOUNT_VERSION


def get_archive(*, session_id: str, path: str = OUTPUTS_PATH) -> tuple[Iterator[bytes], dict]:
    """Stream a tar archive of `path` in the session's container: (chunks, stat). The chunks
    come straight from dockerd; nothing is buffered whole. Raises SandboxError when there is no
    container or it lacks the outputs mount label (fail closed)."""
    if not has_outputs_mount(session_id=session_id):
        raise SandboxError("the session's sandbox has no outputs mount")
    container = _get_container(session_id)
    try:
        stream, stat = container.get_archive(path, chunk_size=1024 * 1024)
    except NotFound as exc:
        raise SandboxError(f"{path} does not exist in the sandbox") from exc
    return stream, stat


def describe(*, session_id: str) -> str:
    """A one-line state for the admin."""
    if _backend() == "local_process":
        root = local_root(session_id)
        return f"local folder {root} ({'present' if root.exists() else 'absent'}; unisolated)"
    try:
        found = containers(session_id=session_id)
    except docker.errors.DockerException as exc:
        return f"docker unreachable: {exc}"
    if not found:
        return "no container"
    return "; ".join(f"{c['name']} {c['status']}" for c in found)


def put_archive(*, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
    """Extract a tar stream (an iterable of chunks, sent as it is produced: bounded memory) at
    `directory` in the session's sandbox, creating the directory first."""
    if _backend() == "local_process":
        target = _local_path(session_id, directory)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=buffered_reader(chunks), mode="r|") as archive:
            archive.extractall(target, filter="data")
        return
    result = exec_argv(session_id=session_id, argv=["mkdir", "-p", directory], timeout=30)
    if result.exit_code != 0:
        raise SandboxError(f"could not create {directory}: {result.output.decode(errors='replace')}")
    container = _get_container(session_id)
    if container is None:
        raise SandboxError("the session has no sandbox")
    try:
        if not container.put_archive(directory, (bytes(chunk) for chunk in chunks)):
            raise SandboxError(f"could not write into {directory}")
    except docker.errors.DockerException as exc:
        raise SandboxError(str(exc)) from exc


def remove_path(*, session_id: str, path: str) -> None:
    if _backend() == "local_process":
        _local_path(session_id, path).unlink(missing_ok=True)
        return
    result = exec_argv(session_id=session_id, argv=["rm", "-f", path], timeout=30)
    if result.exit_code != 0:
        raise SandboxError(f"could not remove {path}: {result.output.decode(errors='replace')}")
