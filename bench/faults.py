"""Fault campaign: PostgreSQL, Redis and the object store fail and come back under load.

A private stack on ports 19000-19099 (never the shared services): a PostgreSQL cluster of its
own (initdb, under var/faults/pg, port 19032), a redis-server (19079, append-only file fsynced on
every write, as a broker that keeps its queue across a restart), a SeaweedFS `weed mini` (S3 on
19033), and Mango as `make run` serves it: gunicorn with uvicorn workers (config/gunicorn.conf.py,
two workers), a Celery worker (threads, no gossip/mingle/event heartbeats) and Celery beat, with
the scripted Messages-API upstream (tests/scripted_model.py) for the turns.

Each dependency is failed --faults times (default 5), cycling through the three ways it can go:
`stop` (a clean shutdown, down for --down seconds, then started), `kill` (SIGKILL of every one of
its processes, down, then started: PostgreSQL runs crash recovery) and `restart` (stopped and
started at once). Throughout, the official SDK (max_retries=0: every answer is counted, and a 503
is retried here after its retry-after) uploads Files (small ones and 6 MB multipart ones),
downloads them (SHA-256 checked), sends user.message events (each text unique) to sessions whose
turns run, and follows the sessions' event streams; /readyz is probed every half second. During
each PostgreSQL fault one slow upload spans the outage, and a reconcile with no grace window at
all runs from another process as soon as the database answers again.

After each fault the load stops and the campaign waits (60 s at most) until nothing is left over:
no open intent, no unfinished multipart upload, no object without a File row. At the end every
File answered 200 is read back through the API and its SHA-256 checked, and every event text is
counted in the log. Reported per dependency: Files lost, orphans left 60 s after the return,
duplicated and lost events, live uploads cancelled (503 upload_reclaimed), answers of 500,
/readyz's slowest answer and whether it named the dependency, and the recovery time: from the
dependency answering again to the first success of each kind of request (upload, download,
event send, a turn starting).

    .venv/bin/python bench/faults.py [--faults 5] [--down 4] [--only postgresql,redis,object_store]

The fast parts are tests: tests/faults/test_outages.py (one fault each, with the same stack).
"""

import argparse
import contextlib
import functools
import glob
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Layout:
    """Where a private stack lives: its directory and its ports (all in 19000-19099)."""

    var: Path
    pg: int
    redis: int
    s3: int
    api: int
    weed: int  # the first of weed mini's other listeners (master, volume, filer and their gRPC)

    def weed_ports(self) -> dict[str, int]:
        names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                 "filer.port.grpc", "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port"]  # fmt: skip
        return {
            **{name: self.weed + index for index, name in enumerate(names)},
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
        }


CAMPAIGN = Layout(var=ROOT / "var" / "faults", pg=19032, redis=19079, s3=19033, api=19080, weed=19034)
# tests/faults/test_outages.py: another directory and other ports, so a campaign can run meanwhile.
TESTS = Layout(var=ROOT / "var" / "faults-tests", pg=19062, redis=19069, s3=19063, api=19070, weed=19084)
DATABASE = "mango_faults_campaign"
BUCKET = "mango-faults"
S3_KEYS = {"MANGO_FILE_S3_ACCESS_KEY_ID": "mango", "MANGO_FILE_S3_SECRET_ACCESS_KEY": "mango-faults-secret"}


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"{what}: not within {timeout:g}s")


def _kill_tree(pid: int, sig=signal.SIGKILL) -> None:
    from bench._common import process_tree

    for member in reversed(process_tree(pid)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)


class Dependency:
    name = ""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def answers(self) -> bool:
        raise NotImplementedError

    def wait_answers(self, timeout: float = 60) -> float:
        """Poll until it answers; the monotonic time it first did."""
        return _wait(lambda: self.answers() and time.monotonic(), timeout, f"{self.name} answering", 0.05)


