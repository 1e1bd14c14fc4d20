"""One tenant must not take the server from the others, measured on `make run`'s layout: the API
(gunicorn + 2 uvicorn workers running config.asgi, config/gunicorn.conf.py), the Celery workers
(MANGO_WORKER_PROCESSES) and beat, with the pool settings `make run` uses.

    .venv/bin/python bench/tenancy.py [--streams 1000] [--workspaces 10] [--slow-uploads 200]
                                      [--rounds 5] [--no-throughput]

0. Baseline, before any stream is open: the same POSTs of events as in 1, timed alone.
1. `--streams` event streams over `--workspaces` workspaces (one session each; the per-workspace
   stream cap raised for the bench), held by a child process of their own: all open? Then
   `--rounds` rounds of one `user.interrupt` per session sent one at a time (150 ms apart: each
   event's fan-out to its streams measured alone), and `--rounds` rounds of the 10 POSTs at once
   (a burst: the POSTs themselves then share the server's 2 cores). Latency = POST sent -> seen on
   each stream following the session, matched by event id (p50, p99, max), and POST answered ->
   seen (the fan-out alone). Server RSS before and with the streams.
2. Meanwhile another workspace's `GET /v1/files`, from a process of its own: p50 / p99 / errors.
3. `--slow-uploads` uploads trickling a byte a second (25 workspaces at their upload cap, 8 each),
   then finished: every one must get 200 (no 503 from a database-pool wait, no 408); one more
   upload from a capped workspace (429 expected); another workspace's `GET /v1/files` meanwhile.
4. Peak PostgreSQL connections of the whole deployment (API + worker + beat), sampled every
   100 ms from pg_stat_activity (each process names its connections through PGAPPNAME).
5. bench/files_throughput.py on the same layout (ratios vs boto3, server peak RSS growth).

The streams and the lister run in child processes so that neither the client's reading of 1,000
streams nor this process's POSTs delay the other's measurements (a single client process on a
2-core machine inflated both); timestamps are time.monotonic(), one clock for every process.

Targets (issue 9): all streams open; delivery p50 <= 50 ms, p99 <= 250 ms (checked for events one
at a time, and reported for the burst); GET /v1/files p99 <= 100 ms with 0 errors in 2 and 3;
every slow upload 200; peak connections <= 40; throughput not worse than before.
"""

import argparse
import asyncio
import collections
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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


