"""A fresh checkout of this tree and `make` run in it, as a new user would, for tests/ops.

    with Checkout(tmp_path) as checkout:        # the tracked (and new, not ignored) files only
        run = checkout.make_run(env)            # `make run` in its own session; waits for /readyz
        checkout.make("stop")

Its `.venv` is a link to this checkout's (installing the requirements again would take minutes
and the network); everything else is what a clone holds: no `.env`, no `var/`. Each run gets
its own port and embedded-store port, its own database (dropped at the end) and a Redis server of
its own, and every process a run started is killed when the checkout closes, also on failure.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]


_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on and not handed out before, from MANGO_TEST_PORTS (low-high;
    default 18100-18199), else any the kernel picks."""
    low, high = (int(part) for part in os.environ.get("MANGO_TEST_PORTS", "18100-18199").split("-"))
    start = low + os.getpid() % (high - low + 1)
    for port in [*range(start, high + 1), *range(low, start)]:
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        _handed_out.add(sock.getsockname()[1])
        return sock.getsockname()[1]


def free_store_port() -> int:
    """An S3 port for an embedded store (scripts/lib.sh) whose other ports are free as well: weed
    mini takes 100, 200, ... 500 above it, and each of those plus 10000 for gRPC. (18133's volume
    port, 18333, is the gRPC port of a store on the default 8333, the suite's own.)"""
    for _ in range(100):
        port = free_port()
        others = [port + offset + grpc for offset in (100, 200, 300, 400, 500) for grpc in (0, 10000)]
        if all(_bindable(other) for other in [port + 10000, *others]):
            return port
    raise AssertionError("no free port for an embedded store")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return _connect_refused(port)


def _connect_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie whose parent has not reaped it yet is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def read_run_pids(path: Path) -> tuple[dict[str, str], list[int]]:
    """var/run.pids: its header's fields (pid, port, started) and the process groups."""
    lines = path.read_text().splitlines()
    header = dict(re.findall(r"(\w+)=(\S+)", lines[0])) if lines and lines[0].startswith("#") else {}
    return header, [int(line) for line in lines if line.strip() and not line.startswith("#")]


def _database_url(name: str) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango")
    return base.rsplit("/", 1)[0] + "/" + name


def _admin_connect():
    url = _database_url("postgres")
    return psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)