class Postgres(Dependency):
    name = "postgresql"

    def __init__(self, layout: Layout):
        self.port, self.var, self.data = layout.pg, layout.var, layout.var / "pg"
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.log = layout.var / "pg.log"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)

    def url(self, dbname: str = DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def init(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self.data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.var, "postgres")
            shutil.chown(self.data, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        for _ in range(50):  # after a kill, the old backends may hold the shared memory a moment
            result = self._run(
                "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start", check=False
            )
            if result.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL did not start: {result.stderr}{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def kill(self) -> None:
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            _kill_tree(int(pid_file.read_text().split()[0]))

    def answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
                conn.execute(f'CREATE DATABASE "{DATABASE}"')


class Redis(Dependency):
    name = "redis"

    def __init__(self, layout: Layout):
        self.port, self.var, self.data = layout.redis, layout.var, layout.var / "redis"
        self.process: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", str(self.var / "redis.log")],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.wait_answers(30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=1).ping())
        except redis.RedisError:
            return False


class Store(Dependency):
    name = "object_store"

    def __init__(self, layout: Layout):
        self.port, self.var, self.data = layout.s3, layout.var, layout.var / "weed"
        self.weed_ports = layout.weed_ports()
        self.process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        return {
            "MANGO_FILE_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
            "MANGO_FILE_S3_BUCKET": BUCKET,
            "MANGO_FILE_S3_REGION": "us-east-1",
            **S3_KEYS,
        }

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        flags = [f"-{name}={port}" for name, port in self.weed_ports.items()]
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "weed"), "mini", f"-dir={self.data}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", "-admin.ui=false", f"-bucket={BUCKET}", *flags],
            env={**os.environ, "AWS_ACCESS_KEY_ID": S3_KEYS["MANGO_FILE_S3_ACCESS_KEY_ID"],
                 "AWS_SECRET_ACCESS_KEY": S3_KEYS["MANGO_FILE_S3_SECRET_ACCESS_KEY"]},
            start_new_session=True, stdout=open(self.var / "weed.log", "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
        )  # fmt: skip
        self.wait_answers(90)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        _wait(lambda: not _port_open(self.port), 30, "the store's port closing")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        _wait(lambda: not _port_open(self.port), 30, "the store's port closing")

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{self.port}", region_name="us-east-1",
            aws_access_key_id=S3_KEYS["MANGO_FILE_S3_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_KEYS["MANGO_FILE_S3_SECRET_ACCESS_KEY"],
            config=Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1}),
        )  # fmt: skip

    def answers(self) -> bool:
        try:
            self.client().head_bucket(Bucket=BUCKET)
            return True
        except Exception:  # noqa: BLE001 — any failure is "not answering"
            return False