def worker_argv(venv: Path) -> list[str]:
    return [str(venv / "celery"), "-A", "config", "worker", "--loglevel", "WARNING"]


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
        worker_env = {**base, "MANGO_DB_POOL_MAX_SIZE": os.environ.get("MANGO_WORKER_DB_POOL_MAX_SIZE", "4")}
        venv = Path(sys.executable).parent
        (_common.ROOT / "var").mkdir(exist_ok=True)
        queues = ",".join(sorted({"celery", os.environ.get("MANGO_SESSIONS_QUEUE", "celery")}))
        self.processes = [
            subprocess.Popen(
                [*gunicorn_argv(venv), "--bind", f"127.0.0.1:{self.port}", "config.asgi:application"],
                cwd=_common.ROOT,
                env=api_env,
                start_new_session=True,
            ),
            # As make run starts them (scripts/run.sh, docs/operating.md "Workers"): MANGO_WORKER_PROCESSES
            # threads-pool workers of MANGO_WORKER_CONCURRENCY turns each. They consume the sessions
            # queue, so every event sent wakes a turn as under make run.
            *(
                subprocess.Popen(
                    [*worker_argv(venv), "-n", f"{APP}-{index}@%h", "-Q", queues],
                    cwd=_common.ROOT,
                    env={
                        **worker_env,
                        "MANGO_WORKER_CONCURRENCY": os.environ.get("MANGO_WORKER_CONCURRENCY", "100"),
                        "PGAPPNAME": f"{APP}-worker",
                    },
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                )
                for index in range(int(os.environ.get("MANGO_WORKER_PROCESSES", "2")))
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

    def api_cpu_seconds(self) -> float:
        """User + system CPU time of the API workers so far."""
        ticks = 0
        for pid in self.api_workers():
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

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
        self.peak_server = 0  # every connection on the PostgreSQL server (all databases, everyone)
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
                # The Celery worker names its connections mango-worker (config/celery.py) whatever
                # PGAPPNAME says: counted on the bench's database, which only this deployment uses.
                rows = conn.execute(
                    "SELECT CASE WHEN application_name = 'mango-worker' THEN %s ELSE application_name END, "
                    "count(*) FROM pg_stat_activity "
                    "WHERE application_name LIKE %s OR application_name LIKE 'mango-intent-owner-%%' "
                    "OR (application_name = 'mango-worker' AND datname = %s) GROUP BY 1",
                    [f"{APP}-worker", f"{APP}-%", params["dbname"]],
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
                server_total = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()[0]
                self.peak_server = max(self.peak_server, server_total)
                for role, count in by_role.items():
                    self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), count)
                self.peak_total = max(self.peak_total, total)
                time.sleep(0.1)


# --- child processes: the streams, and another tenant's lister ---------------------------------
# Each runs alone, so that neither the 1,000 streams' reads nor the POSTs of this process delay
# the other's clock. Timestamps are time.monotonic(): CLOCK_MONOTONIC, one clock for every process.

INTERRUPT_FRAME = re.compile(rb'^event: user\.interrupt\ndata: .*?"id":"(sevt_[A-Za-z0-9]+)"', re.S)


async def open_stream(port: int, key: str, session_id: str, record: dict) -> None:
    """A raw SSE stream; records when it opened and (time, event id) of each user.interrupt."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            f"GET /v1/sessions/{session_id}/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    record["writer"], record["seen"] = writer, []
    buffer = b""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                record.setdefault("error", "closed")
                return
            now = time.monotonic()
            buffer += data
            if "status" not in record:
                if b"\r\n\r\n" not in buffer:
                    continue
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                record["status"] = int(head.split(b" ", 2)[1])
                if record["status"] != 200:
                    record["error"] = (head + buffer)[:300].decode(errors="replace")
                    return
            # Chunked framing: chunk-size lines sit between SSE frames; frames end with a blank line.
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                frame = frame.split(b"\r\n")[-1] if b"\r\n" in frame else frame
                if frame.startswith(b": connected"):
                    record.setdefault("opened", now)
                match = INTERRUPT_FRAME.match(frame)
                if match:
                    record["seen"].append((now, match.group(1).decode()))
    except (ConnectionError, asyncio.CancelledError):
        return


async def stream_child(port: int) -> None:
    """--stream-child: reads [[key, session_id], ...] (one per stream) from stdin, opens them all,
    prints {"opened", "seconds", "errors"}; then on "report" prints every stream's sightings
    [[time, event_id], ...] and on "close" (or end of input) closes them."""
    loop = asyncio.get_running_loop()
    assignments = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    records = [{} for _ in assignments]
    started = time.monotonic()
    tasks = []
    for index, (key, session_id) in enumerate(assignments):
        tasks.append(asyncio.ensure_future(open_stream(port, key, session_id, records[index])))
        if index % 50 == 49:
            await asyncio.sleep(0.05)
    while time.monotonic() - started < 120 and not all("opened" in r or "error" in r for r in records):
        await asyncio.sleep(0.1)
    errors = sorted({str(r.get("error"))[:120] for r in records if "error" in r})[:3]
    opened = sum("opened" in r for r in records)
    print(json.dumps({"opened": opened, "seconds": time.monotonic() - started, "errors": errors}), flush=True)
    while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "report":
        print(json.dumps([r.get("seen", []) if "opened" in r else None for r in records]), flush=True)
    for record in records:
        if "writer" in record:
            record["writer"].close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def list_child(port: int, key: str, seconds: float) -> None:
    """--list-child: another workspace's GET /v1/files, back to back for `seconds`; prints
    {"latencies", "errors"}."""
    latencies, errors = [], []
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
        latencies.append(time.monotonic() - started)
        time.sleep(0.05)
    print(json.dumps({"latencies": latencies, "errors": errors}), flush=True)


def child(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=_common.ROOT
    )


class Lister:
    """Another workspace's GET /v1/files in a process of its own, for `seconds`."""

    def __init__(self, port: int, key: str, seconds: float):
        self.process = child("--list-child", str(port), key, str(seconds))

    def result(self) -> tuple[list[float], list]:
        out, _ = self.process.communicate(timeout=600)
        data = json.loads(out.strip().splitlines()[-1])
        return data["latencies"], data["errors"]


def latency_line(latencies: list[float], errors: list) -> str:
    if not latencies:
        return f"0 requests, errors {len(errors)} {errors[:3]}"
    return (
        f"{len(latencies)} requests: p50 {ms(pct(latencies, 50))}, p99 {ms(pct(latencies, 99))}, "
        f"errors {len(errors)} {errors[:3]}"
    )


# --- this process: events sent, uploads, the figures -----------------------------------------


def send_interrupt(port: int, key: str, session_id: str) -> tuple[str, float, float]:
    """POST one user.interrupt; (its event id, sent, answered)."""
    body, sent, answered = _common.post_interrupt(port, key, session_id)
    return body["data"][0]["id"], sent, answered


def send_round(port: int, tenants: list, *, burst: bool) -> list[tuple[str, float, float]]:
    """One event to every session: all at once (`burst`), or one at a time, 150 ms apart, so
    each event's fan-out is measured alone."""
    if burst:
        with ThreadPoolExecutor(max_workers=len(tenants)) as pool:
            return list(pool.map(lambda tenant: send_interrupt(port, *tenant), tenants))
    sent = []
    for tenant in tenants:
        sent.append(send_interrupt(port, *tenant))
        time.sleep(0.15)
    return sent


def deliveries(sightings: list, posts: dict[str, tuple[float, float]]) -> tuple[list, list, int]:
    """Per (stream, event sent): POST sent -> seen, POST answered -> seen; and how many of the
    events a stream should have seen it did not."""
    from_sent, from_answer, seen_ids = [], [], set()
    for record in sightings:
        if record is None:
            continue
        for seen_at, event_id in record:
            if event_id in posts and (id(record), event_id) not in seen_ids:
                seen_ids.add((id(record), event_id))
                from_sent.append(seen_at - posts[event_id][0])
                from_answer.append(seen_at - posts[event_id][1])
    return from_sent, from_answer, len(seen_ids)


def delivery_line(from_sent: list, from_answer: list, posts: dict, expected: int, count: int) -> str:
    post_times = [answered - sent for sent, answered in posts.values()]
    return (
        f"{count}/{expected} deliveries; POST sent -> seen: p50 {ms(pct(from_sent, 50))}, "
        f"p99 {ms(pct(from_sent, 99))}, max {ms(max(from_sent))}; POST answered -> seen: "
        f"p50 {ms(pct(from_answer, 50))}, p99 {ms(pct(from_answer, 99))}; the POSTs: "
        f"p50 {ms(pct(post_times, 50))}, p99 {ms(pct(post_times, 99))}"
    )


async def slow_upload(port: int, key: str, stop: asyncio.Event, record: dict, *, size: int = 64) -> None:
    """A `size`-byte upload that sends its body a byte a second until `stop`, then the rest; records
    the status it got (early if the server answered before `stop`)."""
    boundary = "bench-slow"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        (
            f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(head) + size + len(tail)}\r\n\r\n"
        ).encode()
        + head
    )
    await writer.drain()
    sent = 0
    try:
        while not stop.is_set() and sent < size - 1:
            try:
                data = await asyncio.wait_for(reader.read(4096), 1.0)
                record["early"] = True
                record["status"] = int(data.split(b" ", 2)[1]) if data else "closed"
                record["answer"] = data.partition(b"\r\n\r\n")[2][:200].decode(errors="replace")
                return
            except TimeoutError:
                writer.write(b"x")
                sent += 1
                await writer.drain()
        writer.write(b"x" * (size - sent) + tail)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(4096), 120)
        record["status"] = int(data.split(b" ", 2)[1]) if data else "closed"
    except (OSError, TimeoutError) as exc:
        record["status"] = repr(exc)
    finally:
        writer.close()


