"""Shared plumbing for the bench scripts: a bench database, a real gunicorn server, an API key.

Defaults point at the local dev services (PostgreSQL on 127.0.0.1:5432, the SeaweedFS S3 store
on 127.0.0.1:8333); override with the usual DATABASE_URL / MANGO_FILE_S3_* variables.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DEFAULTS = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/mango_bench",
    "MANGO_FILE_S3_BUCKET": "mango-bench",
    "MANGO_FILE_S3_ENDPOINT_URL": "http://127.0.0.1:8333",
    "MANGO_FILE_S3_REGION": "us-east-1",
    "MANGO_FILE_S3_ACCESS_KEY_ID": "mango",
    "MANGO_FILE_S3_SECRET_ACCESS_KEY": "mango-dev-secret",
    "MANGO_LOG_LEVEL": "WARNING",
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "DJANGO_SECRET_KEY": "mango-bench-secret-key-not-for-production",
    # Vault credentials (the MCP row) are stored encrypted: a fixed bench key, never a production one.
    "MANGO_VAULT_KEY": "bWFuZ28tYmVuY2gtdmF1bHQta2V5LTMyLWJ5dGVzISE=",
    # The benches load one workspace to measure capacity; the per-workspace fair shares of the
    # worker fleet and of the sandbox host (tests/sessions/test_fairness.py) would measure the caps.
    "MANGO_WORKSPACE_MAX_RUNNING_TURNS": "0",
    "MANGO_WORKSPACE_MAX_SANDBOXES": "0",
}


def setup() -> None:
    """Point this process at the bench database (created and migrated if needed) and bucket."""
    for key, value in BENCH_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import environ
    import psycopg
    from psycopg import sql

    cfg = environ.Env.db_url_config(os.environ["DATABASE_URL"])
    with psycopg.connect(
        host=cfg["HOST"] or None, port=cfg["PORT"] or None, user=cfg["USER"] or None, dbname="postgres", autocommit=True
    ) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cfg["NAME"])))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from botocore.exceptions import ClientError

    from files import storage

    try:
        storage.backend().client.head_bucket(Bucket=storage.backend().bucket)
    except ClientError:
        storage.backend().client.create_bucket(Bucket=storage.backend().bucket)


def api_key(workspace_name: str) -> tuple[str, object]:
    from core.services import api_key_create

    row, raw = api_key_create(workspace_name=workspace_name)
    return raw, row.workspace


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """The API server, one worker (so its memory is the server's memory). `layout="asgi"` is what
    `make run` serves (config/gunicorn.conf.py: a uvicorn worker running config.asgi); `"wsgi"` is the
    former gunicorn gthread worker running config.wsgi, kept for side-by-side comparisons."""

    def __init__(self, *, threads: int = 8, layout: str = "asgi", env: dict[str, str] | None = None, root: Path = ROOT):
        self.threads = threads
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.layout = layout
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        if layout == "asgi":
            command = [gunicorn, "-c", "config/gunicorn.conf.py", "--bind", f"127.0.0.1:{self.port}"]
            command += ["--workers", "1", "config.asgi:application"]
        else:
            command = [gunicorn, "config.wsgi:application", "--bind", f"127.0.0.1:{self.port}"]
            command += ["--worker-class", "gthread", "--workers", "1", "--threads", str(threads)]
            # gunicorn 27 otherwise shares one control socket among all its instances.
            command += ["--timeout", "0", "--no-control-socket"]
        self.process = subprocess.Popen(
            command,
            cwd=root,  # another checkout of the project: its code, served side by side
            env={**os.environ, "DATABASE_CONN_MAX_AGE": "60", **(env or {})},
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.worker_pid():
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("gunicorn did not start")

    def worker_pid(self) -> int | None:
        try:
            with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children") as handle:
                children = handle.read().split()
        except FileNotFoundError:
            return None
        return int(children[0]) if children else None

    def memory_kib(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak RSS) of the worker, in KiB."""
        values = {}
        with open(f"/proc/{self.worker_pid()}/status") as handle:
            for line in handle:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, amount, _ = line.split()
                    values[name.rstrip(":")] = int(amount)
        return values

    def describe(self) -> str:
        if self.layout == "asgi":
            return "gunicorn + 1 uvicorn worker (config.asgi)"
        return f"gunicorn gthread, 1 worker x {self.threads} threads (config.wsgi)"

    def pids(self) -> list[int]:
        """The master and every process below it."""
        return process_tree(self.process.pid)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server's processes (master and workers), from /proc."""
        return cpu_seconds(self.pids())

    def reset_peak_rss(self) -> None:
        # Writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS.
        with open(f"/proc/{self.worker_pid()}/clear_refs", "w") as handle:
            handle.write("5")

    def stop(self) -> None:
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)


