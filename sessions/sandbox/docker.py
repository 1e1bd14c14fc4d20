"""The ``docker`` backend: the only module that imports ``docker`` (STYLE.md 8).

One durable container per session, created lazily on the first tool call, from
MANGO_SANDBOX_IMAGE (it needs nothing but /bin/sh), with the privileges, writable mounts and
network that ``policy.py`` states (issue #10). Labels: ``mango.session``, ``mango.workspace`` and
``mango.outputs_mount_version`` on the container, its volumes and its network. Containers
without that label predate the outputs mount and are treated as having no outputs (fail closed).

Control stays on the host side: interrupt and tool timeouts kill from a separate exec that the
command cannot redirect (``_kill_commands``); the server's file operations go through dockerd
(put_archive/get_archive) or through execs whose arguments the sandbox cannot influence.

Every public method translates the library's exceptions (DockerException, and the transport's
RequestException) into SandboxError.
"""

import functools
import io
import logging
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import docker
import requests
from django.conf import settings
from docker.errors import APIError, DockerException, NotFound

from sessions.sandbox import firewall, policy
from sessions.sandbox.base import (
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
ROOT = "0:0"
# Kills every process of the sandbox user except pid 1 (kill(-1) spares init and the caller),
# repeated so that a process forked during one sweep dies in the next.
_KILL_ALL = "for i in 1 2 3 4 5; do kill -KILL -1 2>/dev/null; done; true"
# Run as root: fails unless every existing ancestor of $1 is root-owned and not writable by
# others without the sticky bit, so the sandbox user cannot rename a resource's directory away.
_ROOT_DIRECTORY = """mkdir -p "$1" || exit 1
d="$1"
while [ "$d" != / ]; do
  set -- $(stat -c '%u %a' "$d")
  [ "$1" = 0 ] || { echo "$d is owned by the sandbox user"; exit 3; }
  case "$2" in 1???) ;; *[2367]|*[2367]?) echo "$d is writable by the sandbox user"; exit 3 ;; esac
  d=$(dirname "$d")
done"""


def container_name(session_id: str) -> str:
    return f"mango-sbx-{session_id}"


def _labels(session_id: str, workspace_id: str) -> dict:
    return {LABEL_SESSION: session_id, LABEL_WORKSPACE: workspace_id}


def _translated(method):
    """Library exceptions leave this module as SandboxError only."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (DockerException, requests.RequestException) as exc:
            raise SandboxError(str(exc)) from exc

    return wrapper


def _tar_one(name: str, data: bytes, *, uid: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o600
        info.uid = info.gid = uid
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


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
            container = self._create(session_id, workspace_id, networking)
            if container is not None:
                return container.id  # created and started
            container = self._require_container(session_id)  # created concurrently
        if container.status != "running":
            container.start()
        return container.id

    def _create(self, session_id: str, workspace_id: str, networking: dict | None):
        client = self._docker()
        labels = _labels(session_id, workspace_id)
        # Named volumes declared as mounts are created by dockerd with the container (one round
        # trip less each), and found again as they are when the container is recreated.
        mounts = [
            docker.types.Mount(
                target,
                name,
                type="volume",
                driver_config=docker.types.DriverConfig("local", options),
                labels=labels,
            )
            for name, target, options in policy.volume_specs(session_id)
        ]
        network_mode = "none"
        if policy.is_unrestricted(networking):
            firewall.ensure_rules()
            network_mode = self._network(session_id, labels)
        try:
            return client.containers.run(
                settings.MANGO_SANDBOX_IMAGE,
                command=["/bin/sh", "-c", policy.KEEPALIVE],
                name=container_name(session_id),
                detach=True,
                labels={**labels, LABEL_OUTPUTS_MOUNT: OUTPUTS_MOUNT_VERSION},
                network_mode=network_mode,
                mounts=mounts,
                **policy.container_spec(session_id),
            )
        except APIError as exc:
            if exc.status_code == 409:
                return None
            raise SandboxError(f"could not create the sandbox container: {exc}") from exc

    def _network(self, session_id: str, labels: dict) -> str:
        """The session's own bridge network (created once; a taken subnet moves to the next)."""
        client = self._docker()
        name = policy.network_name(session_id)
        last = None
        for subnet in policy.subnet_candidates(session_id):
            try:
                client.networks.create(
                    name,
                    driver="bridge",
                    options=policy.network_options(session_id),
                    ipam=docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)]),
                    labels=labels,
                    check_duplicate=True,
                )
                return name
            except APIError as exc:
                if exc.status_code == 409 or "already exists" in str(exc):
                    return name
                if "overlaps" not in str(exc):
                    raise SandboxError(f"could not create the sandbox network: {exc}") from exc
                last = exc
        raise SandboxError(f"no free subnet for the sandbox network: {last}")

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
        exec_id = api.exec_create(
            container.id, ["/bin/sh", "-c", command], stdout=True, stderr=True, workdir=workdir or WORKDIR
        )["Id"]
        collector = OutputCollector()
        reader = reader_thread(api.exec_start(exec_id, stream=True), collector)

        def kill():
            self._kill_commands(container)
            reader.join(1.0)

        cancelled, timed_out = supervise(
            done=lambda: not reader.is_alive(), kill=kill, timeout=timeout, should_cancel=should_cancel
        )
        exit_code = None
        if not (cancelled or timed_out):
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        return ExecResult(
            collector.value(), exit_code, timed_out=timed_out, cancelled=cancelled, truncated=collector.truncated
        )

    def _kill_commands(self, container) -> None:
        """Kill every command of the sandbox (the one interrupted and what it left running), from
        an exec of its own: nothing the command wrote (a pid file, /tmp) decides what dies."""
        try:
            result = container.exec_run(["/bin/sh", "-c", _KILL_ALL], user=f"{settings.MANGO_SANDBOX_UID}")
            if result.exit_code == 0:
                return
            logger.warning("the kill exec failed: %s", result.output[:200])
        except APIError:
            logger.warning("could not start the kill exec", exc_info=True)
        # No exec can start (e.g. the commands hold every pid of MANGO_SANDBOX_PIDS): restart the
        # container, which kills everything in it (the writable mounts start empty again).
        container.restart(timeout=0)

    def _exec_root(self, container, argv: list[str]) -> tuple[int, str]:
        """A server-side operation as root in the sandbox (no capabilities: owner rights only)."""
        result = container.exec_run(argv, user=ROOT)
        return result.exit_code, result.output.decode(errors="replace").strip()

    @_translated
    def write_file(self, *, session_id: str, path: str, data: bytes) -> None:
        """Written by the sandbox user (staged in /tmp through dockerd, then copied by an exec as
        that user), so the kernel applies the sandbox's permissions and quotas, not dockerd's."""
        container = self._require_container(session_id)
        staged = f".mango-write-{os.urandom(8).hex()}"
        uid = settings.MANGO_SANDBOX_UID
        if not container.put_archive(policy.TMP_PATH, _tar_one(staged, data, uid=uid)):
            raise SandboxError(f"could not write {path}")
        script = 'mkdir -p "$(dirname "$2")" && cat "$1" > "$2"; status=$?; rm -f "$1"; exit $status'
        result = container.exec_run(
            ["/bin/sh", "-c", script, "sh", f"{policy.TMP_PATH}/{staged}", path], user=f"{uid}:{uid}", workdir=WORKDIR
        )
        if result.exit_code != 0:
            message = result.output.decode(errors="replace").strip() or f"cannot write {path}"
            raise PermissionError(message)

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
        by_session = {"label": f"{LABEL_SESSION}={session_id}"}
        for container in client.containers.list(all=True, filters=by_session, ignore_removed=True):
            try:
                container.remove(force=True, v=True)
            except NotFound:
                pass
        for name, _target, _options in policy.volume_specs(session_id):
            try:
                client.volumes.get(name).remove(force=True)
            except NotFound:
                pass
        for network in client.networks.list(filters=by_session):
            try:
                network.remove()
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
        """The directory is created by root and must be root's all the way up (else the sandbox
        user could move the placed file away with its directory)."""
        container = self._require_container(session_id)
        status, output = self._exec_root(container, ["/bin/sh", "-c", _ROOT_DIRECTORY, "sh", directory])
        if status != 0:
            raise SandboxError(f"could not prepare {directory}: {output}")
        if not container.put_archive(directory, (bytes(chunk) for chunk in chunks)):
            raise SandboxError(f"could not write into {directory}")

    @_translated
    def remove_path(self, *, session_id: str, path: str) -> None:
        container = self._require_container(session_id)
        status, output = self._exec_root(container, ["rm", "-f", path])
        if status != 0:
            raise SandboxError(f"could not remove {path}: {output}")

    @_translated
    def remove_tree(self, *, session_id: str, path: str) -> None:
        """The tree is the sandbox user's (a repository's working tree): that user empties it
        (root here has no CAP_DAC_OVERRIDE), then root removes what is left in a root-owned
        parent. A link at `path` is removed, never followed."""
        container = self._require_container(session_id)
        uid = settings.MANGO_SANDBOX_UID
        container.exec_run(["rm", "-rf", "--", path], user=f"{uid}:{uid}")
        status, output = self._exec_root(container, ["rm", "-rf", "--", path])
        if status != 0:
            raise SandboxError(f"could not remove {path}: {output}")


def _translated_stream(stream: Iterator[bytes]) -> Iterator[bytes]:
    """The archive is read lazily by the caller: errors while streaming are translated too."""
    try:
        yield from stream
    except (DockerException, requests.RequestException) as exc:
        raise SandboxError(str(exc)) from exc