async def tenants_setup(url: str, count: int, label: str) -> list[tuple[str, str]]:
    import anthropic

    loop = asyncio.get_running_loop()
    tenants = []
    for index in range(count):
        raw_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-{label}{index}")
        client = anthropic.Anthropic(base_url=url, api_key=raw_key, max_retries=0)
        agent = client.beta.agents.create(name="bench", model="claude-sonnet-4-5")
        env = client.beta.environments.create(name="bench")
        session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        tenants.append((raw_key, session.id))
    return tenants


async def measure_posts(port: int, tenants: list, rounds: int, deployment: "Deployment", lister=None) -> tuple:
    """`rounds` rounds one event at a time, then `rounds` bursts; ({mode: {event_id: (sent,
    answered)}}, API CPU seconds of the one-at-a-time rounds). `lister` (a callable) starts the
    other tenant's lister after those rounds, so that their CPU time is the events' alone."""
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: send_round(port, tenants, burst=True))  # warm-up
    posts = {"one at a time": {}, "burst of 10 at once": {}}
    cpu = deployment.api_cpu_seconds()
    for mode, burst in (("one at a time", False), ("burst of 10 at once", True)):
        for _ in range(rounds):
            await asyncio.sleep(1.0)
            for event_id, sent, answered in await loop.run_in_executor(
                None, lambda burst=burst: send_round(port, tenants, burst=burst)
            ):
                posts[mode][event_id] = (sent, answered)
        if not burst:
            cpu = deployment.api_cpu_seconds() - cpu
            started_lister = lister() if lister else None
    await asyncio.sleep(2.0)  # late sightings
    return posts, cpu, started_lister


