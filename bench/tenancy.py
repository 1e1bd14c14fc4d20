"""One tenant must not take the server from the others, measured on `make run`'s layout: the API
(gunicorn + 2 uvicorn workers running config.asgi, config/gunicorn.conf.py), one Celery worker and beat,
with the pool settings `make run` uses.

    .venv/bin/python bench/tenancy.py [--streams 1000] [--workspaces 10] [--slow-uploads 200]
                                      [--rounds 5] [--no-throughput]

1. `--streams` event streams over `--workspaces` workspaces (one session each; the per-workspace
   stream cap raised for the bench): all open? Then `--rounds` times a `user.interrupt` is sent to
   every session at once; latency = send → seen on each stream (p50, p99, max). Server RSS.
2. Meanwhile another workspace's `GET /v1/files`: p50 / p99 / errors.
3. `--slow-uploads` uploads trickling a byte a second (25 workspaces at their upload cap, 8 each),
   and one more upload from a capped workspace (429 expected): another workspace's
   `GET /v1/files` p50 / p99 / errors meanwhile.
4. Peak PostgreSQL connections of the whole deployment (API + worker + beat), sampled every
   100 ms from pg_stat_activity (each process names its connections through PGAPPNAME).
5. bench/files_throughput.py on the same layout (ratios vs boto3, server peak RSS growth).

Targets (issue 9): all streams open; delivery p50 <= 50 ms, p99 <= 250 ms; GET /v1/files p99
<= 100 ms with 0 errors in 2 and 3; peak connections <= 40; throughput not worse than before.
"""

import argparse
import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import _common

APP = f"mango-bench-tenancy-{os.getpid()}"
UPLOADS_PER_WORKSPACE = 8  # MANGO_WORKSPACE_MAX_UPLOADS's default


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def gunicorn_argv(venv: Path) -> list[str]:
    return [str(venv / "gunicorn"), "-c", "config/gunicorn.conf.py"]


def beat_argv(venv: Path) -> list[str]:
    return [str(venv / "celery"), "-A", "config", "beat", "--loglevel", "WARNING"]


