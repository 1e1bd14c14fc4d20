"""The ``local_process`` backend: a working folder per session under MANGO_SANDBOX_LOCAL_ROOT and
commands run as plain child processes of the worker. **Not isolated in any way** — the agent can
read and write anything the worker's user can. For development only."""

import os
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from django.conf import settings

from core.streams import buffered_reader
from sandboxes import packages
from sandboxes.base import ExecResult, OutputCollector, SandboxBackend, SandboxError, reader_thread, supervise


def local_root(session_id: str) -> Path:
    return Path(settings.MANGO_SANDBOX_LOCAL_ROOT) / session_id


def _path(session_id: str, path: str) -> Path:
    # Unisolated by design (dev only): relative paths land in the session folder.
    candidate = Path(path)
    return candidate if candidate.is_absolute() else local_root(session_id) / candidate


class LocalProcessBackend(SandboxBackend):
    name = "local_process"

    def ensure(
        self, *, session_id: str, workspace_id: str = "", networking: dict | None = None, image: str | None = None
    ) -> str:
        root = local_root(session_id)
        (root / "outputs").mkdir(parents=True, exist_ok=True)
        return str(root)

    def prepare_image(
        self, *, session_id: str, workspace_id: str, networking: dict | None, packages_config: dict | None
    ) -> str:
        wanted = packages.listed(packages_config)
        if wanted:
            raise packages.PackageInstallFailed(wanted[0][0], None, "the local_process sandbox installs no packages")
        return ""

    def exec_command(
        self,
        *,
        session_id: str,
        command: str,
        timeout: float,
        should_cancel: Callable[[], bool],
        workdir: str | None = None,
    ) -> ExecResult:
        root = Path(self.ensure(session_id=session_id))
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        collector = OutputCollector()
        reader = reader_thread(iter(lambda: process.stdout.read1(65536), b""), collector)

        def kill():
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()

        cancelled, timed_out = supervise(
            done=lambda: process.poll() is not None, kill=kill, timeout=timeout, should_cancel=should_cancel
        )
        reader.join(1.0)
        exit_code = None if (cancelled or timed_out) else process.returncode
        return ExecResult(
            collector.value(), exit_code, timed_out=timed_out, cancelled=cancelled, truncated=collector.truncated
        )

    def write_file(self, *, session_id: str, path: str, data: bytes) -> None:
        target = _path(session_id, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def read_file(self, *, session_id: str, path: str, max_bytes: int) -> bytes:
        target = _path(session_id, path)
        if target.is_dir():
            raise IsADirectoryError(path)
        if target.stat().st_size > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes} bytes")
        return target.read_bytes()

    def remove(self, *, session_id: str) -> None:
        shutil.rmtree(local_root(session_id), ignore_errors=True)

    def proxy_remove(self, *, session_id: str) -> None:
        pass  # no egress proxy: credentials never reach a local_process sandbox

    def containers(self, *, session_id: str) -> list[dict]:
        return []

    def sessions_present(self) -> list[str]:
        return []  # never sleeps (sleeps = False)

    def has_outputs_mount(self, *, session_id: str) -> bool:
        return False  # not a mount this server can vouch for: fail closed

    def get_archive(self, *, session_id: str, path: str) -> tuple[Iterator[bytes], dict]:
        raise SandboxError("the session's sandbox has no outputs mount")

    def describe(self, *, session_id: str) -> str:
        root = local_root(session_id)
        return f"local folder {root} ({'present' if root.exists() else 'absent'}; unisolated)"

    def put_archive(self, *, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
        target = _path(session_id, directory)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=buffered_reader(chunks), mode="r|") as archive:
            archive.extractall(target, filter="data")

    def remove_path(self, *, session_id: str, path: str) -> None:
        _path(session_id, path).unlink(missing_ok=True)

    def remove_tree(self, *, session_id: str, path: str) -> None:
        shutil.rmtree(_path(session_id, path), ignore_errors=True)