async def run_streams(args, deployment: "Deployment", tenants: list, other_key: str, results: dict) -> subprocess.Popen:
    """Phases 1 and 2: POSTs with no stream open (baseline), the streams, the deliveries and
    another workspace's lister meanwhile. Returns the stream child (still holding the streams)."""
    port = deployment.port
    baseline, cpu_base, _ = await measure_posts(port, tenants, args.rounds, deployment)
    for mode, posts in baseline.items():
        times = [answered - sent for sent, answered in posts.values()]
        results[f"POSTs with no stream open, {mode}"] = f"p50 {ms(pct(times, 50))}, p99 {ms(pct(times, 99))}"
    rss_before = deployment.api_rss_mib()
    streams = child("--stream-child", str(port))
    assignments = [tenants[i % len(tenants)] for i in range(args.streams)]
    streams.stdin.write(json.dumps(assignments) + "\n")
    streams.stdin.flush()
    opened = json.loads(streams.stdout.readline())
    results["streams_open"] = f"{opened['opened']}/{args.streams} in {opened['seconds']:.1f} s"
    results["stream_errors"] = opened["errors"]
    posts, cpu_streams, lister = await measure_posts(
        port, tenants, args.rounds, deployment, lambda: Lister(port, other_key, 8.0 + args.rounds * 2.5)
    )
    events, frames = args.rounds * len(tenants), args.rounds * opened["opened"]
    results["api_cpu"] = (
        f"events one at a time: {cpu_base / events * 1000:.1f} ms of API CPU per event with no stream open, "
        f"{cpu_streams / events * 1000:.1f} ms with {opened['opened']} open: "
        f"{(cpu_streams - cpu_base) / frames * 1e6:.0f} us per frame delivered (heartbeats included)"
    )
    streams.stdin.write("report\n")
    streams.stdin.flush()
    sightings = json.loads(streams.stdout.readline())
    for mode, sent in posts.items():
        from_sent, from_answer, count = deliveries(sightings, sent)
        expected = len(sent) * opened["opened"] // len(tenants)
        results[f"_delivery {mode}"] = from_sent
        results[f"delivery, {mode}"] = delivery_line(from_sent, from_answer, sent, expected, count)
    rss = deployment.api_rss_mib()
    results["api_rss_mib"] = (
        f"{', '.join(f'{v:.0f}' for v in rss_before)} before the streams; "
        f"{', '.join(f'{v:.0f}' for v in rss)} with {opened['opened']} open (per worker)"
    )
    results["_list_streams"] = lister.result()
    results["files_list_during_streams"] = latency_line(*results["_list_streams"])
    return streams