class Mango:
    """The API, a Celery worker and beat, as `make run` starts them, against the private stack."""

    def __init__(self, layout: Layout, *, pg: Postgres, redis: Redis, store: Store, upstream_url: str):
        self.port, self.url, self.var = layout.api, f"http://127.0.0.1:{layout.api}", layout.var
        prometheus = layout.var / "prometheus"
        shutil.rmtree(prometheus, ignore_errors=True)
        prometheus.mkdir()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MANGO_", "DATABASE_", "REDIS_"))},
            "MANGO_ENV_FILE": "",
            "DATABASE_URL": pg.url(),
            "REDIS_URL": redis.url(0),
            **store.env(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": "mango-faults-secret-key-not-for-production",
            "ANTHROPIC_BASE_URL": upstream_url,
            "ANTHROPIC_API_KEY": "scripted",
            "MANGO_SANDBOX": "local_process",
            "MANGO_LOG_LEVEL": "INFO",
            "PROMETHEUS_MULTIPROC_DIR": str(prometheus),
            "WEB_CONCURRENCY": "2",
            "MANGO_WORKSPACE_MAX_RUNNING_TURNS": "0",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        command = [sys.executable, "manage.py", *args]
        return subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)

    def _spawn(self, name: str, command: list[str], env: dict | None = None) -> None:
        log = open(self.var / f"{name}.log", "ab")  # noqa: SIM115 — lives as long as the process
        self.processes[name] = subprocess.Popen(
            command, cwd=ROOT, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def start(self) -> None:
        venv = Path(sys.executable).parent
        result = self.manage("migrate", "--noinput", "-v", "0")
        if result.returncode:
            raise RuntimeError(result.stderr)
        self._spawn(
            "api", [str(venv / "gunicorn"), "-c", "config/gunicorn.conf.py", "config.asgi:application",
                    "--bind", f"127.0.0.1:{self.port}"],
        )  # fmt: skip
        worker_env = {"MANGO_DB_POOL_MAX_SIZE": "4", "MANGO_WORKER_CONCURRENCY": "50"}
        self._spawn(
            "worker", [str(venv / "celery"), "-A", "config", "worker", "--loglevel", "INFO", "-n", "faults@%h",
                       "--without-gossip", "--without-mingle", "--without-heartbeat"], worker_env,
        )  # fmt: skip
        self._spawn(
            "beat", [str(venv / "celery"), "-A", "config", "beat", "--loglevel", "INFO",
                     "--schedule", str(self.var / "celerybeat-schedule")], {"MANGO_DB_POOL_MAX_SIZE": "4"},
        )  # fmt: skip
        _wait(lambda: self.ready(), 90, "Mango's /readyz")

    def readyz(self, timeout: float = 5.0) -> tuple[int, dict, float]:
        """(status, body, seconds) of one /readyz probe; status 0 when it did not answer in time."""
        started = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            conn.request("GET", "/readyz")
            response = conn.getresponse()
            body = json.loads(response.read() or b"{}")
            conn.close()
            return response.status, body, time.monotonic() - started
        except (OSError, ValueError):
            return 0, {}, time.monotonic() - started

    def ready(self) -> bool:
        return self.readyz()[0] == 200

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()


class Stack:
    """The private dependencies and Mango on them; `with Stack() as stack:` starts and stops all."""

    def __init__(self, layout: Layout = CAMPAIGN):
        from tests.scripted_model import ScriptedModel

        self.layout = layout
        shutil.rmtree(layout.var, ignore_errors=True)
        layout.var.mkdir(parents=True)
        self.pg, self.redis, self.store = Postgres(layout), Redis(layout), Store(layout)
        self.model = ScriptedModel()
        self.mango: Mango | None = None

    def dependency(self, name: str) -> Dependency:
        return {"postgresql": self.pg, "redis": self.redis, "object_store": self.store}[name]

    def __enter__(self) -> "Stack":
        try:
            self.pg.init()
            self.pg.start()
            self.pg.create_database()
            self.redis.start()
            self.store.start()
            self.mango = Mango(self.layout, pg=self.pg, redis=self.redis, store=self.store, upstream_url=self.model.url)
            self.mango.start()
        except BaseException:
            self.__exit__()  # stop whatever started: nothing of ours outlives a failed start
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.mango:
            self.mango.stop()
        self.store.stop()
        self.redis.stop()
        self.pg.stop()

    def use_django(self) -> None:
        """Point this process's Django (ORM, storage) at the private stack."""
        for key, value in self.mango.env.items():
            if key.startswith(("MANGO_", "DATABASE_", "REDIS_", "DJANGO_")):
                os.environ[key] = value
        os.environ["MANGO_LOG_LEVEL"] = "ERROR"  # this process's own pool warnings during the faults
        import django

        django.setup()

    def api_key(self, name: str) -> str:
        result = self.mango.manage("create_api_key", "--workspace", name)
        if result.returncode:
            raise RuntimeError(result.stderr)
        return result.stdout.strip().split()[-1]

    def fault(self, name: str, kind: str, *, down: float) -> float:
        """Fail a dependency (`stop`, `kill` or `restart`) and bring it back; the monotonic time
        it answered again."""
        dependency = self.dependency(name)
        if kind == "kill":
            dependency.kill()
        else:
            dependency.stop()
        if kind != "restart":
            time.sleep(down)
        dependency.start()
        return dependency.wait_answers()

    def leftovers(self) -> dict[str, int]:
        """What is left over with no request in flight: open intents, unfinished multipart
        uploads, objects without a File row (read with psycopg and boto3: no Django needed)."""
        import psycopg

        s3 = self.store.client()
        keys = set()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="files/"):
            keys |= {item["Key"] for item in page.get("Contents", [])}
        uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix="files/").get("Uploads", [])
        with psycopg.connect(self.pg.url()) as conn:
            open_intents = conn.execute("SELECT count(*) FROM files_storageintent WHERE state = 'open'").fetchone()[0]
            rows = {
                row[0]
                for row in conn.execute("SELECT object_key FROM files_file WHERE object_key = ANY(%s)", (list(keys),))
            }
        return {
            "open_intents": open_intents,
            "multipart_uploads": len(uploads),
            "objects_without_row": len(keys - rows),
        }


