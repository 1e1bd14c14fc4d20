"""The ``docker`` backend: the only module that imports ``docker`` (STYLE.md 8).

One durable container per session, created lazily on the first tool call, from
MANGO_SANDBOX_IMAGE (it needs nothing but /bin/sh). CPU, memory and PID limits; network ``none``
unless the environment's networking is ``unrestricted`` (a ``limited`` allow-list cannot be
enforced here, so it fails closed to no network). Labels: ``mango.session``, ``mango.workspace``
and ``mango.outputs_mount_version`` — ``/mnt/session/outputs`` is the docker named volume
``mango-outputs-<session>``. Containers without that label predate the mount and are treated as
having no outputs (fail closed).

Every public method translates the library's exceptions (DockerException, and the transport's
RequestException) into SandboxError.
"""

import functools
import io
import logging
import os
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import docker
import requests
from django.conf import settings
from docker.errors import APIError, DockerException, NotFound

from sessions.sandbox.base import (
    OUTPUTS_PATH,
    WORKDIR,
    ExecResult,
    OutputCollector,
    SandboxBackend,
    SandboxError,
    reader_thread,
    supervise,
)

logger = logging.getLogger(__name__)

OUTPUTS_MOUNT_VERSION = "1"
LABEL_SESSION = "mango.session"
LABEL_WORKSPACE = "mango.workspace"
LABEL_OUTPUTS_MOUNT = "mango.outputs_mount_version"

_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


def container_name(session_id: str) -> str:
    return f"mango-sbx-{session_id}"


def volume_name(session_id: str) -> str:
    return f"mango-outputs-{session_id}"