class Run:
    """One `make run` in the checkout: its shell (own session and process group) and its log."""

    def __init__(self, checkout: "Checkout", env: dict[str, str], log: Path):
        self.checkout, self.env, self.log = checkout, env, log
        self.port = int(env["PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.shell = subprocess.Popen(
            ["bash", "-c", f"exec make run >{log} 2>&1"], cwd=checkout.path, env=env, start_new_session=True
        )
        checkout.shells.append(self.shell)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ready(self, timeout: float = 240) -> None:
        """Until the banner is out and /readyz answers 200 (PostgreSQL, Redis, the store, a worker)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            assert self.shell.poll() is None, f"make run exited {self.shell.returncode}:\n{self.text()[-4000:]}"
            if "Mango is serving" in self.text():
                try:
                    last = httpx.get(f"{self.url}/readyz", timeout=5)
                    if last.status_code == 200:
                        return
                except httpx.TransportError as exc:
                    last = exc
            time.sleep(0.5)
        detail = last.text if isinstance(last, httpx.Response) else last
        raise AssertionError(f"not ready in {timeout}s: {detail}\n{self.text()[-4000:]}")

    def banner_then_ready(self, timeout: float = 240) -> httpx.Response:
        """/readyz's answer the moment the banner is out (no retry): `make run` says it serves only
        once it is ready."""
        deadline = time.monotonic() + timeout
        while "Mango is serving" not in self.text():
            assert self.shell.poll() is None, f"make run exited {self.shell.returncode}:\n{self.text()[-4000:]}"
            assert time.monotonic() < deadline, f"no banner in {timeout}s:\n{self.text()[-4000:]}"
            time.sleep(0.02)
        return httpx.get(f"{self.url}/readyz", timeout=5)

    def wait_exit(self, timeout: float = 60) -> int:
        return self.shell.wait(timeout)


class Checkout:
    def __init__(self, tmp_path: Path):
        self.path = tmp_path / "mango"
        self.tmp = tmp_path
        self.shells: list[subprocess.Popen] = []
        self.redis: subprocess.Popen | None = None
        self.database = f"mango_ops_{os.getpid()}"
        self._runs = 0

    def __enter__(self) -> "Checkout":
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode().split("\0")  # fmt: skip
        for rel in filter(None, listed):
            source = ROOT / rel
            if source.is_file() and not source.is_symlink():
                target = self.path / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        (self.path / ".venv").symlink_to((ROOT / ".venv").resolve())
        return self

    def redis_url(self) -> str:
        """A Redis server of this checkout's own (Debian's redis-server), else the tests' Redis."""
        if self.redis is None and shutil.which("redis-server"):
            port = free_port()
            self.redis = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            self.redis.port = port
            deadline = time.monotonic() + 10
            while _connect_refused(port):
                assert time.monotonic() < deadline and self.redis.poll() is None, "redis-server did not start"
                time.sleep(0.1)
        if self.redis is not None:
            return f"redis://127.0.0.1:{self.redis.port}/0"
        return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")

    def base_env(self, **extra: str) -> dict[str, str]:
        """A new user's shell: none of the tests' settings, only what a user would export."""
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "ANTHROPIC_", "DJANGO_"))}
        for name in ("DATABASE_URL", "REDIS_URL", "PORT", "PROMETHEUS_MULTIPROC_DIR", "WEB_CONCURRENCY"):
            keep.pop(name, None)
        return {**keep, **extra}

    def run_env(self, **extra: str) -> dict[str, str]:
        return self.base_env(
            DATABASE_URL=_database_url(self.database),
            REDIS_URL=self.redis_url(),
            MANGO_SANDBOX="local_process",
            MANGO_WORKER_PROCESSES="1",
            MANGO_WORKER_CONCURRENCY="8",
            WEB_CONCURRENCY="1",
            **extra,
        )

    def make_run(self, env: dict[str, str]) -> Run:
        self._runs += 1
        return Run(self, env, self.tmp / f"make-run-{self._runs}.log")

    def make(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        return subprocess.run(
            ["make", *args], cwd=self.path, env=env or self.base_env(), capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def manage(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        """A management command from a new shell (it reads the .env `make run` wrote)."""
        return subprocess.run(
            [str(self.path / ".venv" / "bin" / "python"), "manage.py", *args], cwd=self.path,
            env=env or self.base_env(), capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def run_pids(self) -> tuple[dict[str, str], list[int]]:
        return read_run_pids(self.path / "var" / "run.pids")

    def _processes_in_checkout(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if os.readlink(entry / "cwd").startswith(str(self.path)):
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def _remove_sandboxes(self) -> None:
        """The Docker sandboxes of the run's sessions (containers, then volumes): `make stop`
        leaves them to the next run of the same database, and dropping it leaves them to nobody."""
        if not shutil.which("docker"):
            return
        url = _database_url(self.database).replace("postgres://", "postgresql://", 1)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                workspaces = [row[0] for row in conn.execute("SELECT id FROM core_workspace")]
        except psycopg.Error:  # never created or never migrated: no session ran
            return
        for workspace in workspaces:
            label = f"label=mango.workspace={workspace}"
            for listing, remove in (
                (["docker", "ps", "-aq"], ["docker", "rm", "-f"]),
                (["docker", "volume", "ls", "-q"], ["docker", "volume", "rm", "-f"]),
            ):
                listed = subprocess.run([*listing, "--filter", label], capture_output=True, text=True, timeout=60)
                if listed.stdout.split():
                    subprocess.run([*remove, *listed.stdout.split()], capture_output=True, timeout=120)

    def __exit__(self, *exc) -> None:
        # Whatever happened, leave nothing running: the recorded groups, the shells, Redis.
        pids_file = self.path / "var" / "run.pids"
        groups = read_run_pids(pids_file)[1] if pids_file.exists() else []
        for pgid in [shell.pid for shell in self.shells] + groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for shell in self.shells:
            try:
                shell.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for pid in self._processes_in_checkout():  # anything else started from the checkout
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.redis is not None:
            os.killpg(self.redis.pid, signal.SIGKILL)
            self.redis.wait(10)
        self._remove_sandboxes()
        # The run's weed mini was in a group above; its data and the database go too.
        with _admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