# --- the load -------------------------------------------------------------------------------


@dataclass
class Tally:
    """Everything the clients saw, shared by their threads."""

    answers: Counter = field(default_factory=Counter)  # (kind, status, error code)
    files: dict = field(default_factory=dict)  # file id -> sha256 of what was sent
    events: dict = field(default_factory=dict)  # event text -> session id (answered 200)
    sent_at: dict = field(default_factory=dict)  # event text -> monotonic time of its 200
    successes: dict = field(default_factory=lambda: defaultdict(list))  # kind -> monotonic times
    new_files: list = field(default_factory=list)  # uploaded, not yet made downloadable
    downloadable: list = field(default_factory=list)  # (file id, sha256) the downloaders may read
    cancelled: int = 0  # 503 upload_reclaimed
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, kind: str, status: int, code: str | None = None) -> None:
        with self.lock:
            self.answers[(kind, status, code)] += 1
            if status == 200:
                self.successes[kind].append(time.monotonic())
            if code == "upload_reclaimed":
                self.cancelled += 1


def _client(url: str, key: str):
    import anthropic

    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60)


def _call(tally: Tally, kind: str, call, stop: threading.Event, *, retry: bool = True):
    """Run one SDK call, counting every answer; a 503/529/429 is retried after its retry-after
    (the SDK's own rule) until it succeeds or the load stops. Returns the result or None."""
    import anthropic

    while True:
        try:
            result = call()
            tally.answer(kind, 200)
            return result
        except anthropic.APIStatusError as exc:
            body = exc.body if isinstance(exc.body, dict) else {}
            code = ((body.get("error") or {}).get("details") or {}).get("error_code")
            tally.answer(kind, exc.status_code, code)
            if not retry or exc.status_code not in (408, 429, 503, 529) or stop.is_set():
                return None
            time.sleep(min(float(exc.response.headers.get("retry-after") or 1), 5))
        except anthropic.APIConnectionError:
            tally.answer(kind, 0, "connection")
            if not retry or stop.is_set():
                return None
            time.sleep(0.5)


def uploader(url: str, key: str, tally: Tally, stop: threading.Event, rng: random.Random) -> None:
    client = _client(url, key)
    while not stop.is_set():
        size = 6 * 1024 * 1024 + rng.randint(0, 4096) if rng.random() < 0.12 else rng.randint(1, 64 * 1024)
        data = rng.randbytes(size)
        upload = functools.partial(client.beta.files.upload, file=("f.bin", data, "text/plain"))
        result = _call(tally, "upload", upload, stop)
        if result is not None:
            with tally.lock:
                tally.files[result.id] = hashlib.sha256(data).hexdigest()
                tally.new_files.append(result.id)


def downloader(url: str, key: str, tally: Tally, stop: threading.Event, rng: random.Random) -> None:
    client = _client(url, key)
    while not stop.is_set():
        with tally.lock:
            known = list(tally.downloadable)
        if not known:
            time.sleep(0.2)
            continue
        file_id, sha256 = rng.choice(known)
        body = _call(tally, "download", lambda file_id=file_id: client.beta.files.download(file_id).read(), stop)
        if body is not None and hashlib.sha256(body).hexdigest() != sha256:
            tally.answer("download", -1, "sha256_mismatch")
        time.sleep(0.05)


