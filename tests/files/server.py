"""A real gunicorn server process (gthread, one worker) against the pytest test database, for
tests that kill it or need what only a real server does (chunked request bodies)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.worker import test_database_url

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except FileNotFoundError:
        return []


class GunicornServer:
    def __init__(self, *, log_path: Path, env: dict[str, str] | None = None, workers: int = 1):
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "DATABASE_CONN_MAX_AGE": "0",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            **(env or {}),
        }
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> "GunicornServer":
        gunicorn = Path(sys.executable).parent / "gunicorn"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 — closed in stop()
        self.process = subprocess.Popen(
            self.argv(gunicorn),
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self._wait_until_serving()

    def argv(self, gunicorn: Path) -> list[str]:
        return [
            str(gunicorn),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--worker-class",
            "gthread",
            "--workers",
            str(self.workers),
            "--threads",
            "8",
            "--timeout",
            "0",
            # gunicorn 27 otherwise shares one control socket (~/.gunicorn/gunicorn.ctl)
            # among all its instances on the machine.
            "--no-control-socket",
        ]

    def _wait_until_serving(self) -> "GunicornServer":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                if len(_children(self.process.pid)) >= self.workers:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("gunicorn did not start")

    def worker_pid(self) -> int | None:
        children = _children(self.process.pid)
        return children[0] if children else None

    def kill_worker(self) -> int:
        """kill -9 the worker serving requests; returns its pid."""
        pid = self.worker_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_for_new_worker(self, old_pid: int, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.worker_pid()
            if pid and pid != old_pid:
                return pid
            time.sleep(0.1)
        raise RuntimeError("gunicorn did not respawn its worker")

    def kill_all(self) -> None:
        """kill -9 every process of the server (master and workers) at once."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        if getattr(self, "_log", None):
            self._log.close()


class AsgiServer(GunicornServer):
    """The layout `make run` serves: gunicorn with uvicorn workers running config.asgi
    (config/gunicorn.conf.py); one worker unless WEB_CONCURRENCY says otherwise."""

    def __init__(self, *, log_path: Path, env: dict[str, str] | None = None):
        super().__init__(log_path=log_path, env={"WEB_CONCURRENCY": "1", "MANGO_DB_POOL": "1", **(env or {})})

    def argv(self, gunicorn: Path) -> list[str]:
        return [
            str(gunicorn),
            "-c",
            "config/gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{self.port}",
            "config.asgi:application",
        ]


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`manage.py` in a fresh process, as a restart would run it."""
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
