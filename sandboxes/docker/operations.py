"""What the server does inside a running sandbox: run a command (under ``call_reaper.py``, killed
from a separate exec the command cannot redirect), and read, write, place and remove files
(through dockerd's archives, or execs whose arguments the sandbox cannot influence).
"""

import io
import logging
import os
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings
from docker.errors import APIError, NotFound

from sandboxes import policy
from sandboxes.base import WORKDIR, ExecResult, OutputCollector, SandboxError, SandboxGone, reader_thread, supervise
from sandboxes.docker.common import (
    LABEL_OUTPUTS_MOUNT,
    OUTPUTS_MOUNT_VERSION,
    PROGRAMS,
    ROOT,
    DockerClient,
    _translated,
    _translated_stream,
    container_name,
)

logger = logging.getLogger(__name__)

# Kills every process of the sandbox user except pid 1 (kill(-1) spares init and the caller),
# repeated so that a process forked during one sweep dies in the next.
_KILL_ALL = "for i in 1 2 3 4 5; do kill -KILL -1 2>/dev/null; done; true"
# Run as root: fails unless every existing ancestor of $1 is root-owned and not writable by
# others without the sticky bit, so the sandbox user cannot rename a resource's directory away.
# (GNU stat's statx fails with EINVAL under the gVisor of Debian's runsc unless it forces a sync.)
_ROOT_DIRECTORY = """mkdir -p "$1" || exit 1
d="$1"
while [ "$d" != / ]; do
  set -- $(stat -c '%u %a' "$d" 2>/dev/null || stat --cached=never -c '%u %a' "$d")
  [ "$1" = 0 ] || { echo "$d is owned by the sandbox user"; exit 3; }
  case "$2" in 1???) ;; *[2367]|*[2367]?) echo "$d is writable by the sandbox user"; exit 3 ;; esac
  d=$(dirname "$d")
done"""


# Every command runs under call_reaper.py (what it leaves running dies with it), by python3 when
# the image has it, else by the shell alone.
REAPER_SOURCE = (PROGRAMS / "call_reaper.py").read_text()
_REAPED = (
    "command -v python3 >/dev/null 2>&1 && "
    'exec python3 -S -c "import os; exec(os.environ.pop(\'MANGO_REAPER\'))" "$1"; '
    'unset MANGO_REAPER; exec /bin/sh -c "$1"'
)
KILLER_NAME = "mango-kill-{}"


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


class OperationsMixin(DockerClient):
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
        # By name, without reading the container first: a running sandbox's tool call is one exec
        # (create, start, inspect) and nothing else (issue 38, provision once).
        api = self._docker().api
        try:
            exec_id = api.exec_create(
                container_name(session_id),
                ["/bin/sh", "-c", _REAPED, "sh", command],
                stdout=True,
                stderr=True,
                environment={"MANGO_REAPER": REAPER_SOURCE},
                workdir=workdir or WORKDIR,
            )["Id"]
        except NotFound as exc:
            raise SandboxGone("the sandbox container is gone") from exc
        except APIError as exc:
            if exc.status_code == 409:  # not running
                raise SandboxGone(f"the sandbox container is not running: {exc.explanation}") from exc
            raise
        collector = OutputCollector()
        reader = reader_thread(api.exec_start(exec_id, stream=True), collector)

        def kill():
            self._kill_commands(self._require_container(session_id))
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
        # No exec can start (e.g. the commands hold every pid of MANGO_SANDBOX_PIDS): a container
        # of its own (its own pids cgroup) in the sandbox's pid namespace kills them, with
        # CAP_KILL alone. (Restarting the sandbox would lose its disks.)
        client = self._docker()
        killer = client.containers.run(
            settings.MANGO_SANDBOX_HELPER_IMAGE,
            command=["/bin/sh", "-c", _KILL_ALL],
            name=KILLER_NAME.format(f"{container.name}-{os.urandom(3).hex()}"),
            detach=True,
            labels=dict(container.labels),
            pid_mode=f"container:{container.id}",
            network_mode="none",
            user=ROOT,
            cap_drop=["ALL"],
            cap_add=["KILL"],
            security_opt=["no-new-privileges"],
            pids_limit=16,
            mem_limit="64m",
        )
        try:
            killer.wait(timeout=30)
        finally:
            killer.remove(force=True)

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