def sender(url: str, key: str, tally: Tally, stop: threading.Event, session_id: str, counter) -> None:
    client = _client(url, key)
    while not stop.is_set():
        text = f"faults message {next(counter)}"
        message = [{"type": "user.message", "content": [{"type": "text", "text": text}]}]
        send = functools.partial(client.beta.sessions.events.send, session_id, events=message)
        if _call(tally, "event_send", send, stop):
            with tally.lock:
                tally.events[text] = session_id
                tally.sent_at[text] = time.monotonic()
        time.sleep(0.3)


def streamer(port: int, key: str, tally: Tally, stop: threading.Event, session_id: str) -> None:
    """Follows the session's event stream, opening it again whenever it ends."""
    while not stop.is_set():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request(
                "GET", f"/v1/sessions/{session_id}/events/stream",
                headers={"authorization": f"Bearer {key}", "anthropic-beta": "managed-agents-2026-04-01"},
            )  # fmt: skip
            response = conn.getresponse()
            tally.answer("stream", response.status)
            if response.status != 200:
                response.read()
                time.sleep(1)
                continue
            while not stop.is_set() and response.readline():
                pass
        except OSError:
            tally.answer("stream", 0, "connection")
            time.sleep(0.5)


def promoter(tally: Tally, stop: threading.Event) -> None:
    """Bench only: makes the uploads downloadable (client uploads are not), for the downloaders."""
    from django.db import connection

    try:
        _promote(tally, stop)
    finally:
        connection.close()  # a thread's connection is its own: give it back before the thread ends


def _promote(tally: Tally, stop: threading.Event) -> None:
    from django.db import DatabaseError, connection

    from files.models import File

    while not stop.wait(0.5):
        with tally.lock:
            batch, tally.new_files = tally.new_files, []
        try:
            File.objects.filter(pk__in=batch).update(downloadable=True)
        except DatabaseError:
            connection.close()
            with tally.lock:
                tally.new_files += batch
            continue
        with tally.lock:
            tally.downloadable += [(file_id, tally.files[file_id]) for file_id in batch]


def slow_upload(port: int, key: str, tally: Tally, *, size: int, seconds: float) -> threading.Thread:
    """One upload that sends `size` bytes evenly over `seconds` (spanning a fault)."""
    boundary = "faultsboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    data = random.Random(size).randbytes(size)

    def run():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.putrequest("POST", "/v1/files")
            conn.putheader("authorization", f"Bearer {key}")
            conn.putheader("anthropic-beta", "files-api-2025-04-14")
            conn.putheader("content-type", f"multipart/form-data; boundary={boundary}")
            conn.putheader("content-length", str(len(head) + size + len(tail)))
            conn.endheaders()
            conn.send(head)
            step = 256 * 1024
            for offset in range(0, size, step):
                conn.send(data[offset : offset + step])
                time.sleep(seconds * step / size)
            conn.send(tail)
            response = conn.getresponse()
            body = json.loads(response.read() or b"{}")
            code = ((body.get("error") or {}).get("details") or {}).get("error_code")
            tally.answer("slow_upload", response.status, code)
            if response.status == 200:
                with tally.lock:
                    tally.files[body["id"]] = hashlib.sha256(data).hexdigest()
        except OSError:
            tally.answer("slow_upload", 0, "connection")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class Load:
    def __init__(self, stack: Stack, key: str, sessions: list[str], tally: Tally, *, seed: int, counter):
        self.stop = threading.Event()
        url, port = stack.mango.url, stack.mango.port
        rng = random.Random(seed)
        runs = [(uploader, (url, key, tally, self.stop, random.Random(rng.random()))) for _ in range(3)]
        runs += [(downloader, (url, key, tally, self.stop, random.Random(rng.random()))) for _ in range(2)]
        runs += [(sender, (url, key, tally, self.stop, session, counter)) for session in sessions]
        runs += [(streamer, (port, key, tally, self.stop, session)) for session in sessions[:2]]
        runs += [(promoter, (tally, self.stop))]
        self.threads = [threading.Thread(target=target, args=args) for target, args in runs]
        for thread in self.threads:
            thread.daemon = True
            thread.start()

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