async def run_uploads(args, port: int, other_key: str, results: dict) -> None:
    """Phase 3: slow uploads (streams still open), one more from a capped workspace, the lister."""
    loop = asyncio.get_running_loop()
    upload_keys = []
    for index in range((args.slow_uploads + UPLOADS_PER_WORKSPACE - 1) // UPLOADS_PER_WORKSPACE):
        raw_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-up{index}")
        upload_keys.append(raw_key)
    stop = asyncio.Event()
    records = [{} for _ in range(args.slow_uploads)]
    tasks = [
        asyncio.ensure_future(slow_upload(port, upload_keys[i // UPLOADS_PER_WORKSPACE], stop, records[i]))
        for i in range(args.slow_uploads)
    ]
    await asyncio.sleep(3.0)
    extra = {}
    try:
        await asyncio.wait_for(slow_upload(port, upload_keys[0], asyncio.Event(), extra), 30)
    except TimeoutError:
        extra["status"] = "no answer within 30 s"
    lister = Lister(port, other_key, 10.0)
    results["_list_uploads"] = await loop.run_in_executor(None, lister.result)
    results["files_list_during_slow_uploads"] = latency_line(*results["_list_uploads"])
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    statuses = collections.Counter(str(r.get("status")) for r in records)
    early = collections.Counter(str(r.get("status")) for r in records if r.get("early"))
    results["_uploads_ok"] = statuses == {"200": args.slow_uploads}
    results["slow_uploads"] = (
        f"{args.slow_uploads} trickling 1 byte/s over {len(upload_keys)} workspaces, then finished: "
        f"{dict(statuses)} (answered before finishing: {dict(early) or 0}); one more from a capped "
        f"workspace: {extra.get('status')}"
    )
    answers = sorted({r["answer"] for r in records if r.get("early") and r.get("answer")})
    if answers:
        results["slow_uploads_early_answers"] = answers[:3]


async def run(args, deployment: "Deployment") -> dict:
    loop = asyncio.get_running_loop()
    tenants = await tenants_setup(deployment.url, args.workspaces, "")
    other_key, _ = await loop.run_in_executor(None, _common.api_key, f"bench-tenancy-{os.getpid()}-other")
    results: dict = {}
    streams = await run_streams(args, deployment, tenants, other_key, results)
    try:
        await run_uploads(args, deployment.port, other_key, results)
    finally:
        streams.communicate("close\n", timeout=60)
    return results


def report(args, results: dict, sampler: "ConnectionSampler", load: tuple[str, str]) -> None:
    print("layout: gunicorn -c config/gunicorn.conf.py config.asgi:application (2 uvicorn workers) + workers + beat")
    print(f"load average (1, 5, 15 min): at start {load[0]}; at end {load[1]}")
    for name, value in results.items():
        if not name.startswith("_"):
            print(f"{name}: {value}")
    print(
        f"peak PostgreSQL connections of the deployment: {sampler.peak_total} "
        f"(per process kind, peaks: {sampler.peak_by_role}); the whole PostgreSQL server (everyone on this "
        f"machine) peaked at {sampler.peak_server} of its max_connections"
    )
    one, burst = results["_delivery one at a time"], results["_delivery burst of 10 at once"]
    list_streams, list_uploads = results["_list_streams"], results["_list_uploads"]
    targets = {
        "all streams open": results["streams_open"].startswith(f"{args.streams}/"),
        "delivery p50 <= 50 ms (one event at a time)": pct(one, 50) <= 0.050,
        "delivery p99 <= 250 ms (one event at a time)": pct(one, 99) <= 0.250,
        "delivery p50 <= 50 ms (burst of 10 POSTs at once)": pct(burst, 50) <= 0.050,
        "delivery p99 <= 250 ms (burst of 10 POSTs at once)": pct(burst, 99) <= 0.250,
        "GET /v1/files during streams p99 <= 100 ms, 0 errors": bool(list_streams[0])
        and pct(list_streams[0], 99) <= 0.1
        and not list_streams[1],
        "GET /v1/files during slow uploads p99 <= 100 ms, 0 errors": bool(list_uploads[0])
        and pct(list_uploads[0], 99) <= 0.1
        and not list_uploads[1],
        "every slow upload answered 200 (no 503, no 408)": results["_uploads_ok"],
        "peak connections <= 40": sampler.peak_total <= 40,
    }
    for name, ok in targets.items():
        print(f"target {name}: {'PASS' if ok else 'FAIL'}")


def loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def main() -> None:
    if sys.argv[1:2] == ["--stream-child"]:
        asyncio.run(stream_child(int(sys.argv[2])))
        return
    if sys.argv[1:2] == ["--list-child"]:
        list_child(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--workspaces", type=int, default=10)
    parser.add_argument("--slow-uploads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-throughput", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    _common.setup()
    load_start = loadavg()
    deployment = Deployment(max_streams=args.streams)
    sampler = ConnectionSampler(deployment)
    sampler.start()
    try:
        results = asyncio.run(run(args, deployment))
        time.sleep(1)
    finally:
        sampler.stop_event.set()
        sampler.join(5)
        deployment.stop()
    report(args, results, sampler, (load_start, loadavg()))
    if not args.no_throughput:
        print("files throughput on the same layout (bench/files_throughput.py --layout asgi):", flush=True)
        subprocess.run(
            [sys.executable, str(_common.ROOT / "bench" / "files_throughput.py"), "--layout", "asgi"], check=False
        )


if __name__ == "__main__":
    main()