class Deployment:
    """What `make run` starts (minus the store, which is already running)."""

    def __init__(self, *, max_streams: int):
        self.port = _common.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = {**os.environ, "MANGO_LOG_LEVEL": "WARNING"}
        api_env = {**base, "WEB_CONCURRENCY": "2", "PGAPPNAME": f"{APP}-api"}
        api_env["MANGO_WORKSPACE_MAX_STREAMS"] = str(max_streams)
        worker_env = {**base, "MANGO_DB_POOL_MAX_SIZE": os.environ.get("MANGO_WORKER_DB_POOL_MAX_SIZE", "3")}
        venv = Path(sys.executable).parent
        (_common.ROOT / "var").mkdir(exist_ok=True)
        self.processes = [
            subprocess.Popen(
                [*gunicorn_argv(venv), "--bind", f"127.0.0.1:{self.port}", "config.asgi:application"],
                cwd=_common.ROOT,
                env=api_env,
                start_new_session=True,
            ),
            subprocess.Popen(
                [str(venv / "celery"), "-A", "config", "worker", "--loglevel", "WARNING", "--concurrency", "2"],
                cwd=_common.ROOT,
                env={**worker_env, "PGAPPNAME": f"{APP}-worker"},
                start_new_session=True,
                stdout=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                [*beat_argv(venv), "--schedule", str(_common.ROOT / "var" / f"bench-beat-{os.getpid()}")],
                cwd=_common.ROOT,
                env={**worker_env, "PGAPPNAME": f"{APP}-beat"},
                start_new_session=True,
                stdout=subprocess.DEVNULL,
            ),
        ]
        # Importing the app takes a while on a busy machine: the first answer may take half a minute.
        deadline = time.monotonic() + 240
        last = None
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                conn.request("GET", "/healthz")
                last = conn.getresponse().status
                if last == 200 and len(self.api_workers()) == 2:
                    return
            except (OSError, http.client.HTTPException) as exc:
                last = repr(exc)
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the API did not start (last /healthz: {last})")

    def api_workers(self) -> list[int]:
        pid = self.processes[0].pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                return [int(child) for child in handle.read().split()]
        except FileNotFoundError:
            return []

    def api_rss_mib(self) -> list[float]:
        values = []
        for pid in self.api_workers():
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        values.append(int(line.split()[1]) / 1024)
        return values

    def stop(self) -> None:
        for process in self.processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def descendants(pids: list[int]) -> set[int]:
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        found.add(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                todo += [int(child) for child in handle.read().split()]
        except FileNotFoundError:
            pass
    return found


class ConnectionSampler(threading.Thread):
    """Peak PostgreSQL connections of the deployment, per role and in all: the Django connections
    (named through PGAPPNAME) and the intent-owner connections of its processes
    (files/liveness.py names them mango-intent-owner-<pid>)."""

    def __init__(self, deployment: "Deployment"):
        super().__init__(daemon=True)
        self.deployment = deployment
        self.peak_total = 0
        self.peak_by_role: dict[str, int] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        import psycopg
        from django.db import connection

        params = connection.get_connection_params()
        dsn = psycopg.conninfo.make_conninfo(
            host=params.get("host") or "",
            port=params.get("port") or "",
            user=params.get("user") or "",
            dbname="postgres",
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            pids, pids_at = set(), 0.0
            while not self.stop_event.is_set():
                if time.monotonic() - pids_at > 1:
                    pids, pids_at = descendants([p.pid for p in self.deployment.processes]), time.monotonic()
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity "
                    "WHERE application_name LIKE %s OR application_name LIKE 'mango-intent-owner-%%' "
                    "GROUP BY application_name",
                    [f"{APP}-%"],
                ).fetchall()
                total, by_role = 0, {}
                for name, count in rows:
                    if name.startswith("mango-intent-owner-"):
                        if int(name.rsplit("-", 1)[-1]) not in pids:
                            continue
                        role = "intent-owner"
                    else:
                        role = name.rsplit("-", 1)[-1]
                    by_role[role] = by_role.get(role, 0) + count
                    total += count
                for role, count in by_role.items():
                    self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), count)
                self.peak_total = max(self.peak_total, total)
                time.sleep(0.1)


# --- the client side, on one event loop ------------------------------------------------------