class ReadyzProbe(threading.Thread):
    """/readyz every half second: the slowest answer, and what it said about `name`."""

    def __init__(self, mango: Mango):
        super().__init__(daemon=True)
        self.mango, self.stopped = mango, threading.Event()
        self.samples: list[tuple[float, int, dict, float]] = []

    def run(self):
        while not self.stopped.wait(0.5):
            status, body, seconds = self.mango.readyz(timeout=5)
            self.samples.append((time.monotonic(), status, body, seconds))

    def end(self):
        self.stopped.set()
        self.join(10)


# --- the campaign ---------------------------------------------------------------------------

KINDS = ("stop", "kill", "restart")


def _turn_started_after(pg: Postgres, session_ids, since_wall) -> float | None:
    """Wall time of the first session.status_running appended after `since_wall` (epoch s)."""
    import psycopg

    try:
        with psycopg.connect(pg.url(), connect_timeout=2) as conn:
            row = conn.execute(
                "SELECT min(created_at) FROM agent_sessions_sessionevent WHERE session_id = ANY(%s)"
                " AND type = 'session.status_running' AND created_at >= to_timestamp(%s)",
                (list(session_ids), since_wall),
            ).fetchone()
    except psycopg.Error:
        return None
    return row[0].timestamp() if row[0] else None


def run_fault(stack: Stack, name: str, kind: str, *, key: str, sessions: list[str], tally: Tally, down: float,
              seed: int, counter, log=print) -> dict:  # fmt: skip
    """One fault under load; what it left and how long each kind of request took to recover."""
    probe = ReadyzProbe(stack.mango)
    probe.start()
    load = Load(stack, key, sessions, tally, seed=seed, counter=counter)
    time.sleep(3)
    slow = None
    if name == "postgresql":
        slow = slow_upload(stack.mango.port, key, tally, size=20 * 1024 * 1024, seconds=down + 8)
    time.sleep(1)
    failed_at = time.monotonic()
    back = stack.fault(name, kind, down=down)
    back_wall = time.time() - (time.monotonic() - back)
    reconcile = None
    if name == "postgresql":
        # At once, with no grace window: the live slow upload must be left alone.
        reconcile = stack.mango.manage("reconcile_files", "--grace-seconds", "0")
    time.sleep(6)
    load.end()
    if slow is not None:
        slow.join(120)
    probe.end()
    recovery = {}
    for kind_name in ("upload", "download", "event_send"):
        after = [t for t in tally.successes[kind_name] if t >= back]
        recovery[kind_name] = round(min(after) - back, 2) if after else None
    turn = _wait(lambda: _turn_started_after(stack.pg, sessions, back_wall), 60, "a turn starting", 0.2)
    recovery["turn_start"] = round(max(0.0, turn - back_wall), 2)
    started = time.monotonic()
    left = stack.leftovers()
    while any(left.values()) and time.monotonic() - started < 60:
        time.sleep(1)
        left = stack.leftovers()
    during = [s for s in probe.samples if failed_at <= s[0] <= back]
    # Samples taken while it was down (a probe in the window may still have found it up, before
    # the stop took effect): each must name it. None when no probe fell in the outage (a restart).
    down = [s for s in during if s[1] == 503]
    named = all(name in s[2].get("error", {}).get("message", "") for s in down) if down else None
    result = {
        "dependency": name, "kind": kind, "recovery": recovery, "leftovers_after_60s": left,
        "settled_in": round(time.monotonic() - started, 1),
        "readyz_slowest": round(max((s[3] for s in probe.samples), default=0), 2),
        "readyz_unanswered": sum(1 for s in probe.samples if s[1] == 0),
        "readyz_named_it": named,
        "readyz_down_samples": len(down),
        "reconcile": reconcile.stdout.strip().splitlines()[-1:] if reconcile else None,
    }  # fmt: skip
    log(json.dumps(result))
    return result