def _translated(method):
    """Library exceptions leave this module as SandboxError only."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (DockerException, requests.RequestException) as exc:
            raise SandboxError(str(exc)) from exc

    return wrapper


def _tar_one(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _network_mode(networking: dict | None) -> str:
    if networking and networking.get("type") == "unrestricted":
        return "bridge"
    return "none"


class DockerBackend(SandboxBackend):
    name = "docker"

    def __init__(self):
        self._client_lock = threading.Lock()
        self._client: docker.DockerClient | None = None

    def _docker(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                if settings.DOCKER_HOST:
                    self._client = docker.DockerClient(base_url=settings.DOCKER_HOST, timeout=60)
                else:
                    self._client = docker.from_env(timeout=60)
            return self._client

    def _get_container(self, session_id: str):
        try:
            return self._docker().containers.get(container_name(session_id))
        except NotFound:
            return None

    def _require_container(self, session_id: str):
        container = self._get_container(session_id)
        if container is None:
            raise SandboxError("the sandbox container is gone")
        return container

    @_translated
    def ensure(self, *, session_id: str, workspace_id: str, networking: dict | None) -> str:
        container = self._get_container(session_id)
        if container is None:
            client = self._docker()
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
                    # Without DAC_OVERRIDE, FOWNER and CHOWN, root in the sandbox cannot write,
                    # chmod or chown the read-only file resources (owned by RESOURCE_OWNER_UID).
                    cap_drop=["NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "DAC_OVERRIDE", "FOWNER", "CHOWN"],
                    environment={"HOME": "/root", "PATH": "/bin:/usr/bin:/sbin:/usr/sbin"},
                )
            except APIError as exc:
                if exc.status_code == 409:  # created concurrently
                    container = self._require_container(session_id)
                else:
                    raise SandboxError(f"could not create the sandbox container: {exc}") from exc
        if container.status != "running":
            container.start()
        return container.id

    @_translated
    def exec_command(
        self,
        *,
        session_id: str,
        command: str,
        timeout: float,
        should_cancel: Callable[[], bool],
        workdir: str | None = None,
    ) -> ExecResult:
        container = self._require_container(session_id)
        api = self._docker().api
        token = os.urandom(8).hex()
        pidfile = f"/tmp/.mango-exec-{token}.pid"
        # The exec'd shell leads its own process group: record its pid so a cancel can kill the group.
        wrapper = f'echo $$ > {pidfile}; exec /bin/sh -c "$1"'
        exec_id = api.exec_create(
            container.id,
            ["/bin/sh", "-c", wrapper, "sh", command],
            stdout=True,
            stderr=True,
            workdir=workdir or WORKDIR,
        )["Id"]
        collector = OutputCollector()
        reader = reader_thread(api.exec_start(exec_id, stream=True), collector)

        def kill():
            try:
                container.exec_run(["/bin/sh", "-c", f'p=$(cat {pidfile}) && kill -KILL -"$p" "$p" 2>/dev/null; true'])
            except APIError:
                logger.warning("could not kill a sandbox command", exc_info=True)
            reader.join(1.0)

        cancelled, timed_out = supervise(
            done=lambda: not reader.is_alive(), kill=kill, timeout=timeout, should_cancel=should_cancel
        )
        exit_code = None
        if not (cancelled or timed_out):
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        try:
            container.exec_run(["rm", "-f", pidfile])
        except APIError:
            pass
        return ExecResult(
            collector.value(), exit_code, timed_out=timed_out, cancelled=cancelled, truncated=collector.truncated
        )

    def _exec_argv(self, session_id: str, argv: list[str]) -> ExecResult:
        return self.exec_command(session_id=session_id, command=shlex.join(argv), timeout=30, should_cancel=bool)

    @_translated
    def write_file(self, *, session_id: str, path: str, data: bytes) -> None:
        container = self._require_container(session_id)
        directory, name = os.path.split(path)
        result = container.exec_run(["mkdir", "-p", directory or "/"])
        if result.exit_code != 0:
            raise SandboxError(result.output.decode(errors="replace").strip() or f"cannot create {directory}")
        if not container.put_archive(directory or "/", _tar_one(name, data)):
            raise SandboxError(f"could not write {path}")

    @_translated
    def read_file(self, *, session_id: str, path: str, max_bytes: int) -> bytes:
        container = self._require_container(session_id)
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

    @_translated
    def remove(self, *, session_id: str) -> None:
        client = self._docker()
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

    @_translated
    def containers(self, *, session_id: str) -> list[dict]:
        found = self._docker().containers.list(
            all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
        )
        return [{"id": c.id, "name": c.name, "status": c.status, "labels": c.labels} for c in found]

    @_translated
    def has_outputs_mount(self, *, session_id: str) -> bool:
        container = self._get_container(session_id)
        return container is not None and container.labels.get(LABEL_OUTPUTS_MOUNT) == OUTPUTS_MOUNT_VERSION

    @_translated
    def get_archive(self, *, session_id: str, path: str) -> tuple[Iterator[bytes], dict]:
        """The chunks come straight from dockerd; nothing is buffered whole."""
        container = self._get_container(session_id)
        if container is None or container.labels.get(LABEL_OUTPUTS_MOUNT) != OUTPUTS_MOUNT_VERSION:
            raise SandboxError("the session's sandbox has no outputs mount")
        try:
            stream, stat = container.get_archive(path, chunk_size=1024 * 1024)
        except NotFound as exc:
            raise SandboxError(f"{path} does not exist in the sandbox") from exc
        return _translated_stream(stream), stat

    def describe(self, *, session_id: str) -> str:
        try:
            found = self.containers(session_id=session_id)
        except SandboxError as exc:
            return f"docker unreachable: {exc}"
        if not found:
            return "no container"
        return "; ".join(f"{c['name']} {c['status']}" for c in found)

    @_translated
    def put_archive(self, *, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
        result = self._exec_argv(session_id, ["mkdir", "-p", directory])
        if result.exit_code != 0:
            raise SandboxError(f"could not create {directory}: {result.output.decode(errors='replace')}")
        container = self._require_container(session_id)
        if not container.put_archive(directory, (bytes(chunk) for chunk in chunks)):
            raise SandboxError(f"could not write into {directory}")

    @_translated
    def remove_path(self, *, session_id: str, path: str) -> None:
        result = self._exec_argv(session_id, ["rm", "-f", path])
        if result.exit_code != 0:
            raise SandboxError(f"could not remove {path}: {result.output.decode(errors='replace')}")


def _translated_stream(stream: Iterator[bytes]) -> Iterator[bytes]:
    """The archive is read lazily by the caller: errors while streaming are translated too."""
    try:
        yield from stream
    except (DockerException, requests.RequestException) as exc:
        raise SandboxError(str(exc)) from exc