async def open_stream(port: int, key: str, session_id: str, record: dict) -> None:
    """A raw SSE stream; records when it opened and when each `user.interrupt` arrived."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            f"GET /v1/sessions/{session_id}/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    buffer = b""
    record["writer"] = writer
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                record.setdefault("error", "closed")
                return
            now = time.monotonic()
            buffer += data
            if "status" not in record and b"\r\n\r\n" in buffer:
                record["status"] = int(buffer.split(b" ", 2)[1])
                if record["status"] != 200:
                    record["error"] = buffer[:300].decode(errors="replace")
                    return
            if "opened" not in record and b": connected" in buffer:
                record["opened"] = now
            while b"event: user.interrupt" in buffer:
                record.setdefault("seen", []).append(now)
                buffer = buffer.split(b"event: user.interrupt", 1)[1]
            buffer = buffer[-64:]
    except (ConnectionError, asyncio.CancelledError):
        return


async def slow_upload(port: int, key: str, stop: asyncio.Event, record: dict) -> None:
    boundary = "bench-slow"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    size = 1_000_000
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(head) + size + len(boundary) + 8}\r\n\r\n"
        ).encode()
        + head
    )
    await writer.drain()
    try:
        while not stop.is_set():
            try:
                data = await asyncio.wait_for(reader.read(4096), 1.0)
                if data:  # answered early (e.g. 429)
                    record["status"] = int(data.split(b" ", 2)[1])
                    return
                return
            except TimeoutError:
                writer.write(b"x")
                await writer.drain()
        record["status"] = "held"
    finally:
        writer.close()


def files_list_latencies(port: int, key: str, seconds: float, out: list, errors: list) -> None:
    """Another workspace's GET /v1/files, back to back, for `seconds`."""
    deadline = time.monotonic() + seconds
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            conn.request("GET", "/v1/files?limit=20", headers={"Authorization": f"Bearer {key}"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                errors.append(response.status)
        except OSError as exc:
            errors.append(repr(exc))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            continue
        out.append(time.monotonic() - started)
        time.sleep(0.05)


def send_interrupt(port: int, key: str, session_id: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST",
        f"/v1/sessions/{session_id}/events",
        body=json.dumps({"events": [{"type": "user.interrupt"}]}),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    assert response.status == 200, response.read()
    response.read()
    conn.close()


async def run(args, deployment: Deployment, sampler: ConnectionSampler) -> dict:
    import anthropic

    loop = asyncio.get_running_loop()
    port = deployment.port
    tenants = []
    for index in range(args.workspaces):
        raw_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-{index}")
        client = anthropic.Anthropic(base_url=deployment.url, api_key=raw_key, max_retries=0)
        agent = client.beta.agents.create(name="bench", model="claude-sonnet-4-5")
        env = client.beta.environments.create(name="bench")
        session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        tenants.append((raw_key, session.id))
    other_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-other")
    results: dict = {}

    # 1. streams
    records = [{} for _ in range(args.streams)]
    started = time.monotonic()
    tasks = []
    for index, record in enumerate(records):
        key, session_id = tenants[index % len(tenants)]
        tasks.append(asyncio.ensure_future(open_stream(port, key, session_id, record)))
        if index % 50 == 49:
            await asyncio.sleep(0.05)
    while time.monotonic() - started < 120:
        if all("opened" in r or "error" in r for r in records):
            break
        await asyncio.sleep(0.1)
    opened = sum("opened" in r for r in records)
    results["streams_open"] = f"{opened}/{args.streams} in {time.monotonic() - started:.1f} s"
    results["stream_errors"] = sorted({str(r.get("error"))[:120] for r in records if "error" in r})[:3]
    rss_idle = deployment.api_rss_mib()

    # 2. another tenant's GET /v1/files while every stream is open, and deliveries
    latencies, errors = [], []
    lister = threading.Thread(
        target=files_list_latencies, args=(port, other_key, 10.0 + args.rounds * 1.5, latencies, errors)
    )
    lister.start()
    delivery, after_answer, posts = [], [], []
    for round_number in range(args.rounds + 1):  # round 0 warms the POST path up
        await asyncio.sleep(1.0)
        for record in records:
            record["seen"] = []
        sent, answered = {}, {}

        def send(key, session_id, sent=sent, answered=answered):
            sent[session_id] = time.monotonic()
            send_interrupt(port, key, session_id)
            answered[session_id] = time.monotonic()

        await asyncio.gather(*(loop.run_in_executor(None, send, k, s) for k, s in tenants))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(r.get("seen") for r in records if "opened" in r):
            await asyncio.sleep(0.01)
        missing = sum(1 for r in records if "opened" in r and not r.get("seen"))
        if round_number == 0:
            continue
        results[f"round_{round_number}_missing"] = missing
        posts += [answered[s] - sent[s] for _, s in tenants]
        for index, record in enumerate(records):
            if "opened" in record and record.get("seen"):
                session_id = tenants[index % len(tenants)][1]
                delivery.append(record["seen"][0] - sent[session_id])
                after_answer.append(record["seen"][0] - answered[session_id])
    await loop.run_in_executor(None, lister.join)
    results["delivery"] = (
        f"{len(delivery)} deliveries, POST sent -> seen on the stream: p50 {ms(pct(delivery, 50))}, "
        f"p99 {ms(pct(delivery, 99))}, max {ms(max(delivery))}"
    )
    results["delivery_after_post_answered"] = (
        f"POST answered -> seen (negative: seen before the answer): p50 {ms(pct(after_answer, 50))}, "
        f"p99 {ms(pct(after_answer, 99))}; the POSTs themselves: p50 {ms(pct(posts, 50))}, "
        f"p99 {ms(pct(posts, 99))}"
    )
    rss_streams = deployment.api_rss_mib()
    results["api_rss_mib"] = (
        f"before streams n/a; with {opened} streams open: "
        + ", ".join(f"{value:.0f}" for value in rss_streams)
        + f" (workers; idle after open {', '.join(f'{v:.0f}' for v in rss_idle)})"
    )
    results["_list_streams"] = (latencies, errors)
    results["files_list_during_streams"] = (
        f"{len(latencies)} requests: p50 {ms(pct(latencies, 50))}, p99 {ms(pct(latencies, 99))}, "
        f"errors {len(errors)} {errors[:3]}"
    )

    # 3. slow uploads (streams still open)
    upload_keys = []
    for index in range((args.slow_uploads + UPLOADS_PER_WORKSPACE - 1) // UPLOADS_PER_WORKSPACE):
        raw_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-up{index}")
        upload_keys.append(raw_key)
    stop = asyncio.Event()
    upload_records = [{} for _ in range(args.slow_uploads)]
    upload_tasks = [
        asyncio.ensure_future(slow_upload(port, upload_keys[i // UPLOADS_PER_WORKSPACE], stop, upload_records[i]))
        for i in range(args.slow_uploads)
    ]
    await asyncio.sleep(3.0)
    extra = {}
    extra_stop = asyncio.Event()
    try:
        await asyncio.wait_for(slow_upload(port, upload_keys[0], extra_stop, extra), 30)
    except TimeoutError:
        extra["status"] = "no answer within 30 s"
    latencies, errors = [], []
    await loop.run_in_executor(None, files_list_latencies, port, other_key, 10.0, latencies, errors)
    early = [r.get("status") for r in upload_records if "status" in r]
    results["slow_uploads"] = (
        f"{args.slow_uploads} trickling 1 byte/s over {len(upload_keys)} workspaces; answered early: "
        f"{len(early)} {sorted(set(map(str, early)))}; one more from a capped workspace: {extra.get('status')}"
    )
    results["_list_uploads"] = (latencies, errors)
    results["files_list_during_slow_uploads"] = (
        f"{len(latencies)} requests: p50 {ms(pct(latencies, 50))}, p99 {ms(pct(latencies, 99))}, "
        f"errors {len(errors)} {errors[:3]}"
    )
    stop.set()
    await asyncio.gather(*upload_tasks, return_exceptions=True)
    for record in records:
        if "writer" in record:
            record["writer"].close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    results["delivery_samples"] = delivery
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--workspaces", type=int, default=10)
    parser.add_argument("--slow-uploads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-throughput", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    _common.setup()
    deployment = Deployment(max_streams=args.streams)
    sampler = ConnectionSampler(deployment)
    sampler.start()
    try:
        results = asyncio.run(run(args, deployment, sampler))
        time.sleep(1)
    finally:
        sampler.stop_event.set()
        sampler.join(5)
        deployment.stop()
    delivery = results.pop("delivery_samples")
    list_streams, list_uploads = results.pop("_list_streams"), results.pop("_list_uploads")
    print("layout: gunicorn -c config/gunicorn.conf.py config.asgi:application (2 uvicorn workers) + worker + beat")
    for name, value in results.items():
        print(f"{name}: {value}")
    print(
        f"peak PostgreSQL connections of the deployment: {sampler.peak_total} "
        f"(per process kind, peaks: {sampler.peak_by_role})"
    )
    targets = {
        "all streams open": results["streams_open"].startswith(f"{args.streams}/"),
        "delivery p50 <= 50 ms": pct(delivery, 50) <= 0.050,
        "delivery p99 <= 250 ms": pct(delivery, 99) <= 0.250,
        "GET /v1/files during streams p99 <= 100 ms, 0 errors": pct(list_streams[0], 99) <= 0.1 and not list_streams[1],
        "GET /v1/files during slow uploads p99 <= 100 ms, 0 errors": pct(list_uploads[0], 99) <= 0.1
        and not list_uploads[1],
        "peak connections <= 40": sampler.peak_total <= 40,
    }
    for name, ok in targets.items():
        print(f"target {name}: {'PASS' if ok else 'FAIL'}")
    if not args.no_throughput:
        print("files throughput on the same layout (bench/files_throughput.py --layout asgi):", flush=True)
        subprocess.run(
            [sys.executable, str(_common.ROOT / "bench" / "files_throughput.py"), "--layout", "asgi"], check=False
        )


if __name__ == "__main__":
    main()