def verify(stack: Stack, key: str, tally: Tally) -> dict:
    """Every File answered 200 read back (SHA-256), every event text counted once."""
    from files.models import File
    from sessions.models import SessionEvent

    client = _client(stack.mango.url, key)
    lost = 0
    File.objects.filter(pk__in=list(tally.files)).update(downloadable=True)  # bench only, as promoter()
    for file_id, sha256 in tally.files.items():
        try:
            if hashlib.sha256(client.beta.files.download(file_id).read()).hexdigest() != sha256:
                lost += 1
        except Exception:  # noqa: BLE001 — a File that cannot be read back is lost
            lost += 1
    counts = Counter()
    for payload in SessionEvent.objects.filter(type="user.message").values_list("payload", flat=True).iterator():
        for block in payload.get("content", []):
            if block.get("type") == "text" and block["text"].startswith("faults message "):
                counts[block["text"]] += 1
    return {
        "files": len(tally.files),
        "files_lost": lost,
        "events": len(tally.events),
        "events_duplicated": sum(1 for text in tally.events if counts[text] > 1),
        "events_lost": sum(1 for text in tally.events if counts[text] == 0),
        # Stored although the client never got a 200 (the send failed and was given up).
        "events_stored_unanswered": sum(1 for text in counts if text not in tally.events),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=5, help="faults per dependency")
    parser.add_argument("--down", type=float, default=4.0, help="seconds a stopped or killed dependency stays down")
    parser.add_argument("--only", default="postgresql,redis,object_store")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=3)
    args = parser.parse_args()
    import itertools
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    counter = itertools.count(1)
    started = time.monotonic()
    results = []
    with Stack() as stack:
        stack.use_django()
        key = stack.api_key("faults")
        client = _client(stack.mango.url, key)
        agent = client.beta.agents.create(name="faults", model="claude-sonnet-4-5")
        environment = client.beta.environments.create(name="faults")
        sessions = [client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
                    for _ in range(args.sessions)]  # fmt: skip
        tally = Tally()
        for name in args.only.split(","):
            for index in range(args.faults):
                kind = KINDS[index % len(KINDS)]
                results.append(
                    run_fault(stack, name, kind, key=key, sessions=sessions, tally=tally, down=args.down,
                              seed=args.seed * 1000 + len(results), counter=counter)
                )  # fmt: skip
        totals = verify(stack, key, tally)
    print("\n== per dependency ==")
    for name in args.only.split(","):
        mine = [r for r in results if r["dependency"] == name]
        recoveries = [v for r in mine for v in r["recovery"].values() if v is not None]
        orphans = sum(sum(r["leftovers_after_60s"].values()) for r in mine)
        print(
            f"{name:13} faults {len(mine)} ({', '.join(r['kind'] for r in mine)}): recovery max "
            f"{max(recoveries, default=0):.2f} s (per kind, worst fault: "
            + ", ".join(f"{k} {max((r['recovery'][k] or 0) for r in mine):.2f}" for k in mine[0]["recovery"])
            + f"); orphans 60 s after return {orphans}; settled within {max(r['settled_in'] for r in mine):.1f} s; "
            f"/readyz slowest {max(r['readyz_slowest'] for r in mine):.2f} s, unanswered "
            f"{sum(r['readyz_unanswered'] for r in mine)}, named it "
            f"{all(r['readyz_named_it'] is not False for r in mine)}"
        )
    fivehundreds = sum(count for (kind, status, _), count in tally.answers.items() if status >= 500 and status != 503)
    print("\n== totals ==")
    print(json.dumps(totals))
    print(f"answers of 500 (any 5xx but 503): {fivehundreds}; live uploads cancelled: {tally.cancelled}")
    print("answers by kind, status, code:")
    for (kind, status, code), count in sorted(tally.answers.items(), key=lambda item: str(item[0])):
        print(f"  {kind:11} {status:4} {code or '':24} {count}")
    print(f"campaign wall time {time.monotonic() - started:.0f} s")
    failed = totals["files_lost"] + totals["events_duplicated"] + totals["events_lost"] + fivehundreds + tally.cancelled
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