def process_tree(root: int) -> list[int]:
    """`root` and every process below it, from /proc."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                todo.extend(int(child) for child in handle.read().split())
        except FileNotFoundError:
            pass
    return found


def cpu_seconds(pids) -> float:
    """User + system CPU time of the given processes (all their threads), from /proc."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _pids_by_cmdline(matches) -> list[int]:
    """The local processes whose command line (/proc/PID/cmdline split at NULs) `matches`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if matches(argv):
            found.append(int(entry))
    return found


def store_pids() -> list[int]:
    """The local SeaweedFS processes (`weed`), whose CPU the benches report beside their own:
    on this machine the store shares the cores with the server and the client."""
    return _pids_by_cmdline(lambda argv: os.path.basename(argv[0]) == b"weed")


def database_backend_pids(dbname: str) -> list[int]:
    """The local PostgreSQL's backends connected to `dbname` (their titles name it), whose CPU
    the benches report: on this machine the database shares the cores with the server too."""

    def backend(argv: list[bytes]) -> bool:
        title = argv[0].split()  # "postgres: [cluster: ]user database host(port) state"
        return title[:1] == [b"postgres:"] and dbname.encode() in title[2:4]

    return _pids_by_cmdline(backend)


def database_cpu() -> dict[int, float]:
    """CPU seconds so far of each backend of DATABASE_URL's database but this process's own (/proc;
    subtract two readings per pid: a backend that closed in between is missed, one that opened
    counts from its start)."""
    import environ
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        own = cursor.fetchone()[0]
    dbname = environ.Env.db_url_config(os.environ["DATABASE_URL"])["NAME"]
    return {pid: cpu_seconds([pid]) for pid in database_backend_pids(dbname) if pid != own}


def database_cpu_since(before: dict[int, float]) -> float:
    after = database_cpu()
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def vacuum_store() -> str:
    """Ask the local SeaweedFS master to compact its volumes, and say how that went. SeaweedFS
    frees a deleted object's bytes only when it vacuums a volume (by default when 30 % of it is
    garbage, every 15 minutes): each run of bench/files_throughput.py deletes all it wrote, ~12 GB,
    and six runs in a row once filled this machine's disk (the store then answered InternalError:
    no free volumes). MANGO_BENCH_STORE_MASTER names the master (default 127.0.0.1:9333, where
    `weed mini` puts it unless that port was taken)."""
    master = os.environ.get("MANGO_BENCH_STORE_MASTER", "127.0.0.1:9333")
    host, _, port = master.partition(":")
    try:
        conn = http.client.HTTPConnection(host, int(port or 9333), timeout=300)
        conn.request("GET", "/vol/vacuum?garbageThreshold=0.01")
        status = conn.getresponse().status
        conn.close()
    except OSError as exc:
        return f"store vacuum: no SeaweedFS master at {master} ({type(exc).__name__})"
    return f"store vacuum: {master} answered {status}"


def machine_busy_seconds() -> tuple[float, float]:
    """(busy CPU seconds, total CPU seconds) of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


def post_interrupt(port: int, key: str, session_id: str) -> tuple[dict, float, float]:
    """POST one user.interrupt to the session on a fresh connection: (the response body, when it
    was sent, when it was answered), monotonic seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = time.monotonic()
    conn.request(
        "POST",
        f"/v1/sessions/{session_id}/events",
        body=json.dumps({"events": [{"type": "user.interrupt"}]}),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    body = response.read()
    answered = time.monotonic()
    conn.close()
    assert response.status == 200, body
    return json.loads(body), sent, answered
