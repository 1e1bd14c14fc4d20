"""Turns at scale on one worker node: N sessions receive a message at once; each turn makes
3 bash tool calls then a final message, against a scripted upstream (a process of its own)
answering every call after --delay seconds. Printed side by side, measured in one run:

  * `make run`'s layout: MANGO_WORKER_PROCESSES (--processes, 2) worker processes with --pool
    threads --concurrency MANGO_WORKER_CONCURRENCY (--concurrency, 100), each with a database
    pool of MANGO_WORKER_DB_POOL_MAX_SIZE (4), as scripts/run.sh starts them, and
  * the old prefork layout (--pool prefork --concurrency 2), capped at --prefork-sessions
    sessions (it runs 2 turns at a time; its wall time for N is extrapolated, and said so),
  * the MCP row: `make run`'s layout again, --mcp-sessions (100) sessions whose turns each make
    3 calls to a local MCP server (tests/mcp_server.py, a process of its own, answering after
    --mcp-delay, 0.2 s, with the bearer token from a vault) instead of bash; it also reports the
    peak TCP connections to the MCP server (sampled every 50 ms from /proc/net/tcp),
  * the multiagent row: `make run`'s layout again, one coordinator spawning 3 subagents (each the
    usual turn) alone, the same 9 calls in one thread alone, then --multiagent-sessions (20)
    coordinators at once (wall until each answered after its 3 reports, vs one alone;
    --multiagent-only runs just it),

each against the API served as `make run` serves it. For each: the wall time from the sends to
the last session.status_idle vs one turn alone, worker RSS (the workers' whole process trees),
peak PostgreSQL connections of the deployment (pg_stat_activity of the bench database, sampled
every 50 ms), SSE delivery latency (event created_at → seen on the session's stream), that
every session reached idle with its events in order (in the events list, and as its stream
delivered them), and the CPU seconds each part used during the run next to how busy the whole
machine was.

The streams are read by StreamReaders, a process of its own holding every stream on one event
loop (plain HTTP/1.1, the SSE frames parsed as the SDK parses them); its CPU is counted in "bench
clients". Until 2026-11-30 they were 200 threads of this process each running the anthropic SDK's
stream reader: the same requests and the same measurement (every event received, in order,
created_at → seen), but about 3.5 CPU s of the 2 cores the system under test runs on, and one
interpreter lock shared with this process's senders and database polling. Then the sandbox cold start (create + start +
first exec) median of 20.

    .venv/bin/python bench/sessions_turns.py [--sessions 200] [--delay 2] [--prefork-sessions 10]
        [--processes 2] [--concurrency 100] [--sandbox local_process|docker] [--cold-starts 20]
        [--pollers 50] [--self-hosted-sessions 100] [--self-hosted-workers 10] [--self-hosted-only]
        [--fleet-nice 0]

Self-hosted rows (issue 27): --pollers workers long-poll an empty queue at once (the SDK's
`work.poll(block_ms=999)` in a loop, one event loop in a process of its own) while the API's
PostgreSQL connections are sampled every 50 ms (peak, and peak of those running a query): a
waiting poll holds no connection. Then --self-hosted-sessions `self_hosted` sessions, each the
same turn as above with its 3 bash calls run by the SDK's own worker code on the client side:
--self-hosted-workers processes, each claiming items with the SDK's `work.poller(auto_stop=False)`
and serving every claimed item at once with `EnvironmentWorker.handle_item` (its documented
per-item flow: heartbeat, tool runner, force-stop); wall time from the sends to the last final
agent.message vs one session alone (target wall/1 ≤ 1.5), and when the sessions reached each
phase (sent, turn started, first tool use and result, done; median and slowest) from their logs.

The SDK workers stand for the client's fleet, which a real deployment does not share cores with;
here they share the 2 cores with everything, each in a scheduling autogroup of its own (as is each
PostgreSQL backend, each Celery process and the API as a whole), so in the start-up burst the
kernel gives the 10 of them about as much CPU as the rest together. --fleet-nice N sets their
autogroups' nice value (/proc/self/autogroup): at 19 they take what the deployment leaves, which
shows what the deployment does without them in its way (their tool results then come late, a
cost a separate fleet would not have). The target is measured at the default, 0.

The turns run with MANGO_SANDBOX=local_process by default: dockerd on this 2-core machine starts
about 7 containers a second whatever the concurrency (`bench/sandbox_start.py --concurrent 200`:
200 at once take about 29 s), so 200 first tool calls at once with docker sandboxes would measure
dockerd, not the runtime; the cold start of one docker sandbox is measured separately.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import _common

ROOT = Path(__file__).resolve().parent.parent
TOOL_CALLS = 3


MCP_TOOL = "mcp__bench__echo"  # the bench MCP server's echo tool as the model is offered it
MCP_TOKEN = "bench-mcp-token"


MULTIAGENT_SUBAGENTS = ("sub1", "sub2", "sub3")


def _system_text(body: dict) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(block.get("text", "") for block in system)


def _thread_reports(body: dict) -> int:
    """How many thread reports a coordinator's conversation holds."""
    return sum(
        1
        for message in body.get("messages", [])
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "text" and block.get("text", "").startswith("[Message from the agent")
    )


def turn_script(delay: float):
    """Each call: a bash tool use (an MCP tool use when the agent is offered the bench MCP server's
    tool) until the turn made TOOL_CALLS of them, then the final text. The multiagent row's
    agents: a coordinator ("You coordinate") spawns MULTIAGENT_SUBAGENTS at once and answers once
    every one reported; each subagent makes the usual TOOL_CALLS calls; "You work alone" makes
    all of their calls (TOOL_CALLS per subagent) itself, one thread."""
    from tests.scripted_model import text, tool_use, tool_uses

    def respond(body: dict) -> dict:
        system = _system_text(body)
        if system.startswith("You coordinate"):
            if not any(m["role"] == "assistant" for m in body.get("messages", [])):
                spawns = [("spawn_agent", {"agent": name, "message": "run the steps"}) for name in MULTIAGENT_SUBAGENTS]
                return tool_uses(spawns, delay=delay)
            if _thread_reports(body) < len(MULTIAGENT_SUBAGENTS):
                return text("Waiting for the reports.", delay=delay)
            return text(f"All {len(MULTIAGENT_SUBAGENTS)} reports in.", delay=delay)
        calls = TOOL_CALLS * (len(MULTIAGENT_SUBAGENTS) if system.startswith("You work alone") else 1)
        mcp = any(tool.get("name") == MCP_TOOL for tool in body.get("tools") or [])
        uses = 0  # tool uses since the user's message: this turn's calls so far
        for message in reversed(body.get("messages", [])):
            blocks = message["content"] if isinstance(message["content"], list) else [{"type": "text"}]
            if message["role"] == "user" and any(block.get("type") == "text" for block in blocks):
                break
            if message["role"] == "assistant":
                uses += sum(1 for block in blocks if block.get("type") == "tool_use")
        if uses < calls:
            if mcp:
                return tool_use(MCP_TOOL, {"text": f"step {uses + 1}"}, delay=delay)
            return tool_use("bash", {"command": f"echo step {uses + 1}"}, delay=delay)
        return text("All the steps ran.", delay=delay)

    return respond


class UpstreamProcess:
    """The scripted upstream in a process of its own (this one runs hundreds of stream readers:
    sharing their interpreter lock would delay its answers and count that against the worker)."""

    def __init__(self, delay: float):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-upstream", "--delay", str(delay)],
            cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True, text=True,
        )  # fmt: skip
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise RuntimeError("the scripted upstream did not start")

    def close(self):
        stop_group(self.process)


class McpServerProcess:
    """The bench's MCP server (tests/mcp_server.py: the mcp SDK's server, streamable HTTP,
    requiring the vault's bearer token) in a process of its own, each tool answering after
    `delay` seconds."""

    def __init__(self, delay: float):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-mcp", "--mcp-delay", str(delay)],
            cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True, text=True,
        )  # fmt: skip
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise RuntimeError("the MCP server did not start")
        self.port = int(self.url.split(":")[2].split("/")[0])

    def close(self):
        stop_group(self.process)


def serve_mcp(delay: float) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.mcp_server import McpTestServer

    server = McpTestServer(delay=delay).start()
    server.accepted.add(MCP_TOKEN)
    print(server.url, flush=True)
    threading.Event().wait()


class TcpSampler(threading.Thread):
    """Peak established TCP connections to a local port, every 50 ms, read from /proc/net/tcp
    (the server's side of each connection: its local port): the MCP connections the workers
    hold at once. (Reading the table costs next to nothing; running `ss` 20 times a second took
    CPU from the 2 cores the system under test runs on.)"""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = f"{port:04X}"
        self.peak = 0
        self.stopped = threading.Event()

    def established(self) -> int:
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as lines:
                    next(lines)
                    for line in lines:
                        fields = line.split()
                        if fields[3] == "01" and fields[1].rsplit(":", 1)[1] == self.port:
                            count += 1
            except FileNotFoundError:
                continue
        return count

    def run(self):
        while not self.stopped.wait(0.05):
            self.peak = max(self.peak, self.established())

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.peak


def serve_upstream(delay: float) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.scripted_model import ScriptedModel

    model = ScriptedModel(default=turn_script(delay))
    print(model.url, flush=True)
    threading.Event().wait()


class PgSampler(threading.Thread):
    """Peak connections to the bench database (every backend of the deployment uses it)."""

    def __init__(self, dbname: str):
        super().__init__(daemon=True)
        import psycopg

        self.conn = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True)
        self.dbname = dbname
        self.peak = 0
        self.worker_peak = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(0.05):
            count, worker = self.conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE application_name = 'mango-worker') "
                "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.dbname,),
            ).fetchone()
            self.peak = max(self.peak, count)
            self.worker_peak = max(self.worker_peak, worker)

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        self.conn.close()
        return self.peak


def tree_rss_kib(pid: int) -> int:
    """RSS of a process and all its descendants, in KiB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system, including reaped children) of a process and its descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / ticks


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / ticks, sum(values) / ticks


def server_cpu_seconds(name: str) -> float:
    """CPU seconds of a local server's processes (by name: "postgres", "redis-server"): every live
    one's, and those its root process reaped (a PostgreSQL backend that exited counts there).
    The servers are this machine's, shared with nothing else while a bench runs."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                if not handle.read().startswith(name):
                    continue
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{fields[1]}/comm") as handle:
                root = not handle.read().startswith(name)
        except OSError:
            continue
        total += sum(int(value) for value in fields[11 : 15 if root else 13])
    return total / ticks


SERVERS = {"postgresql": "postgres", "redis": "redis-server"}


def _own_and_reaped_cpu() -> float:
    """CPU seconds of this process and of its children it waited for (the stream readers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class CpuMeter:
    """CPU seconds spent by each named process tree (and the machine) between start and stop."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids

    def start(self):
        self.before = {name: tree_cpu_seconds(pid) for name, pid in self.pids.items()}
        self.servers_before = {name: server_cpu_seconds(comm) for name, comm in SERVERS.items()}
        self.self_before = _own_and_reaped_cpu()
        self.machine_before = machine_busy_seconds()

    def stop(self) -> dict:
        used = {name: tree_cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}
        used["bench clients"] = _own_and_reaped_cpu() - self.self_before
        used |= {name: server_cpu_seconds(comm) - self.servers_before[name] for name, comm in SERVERS.items()}
        busy, total = machine_busy_seconds()
        used["machine busy %"] = 100 * (busy - self.machine_before[0]) / max(1e-9, total - self.machine_before[1])
        return used


class Api:
    """The API as `make run` serves it (scripts/run.sh's server command)."""

    def __init__(self, env: dict):
        self.port = _common.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Its log (access lines included) as make run writes it, in var/log/bench-turns-api.log.
        self.log = open(ROOT / "var" / "log" / "bench-turns-api.log", "wb")  # noqa: SIM115 — lives as long as it
        self.process = subprocess.Popen(
            api_command(self.port), cwd=ROOT, env=env, start_new_session=True,
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_port(self.port)

    def stop(self):
        stop_group(self.process)
        self.log.close()


def api_command(port: int) -> list[str]:
    venv = Path(sys.executable).parent
    return [
        str(venv / "gunicorn"), "-c", "config/gunicorn.conf.py", "config.asgi:application",
        "--bind", f"127.0.0.1:{port}",
    ]  # fmt: skip


def worker_command(*, pool: str, concurrency: int, queue: str, name: str) -> list[str]:
    venv = Path(sys.executable).parent
    return [
        str(venv / "celery"), "-A", "config", "worker", "--pool", pool, "--concurrency", str(concurrency),
        "-Q", queue, "-n", f"{name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
    ]  # fmt: skip


def wait_port(port: int, timeout: float = 60):
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port}")


def stop_group(process: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 30):
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def start_worker(
    env: dict, *, pool: str, concurrency: int, queue: str, name: str, log: Path, nice: int | None = None
) -> subprocess.Popen:
    handle = open(log, "wb")  # noqa: SIM115 — lives as long as the worker
    process = subprocess.Popen(
        (["nice", "-n", str(nice)] if nice is not None else [])
        + worker_command(pool=pool, concurrency=concurrency, queue=queue, name=name),
        cwd=ROOT,
        # As scripts/run.sh starts it: the worker's pool is MANGO_WORKER_DB_POOL_MAX_SIZE (4).
        env={
            **env,
            "MANGO_LOG_LEVEL": "INFO",
            "MANGO_DB_POOL_MAX_SIZE": os.environ.get("MANGO_WORKER_DB_POOL_MAX_SIZE", "4"),
        },
        start_new_session=True,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b"ready." in log.read_bytes():
            return process
        if process.poll() is not None:
            raise RuntimeError(f"worker exited; see {log}")
        time.sleep(0.1)
    stop_group(process)
    raise RuntimeError(f"worker not ready; see {log}")


class StreamReaders:
    """The sessions' event streams, read in a process of its own on one event loop: plain HTTP/1.1
    connections to GET /v1/sessions/{id}/events/stream, the SSE frames split and each `data:`
    parsed as JSON. For every event it keeps the type and id, in the order received; for the
    agent.* and session.status* events also the delivery latency, the time it was read minus its
    processed_at (the time it was appended). A stream ends after session.status_idle.

    (Until 2026-11-30 each stream was a thread of this process running the anthropic SDK's
    stream reader: the same requests and the same measurement, at about 3x the CPU on the
    2 cores the system under test runs on, and sharing this process's interpreter lock.)"""

    def __init__(self, url: str, api_key: str, session_ids: list[str], timeout: float):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--read-streams", url, "--timeout", str(timeout)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, text=True,
            env={**os.environ, "BENCH_API_KEY": api_key},
        )  # fmt: skip
        self.process.stdin.write(json.dumps(session_ids) + "\n")
        self.process.stdin.flush()

    def wait_open(self) -> None:
        """Until every stream has its `: connected` comment (its feed is subscribed)."""
        if self.process.stdout.readline().strip() != "open":
            raise RuntimeError("the stream readers did not open their streams")

    def results(self) -> dict:
        """{"seen": {session: [[type, id], ...]}, "latencies": [...], "errors": [...]} once every
        stream ended (or the readers' timeout passed)."""
        self.process.stdin.close()  # readers that are still waiting stop now
        line = self.process.stdout.readline()
        self.process.wait(30)
        return json.loads(line)


def read_streams(url: str, timeout: float) -> None:
    """The --read-streams process (see StreamReaders)."""
    import asyncio

    session_ids = json.loads(sys.stdin.readline())
    host, port = url.removeprefix("http://").split(":")
    request_head = (
        "GET /v1/sessions/{}/events/stream HTTP/1.1\r\nhost: {}\r\nx-api-key: {}\r\n"
        "accept: text/event-stream\r\nanthropic-version: 2023-06-01\r\n\r\n"
    )
    seen: dict[str, list] = {s: [] for s in session_ids}
    latencies: list[float] = []
    errors: list[str] = []

    async def follow(session_id: str, opened: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
        try:
            writer.write(request_head.format(session_id, host, os.environ["BENCH_API_KEY"]).encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
            await sse_events(reader, session_id, opened)
        finally:
            writer.close()

    async def sse_events(reader, session_id: str, opened: asyncio.Event) -> None:
        buffer = b""
        while True:
            size = int(await reader.readuntil(b"\r\n"), 16)  # chunked transfer encoding
            if size == 0:
                raise RuntimeError("stream ended before session.status_idle")
            buffer += (await reader.readexactly(size + 2))[:-2]
            now = time.time()
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                if frame.startswith(b": connected"):
                    opened.set()
                    continue
                data = frame.partition(b"\ndata: ")[2]
                if not data:
                    continue
                event = json.loads(data)
                if event["type"] == "ping":
                    continue
                seen[session_id].append([event["type"], event["id"]])
                if event["type"].startswith(("agent.", "session.status")) and event.get("processed_at"):
                    latencies.append(now - datetime.fromisoformat(event["processed_at"]).timestamp())
                if event["type"] == "session.status_idle":
                    return

    async def guarded(session_id: str, opened: asyncio.Event) -> None:
        try:
            await follow(session_id, opened)
        except Exception as exc:  # noqa: BLE001 — reported with the results
            errors.append(f"{session_id}: {exc!r}")
            opened.set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        opens = [asyncio.Event() for _ in session_ids]
        tasks = [asyncio.ensure_future(guarded(s, o)) for s, o in zip(session_ids, opens, strict=True)]
        await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opens)), 120)
        print("open", flush=True)
        # Until every stream ended, the timeout passed, or the bench closed stdin (it is done).
        every = asyncio.gather(*tasks)
        closed = loop.run_in_executor(None, sys.stdin.read)
        await asyncio.wait([every, closed], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not every.done():  # every session is idle in the log: 10 s more for the streams to tell
            await asyncio.wait([every], timeout=10)
        for task in tasks:
            task.cancel()

    asyncio.run(main())
    print(json.dumps({"seen": seen, "latencies": latencies, "errors": errors[:3]}), flush=True)


def wait_all(ids: list[str], kind: str, *, started, timeout: float) -> float:
    """Seconds from `started` (a wall-clock datetime) until every session in `ids` has an event
    of `kind`, read from the events' own timestamps. The wait polls once a second: the count
    scans the events table of the PostgreSQL under test (a poll every 50 ms was ~5 % of a core),
    and the wall does not depend on when the poll sees the last event."""
    from django.db.models import Min

    from sessions.models import SessionEvent

    events = SessionEvent.objects.filter(session_id__in=ids, type=kind)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and events.count() < len(ids):
        time.sleep(1.0)
    firsts = [row["at"] for row in events.values("session_id").annotate(at=Min("created_at"))]
    if len(firsts) < len(ids):
        return timeout
    return (max(firsts) - started).total_seconds() if firsts else 0.0


def run_turns(
    client, agent_id: str, env_id: str, count: int, *, timeout: float, streams: int, vault_ids: list | None = None
) -> dict:
    """Create `count` sessions, open a stream on `streams` of them (StreamReaders), send them all
    a message at once, wait until every one committed session.status_idle (read from the
    database). Returns wall time, delivery latencies, what each stream delivered and the
    sessions."""
    from django.utils import timezone

    extra = {"vault_ids": vault_ids} if vault_ids else {}
    sessions = [client.beta.sessions.create(agent=agent_id, environment_id=env_id, **extra) for _ in range(count)]
    followed = [s.id for s in sessions[:streams]]
    readers = StreamReaders(str(client.base_url).rstrip("/"), client.api_key, followed, timeout)
    readers.wait_open()
    message = [{"type": "user.message", "content": [{"type": "text", "text": "run the three steps"}]}]
    senders = [
        threading.Thread(target=client.beta.sessions.events.send, args=(s.id,), kwargs={"events": message})
        for s in sessions
    ]
    started = timezone.now()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    ids = [s.id for s in sessions]
    wall = wait_all(ids, "session.status_idle", started=started, timeout=timeout)
    streamed = readers.results()
    return {
        "wall": wall,
        "latencies": streamed["latencies"],
        "seen": streamed["seen"],
        "sessions": sessions,
        "errors": streamed["errors"],
    }


def check_order(client, result: dict, *, mcp: bool = False) -> tuple[int, list[str]]:
    """Sessions that reached idle with the expected event sequence, and what was wrong (with
    `mcp`, the tool calls are agent.mcp_tool_use / agent.mcp_tool_result)."""
    problems = []
    good = 0
    for session in result["sessions"]:
        events = list(client.beta.sessions.events.list(session.id, limit=100))
        types = [e.type for e in events]
        # A followed session's stream opened before its message: it delivered every event, in order.
        streamed = result["seen"].get(session.id)
        uses = [e for e in events if e.type == ("agent.mcp_tool_use" if mcp else "agent.tool_use")]
        results = [e for e in events if e.type == ("agent.mcp_tool_result" if mcp else "agent.tool_result")]
        answered = [r.mcp_tool_use_id if mcp else r.tool_use_id for r in results]
        ok = (
            types[:2] == ["user.message", "session.status_running"]
            and types[-1] == "session.status_idle"
            and len(uses) == TOOL_CALLS
            and sorted(answered) == sorted(u.id for u in uses)
            and not any(r.is_error for r in results)
            and types[-2] == "agent.message"
            and (streamed is None or streamed == [[e.type, e.id] for e in events])
        )
        if ok:
            good += 1
        elif len(problems) < 3:
            failed = [r.content[0].text[:200] for r in results if r.is_error and r.content]
            problems.append(
                f"{session.id}: {types}"
                + (f"; error results: {failed}" if failed else "")
                + (f"; streamed: {[t for t, _ in streamed]}" if streamed is not None else "")
            )
    return good, problems


def layout(
    label,
    env,
    client,
    agent,
    environment,
    *,
    pool,
    concurrency,
    count,
    delay,
    queue,
    streams,
    others,
    processes=1,
    vault_ids=None,
    mcp_port=None,
):
    workers = []
    for index in range(processes):
        log = ROOT / "var" / "log" / f"bench-turns-{pool}-{index}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        name = f"bench-{pool}-{index}"
        workers.append(start_worker(env, pool=pool, concurrency=concurrency, queue=queue, name=name, log=log))
    try:
        single = run_turns(client, agent.id, environment.id, 1, timeout=120, streams=1, vault_ids=vault_ids)
        sampler = PgSampler(env["BENCH_DBNAME"])
        sampler.start()
        tcp = TcpSampler(mcp_port) if mcp_port else None
        if tcp:
            tcp.start()
        rss_peak = 0
        stop_rss = threading.Event()

        def rss_loop():
            nonlocal rss_peak
            while not stop_rss.wait(0.2):
                rss_peak = max(rss_peak, sum(tree_rss_kib(worker.pid) for worker in workers))

        rss_thread = threading.Thread(target=rss_loop, daemon=True)
        rss_thread.start()
        cpu = CpuMeter({f"worker{i or ''}": worker.pid for i, worker in enumerate(workers)} | others)
        cpu.start()
        many = run_turns(
            client,
            agent.id,
            environment.id,
            count,
            timeout=max(120, count * 4 * delay),
            streams=streams,
            vault_ids=vault_ids,
        )
        cpu_used = cpu.stop()
        mcp_peak = tcp.stop() if tcp else None
        stop_rss.set()
        rss_thread.join()
        peak_connections = sampler.stop()
        good, problems = check_order(client, many, mcp=bool(mcp_port))
    finally:
        for worker in workers:
            stop_group(worker)
    latencies = sorted(many["latencies"]) or [float("nan")]
    return {
        "label": label,
        "count": count,
        "single": single["wall"],
        "wall": many["wall"],
        "rss_mib": rss_peak / 1024,
        "pg_peak": peak_connections,
        "pg_worker_peak": sampler.worker_peak,
        "sse_p50_ms": statistics.median(latencies) * 1000,
        "sse_p95_ms": latencies[int(len(latencies) * 0.95) - 1] * 1000 if len(latencies) > 1 else float("nan"),
        "good": good,
        "mcp_connections_peak": mcp_peak,
        "cpu": cpu_used,
        "problems": problems,
        "errors": many["errors"][:3],
    }


def cold_starts(count: int) -> list[float]:
    import sandboxes as sandbox

    times = []
    for index in range(count):
        session_id = f"sesn_bench_cold_{os.getpid()}_{index}"
        started = time.monotonic()
        try:
            sandbox.ensure(session_id=session_id, workspace_id="wrkspc_bench", networking=None)
            sandbox.exec_argv(session_id=session_id, argv=["true"])
            times.append(time.monotonic() - started)
        finally:
            sandbox.remove(session_id=session_id)
    return times


CACHE_STEPS = 20


def cache_share(steps: int = CACHE_STEPS) -> list[float]:
    """For a `steps`-step tool turn, the share of each request's prompt bytes that lies before
    its last cache breakpoint (what a real upstream bills at the cache-read price): the requests
    are built by the runtime's own code (processors.conversation.build_messages, then
    processors.caching.with_breakpoints, as sessions.runtime.model.model_call does), from a turn
    whose every step runs bash and gets 2 KB of output."""
    from processors.caching import prefix_share, with_breakpoints
    from processors.conversation import build_messages
    from sessions.runtime.tools import session_tools
    from sessions.selectors.runner import EventRow

    def Event(event_id, kind, payload, private):  # a stored event as the runtime reads it
        return EventRow(event_id, 0, kind, payload, private, None)

    toolset = {"type": "agent_toolset_20260401", "configs": [
        {"name": name, "type": name, "enabled": True, "permission_policy": {"type": "always_allow"}}
        for name in ("bash", "read", "write", "edit", "glob", "grep")
    ]}  # fmt: skip
    definitions, _ = session_tools({"tools": [toolset]})
    events = [Event("e0", "user.message", {"content": [{"type": "text", "text": "Fix the failing tests."}]}, {})]
    shares = []
    for step in range(steps):
        messages = build_messages(events)
        system, tools, messages = with_breakpoints(
            system="You are a careful engineer.", tools=definitions, messages=messages
        )
        shares.append(prefix_share({"tools": tools, "system": system, "messages": messages}))
        use_id = f"use{step}"
        events.append(Event(use_id, "agent.tool_use", {"name": "bash", "input": {"command": f"make test-{step}"}}, {}))
        output = [{"type": "text", "text": f"step {step}: " + "x" * 2048}]
        events.append(Event(f"res{step}", "agent.tool_result", {"tool_use_id": use_id, "content": output}, {}))
    return shares


def print_cache_share() -> None:
    shares = cache_share()
    after_first = shares[1:]
    print(f"\nprompt cache, a {CACHE_STEPS}-step tool turn: share of each request's prompt bytes before its last")
    print("breakpoint (billed at the cache-read price on a hit): " + " ".join(f"{share:.3f}" for share in shares))
    print(f"    steps after the first: min {min(after_first):.3f} (target >= 0.90)")


class PgAppSampler(threading.Thread):
    """Peak connections of one application_name (PGAPPNAME of the API), and peak of those active."""

    def __init__(self, app_name: str):
        super().__init__(daemon=True)
        import psycopg

        self.conn = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True)
        self.app_name = app_name
        self.peak = self.active_peak = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(0.05):
            count, active = self.conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity "
                "WHERE application_name = %s",
                (self.app_name,),
            ).fetchone()
            self.peak, self.active_peak = max(self.peak, count), max(self.active_peak, active)

    def stop(self) -> tuple[int, int]:
        self.stopped.set()
        self.join()
        self.conn.close()
        return self.peak, self.active_peak


def poll_empty(url: str, environment_id: str, count: int, seconds: float) -> None:
    """--poll-empty: `count` SDK clients long-polling `environment_id` (no work) for `seconds`;
    prints {"polls", "empty", "errors"} as JSON. The environment key comes in BENCH_ENVIRONMENT_KEY."""
    import asyncio

    import anthropic

    key = os.environ["BENCH_ENVIRONMENT_KEY"]
    done = {"polls": 0, "empty": 0, "errors": []}
    durations = []

    async def one(index: int, deadline: float) -> None:
        client = anthropic.AsyncAnthropic(base_url=url, auth_token=key, max_retries=0, timeout=30)
        while time.monotonic() < deadline:
            began = time.monotonic()
            try:
                found = await client.beta.environments.work.poll(
                    environment_id, block_ms=999, anthropic_worker_id=f"bench-poller-{index}"
                )
            except Exception as exc:  # noqa: BLE001 — counted and shown
                done["errors"].append(repr(exc)[:200])
                await asyncio.sleep(0.5)
                continue
            done["polls"] += 1
            done["empty"] += found is None
            durations.append(time.monotonic() - began)

    async def main() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(one(i, deadline) for i in range(count)))

    asyncio.run(main())
    durations.sort()
    done["poll_p50_s"] = round(durations[len(durations) // 2], 3) if durations else None
    done["poll_max_s"] = round(durations[-1], 3) if durations else None
    print(json.dumps({**done, "errors": done["errors"][:3]}), flush=True)


def serve_work(url: str, environment_id: str, workdir: str) -> None:
    """--serve-work: one self-hosted worker process built from the SDK's own pieces: its poller
    claims items (auto_stop=False) and each claimed item is served at once by its
    EnvironmentWorker.handle_item (heartbeats, the session tool runner, the force-stop)."""
    import asyncio

    import anthropic

    key = os.environ["BENCH_ENVIRONMENT_KEY"]
    # This process's autogroup (it runs in a session of its own) gets the fleet's nice value.
    if (nice := os.environ.get("BENCH_FLEET_NICE", "0")) != "0":
        Path("/proc/self/autogroup").write_text(nice)

    async def main() -> None:
        client = anthropic.AsyncAnthropic(base_url=url, auth_token=key, timeout=120)
        worker = client.beta.environments.work.worker(environment_key=key, workdir=workdir, max_idle=5)
        tasks = set()
        async for item in client.beta.environments.work.poller(
            environment_id=environment_id, environment_key=key, auto_stop=False
        ):
            task = asyncio.ensure_future(
                worker.handle_item(
                    work_id=item.id, environment_id=environment_id, session_id=item.data.id, work_secret=item.secret
                )
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    asyncio.run(main())


def run_self_hosted(client, agent_id: str, env_id: str, count: int, *, timeout: float) -> dict:
    """`count` self_hosted sessions created and sent their message at once (a thread each); the
    wall time until every one has its final agent.message (its turn done: 3 bash results in)."""
    from django.utils import timezone

    from sessions.models import SessionEvent

    message = [{"type": "user.message", "content": [{"type": "text", "text": "run the three steps"}]}]
    ids = []

    def start():
        session = client.beta.sessions.create(agent=agent_id, environment_id=env_id)
        ids.append(session.id)
        client.beta.sessions.events.send(session.id, events=message)

    senders = [threading.Thread(target=start) for _ in range(count)]
    started = timezone.now()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    wall = wait_all(ids, "agent.message", started=started, timeout=timeout)
    done = SessionEvent.objects.filter(session_id__in=ids, type="agent.message").count()
    results = SessionEvent.objects.filter(session_id__in=ids, type="user.tool_result").count()
    return {"wall": wall, "done": done, "tool_results": results, "ids": ids, "phases": phases(ids)}


# Where a self-hosted session's time goes, by the first event of each kind in its log.
PHASES = (
    ("sent", "user.message"),
    ("turn started", "session.status_running"),
    ("first tool use", "agent.tool_use"),
    ("first tool result", "user.tool_result"),
    ("done", "agent.message"),
)


def phases(ids: list[str]) -> dict:
    """Seconds from the first session's creation to each session's first event of each PHASES
    kind (median and slowest): the start-up burst shows as a late "turn started"."""
    from django.db.models import Min

    from sessions.models import Session, SessionEvent

    start = Session.objects.filter(id__in=ids).aggregate(at=Min("created_at"))["at"]
    firsts = SessionEvent.objects.filter(session_id__in=ids).values("session_id", "type").annotate(at=Min("created_at"))
    by_type = {}
    for row in firsts:
        by_type.setdefault(row["type"], []).append((row["at"] - start).total_seconds())
    out = {}
    for name, kind in PHASES:
        seconds = sorted(by_type.get(kind, []))
        if seconds:
            out[name] = {"p50": round(statistics.median(seconds), 2), "max": round(seconds[-1], 2)}
    return out


def self_hosted_rows(env, client, agent, args, *, api_app_name: str, others: dict) -> dict:
    """The self-hosted rows: --pollers waiting polls (peak API connections), then
    --self-hosted-sessions sessions served by --self-hosted-workers SDK worker processes."""
    from sessions.queue.services import environment_key_create

    environment = client.beta.environments.create(name="bench-hosted", config={"type": "self_hosted"})
    _, key = environment_key_create(environment_id=environment.id)
    base = str(client.base_url).rstrip("/")
    worker_env = {**env, "BENCH_ENVIRONMENT_KEY": key, "BENCH_FLEET_NICE": str(args.fleet_nice)}
    row = {}
    # 1. Long polls waiting on an empty queue.
    idle = client.beta.environments.create(name="bench-idle", config={"type": "self_hosted"})
    _, idle_key = environment_key_create(environment_id=idle.id)
    sampler = PgAppSampler(api_app_name)
    sampler.start()
    time.sleep(1.0)
    baseline = sampler.peak
    pollers = subprocess.run(
        [sys.executable, __file__, "--poll-empty", base, idle.id, "--pollers", str(args.pollers)],
        cwd=ROOT, env={**env, "BENCH_ENVIRONMENT_KEY": idle_key}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    peak, active_peak = sampler.stop()
    polled = (
        json.loads(pollers.stdout.strip().splitlines()[-1])
        if pollers.returncode == 0
        else {"error": pollers.stderr[-500:]}
    )
    row["pollers"] = {"count": args.pollers, "baseline_connections": baseline, "peak_connections": peak,
                      "peak_active": active_peak, **polled}  # fmt: skip
    # 2. Sessions served by SDK worker processes (the Celery worker runs the model).
    log_dir = ROOT / "var" / "log"
    # The Celery layout of `make run` (--processes worker processes of --concurrency threads).
    celeries = [
        start_worker(env, pool="threads", concurrency=args.concurrency, queue=env["MANGO_SESSIONS_QUEUE"],
                     name=f"bench-hosted-{index}", log=log_dir / f"bench-turns-hosted-{index}.log")
        for index in range(args.processes)
    ]  # fmt: skip
    workers = []
    try:
        for index in range(args.self_hosted_workers):
            workdir = ROOT / "var" / "bench-work" / str(index)
            workdir.mkdir(parents=True, exist_ok=True)
            handle = open(log_dir / f"bench-sdk-worker-{index}.log", "wb")  # noqa: SIM115 — lives as long as it
            workers.append(subprocess.Popen(
                [sys.executable, __file__, "--serve-work", base, environment.id, str(workdir)],
                cwd=ROOT, env=worker_env, start_new_session=True, stdout=handle, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        # Every worker process is up and polling before anything is measured.
        deadline = time.monotonic() + 120
        while client.beta.environments.work.stats(environment.id).workers_polling < args.self_hosted_workers:
            if time.monotonic() > deadline:
                raise RuntimeError("the SDK workers did not all start polling")
            time.sleep(0.5)
        agent_id = agent.id
        single = run_self_hosted(client, agent_id, environment.id, 1, timeout=120)
        pids = {f"celery{i or ''}": c.pid for i, c in enumerate(celeries)} | others
        cpu = CpuMeter(pids | {f"sdk worker{i}": w.pid for i, w in enumerate(workers)})
        cpu.start()
        many = run_self_hosted(client, agent_id, environment.id, args.self_hosted_sessions,
                               timeout=max(180, args.self_hosted_sessions * 4 * args.delay))  # fmt: skip
        used = cpu.stop()
    finally:
        for worker in workers:
            stop_group(worker)
        for celery in celeries:
            stop_group(celery)
    row["sessions"] = {
        "count": args.self_hosted_sessions,
        "workers": args.self_hosted_workers,
        "fleet_nice": args.fleet_nice,
        "single": single["wall"],
        "wall": many["wall"],
        "done": many["done"],
        "tool_results": many["tool_results"],
        "phases": many["phases"],
        "cpu": {
            **{name: round(value, 1) for name, value in used.items() if not name.startswith("sdk worker")},
            "sdk workers": round(sum(v for k, v in used.items() if k.startswith("sdk worker")), 1),
        },
    }
    return row


def report_self_hosted(row: dict, args) -> None:
    p, s = row["pollers"], row["sessions"]
    fleet = f" (their autogroups at nice {s['fleet_nice']})" if s["fleet_nice"] else ""
    print(f"\nself-hosted: {p['count']} workers long-polling an empty queue (block_ms=999) for 10 s")
    print(f"    API PostgreSQL connections: {p['baseline_connections']} before, peak {p['peak_connections']} "
          f"while they waited (peak running a query: {p['peak_active']}); {p.get('polls')} polls, "
          f"{p.get('empty')} empty (a poll took {p.get('poll_p50_s')} s median, {p.get('poll_max_s')} s at most), "
          f"errors {p.get('errors') or p.get('error')}")  # fmt: skip
    print(f"self-hosted: {s['count']} sessions ({TOOL_CALLS} bash calls each, run by the SDK's worker code) "
          f"served by {s['workers']} worker processes{fleet}: 1 session {s['single']:.2f} s, all {s['wall']:.2f} s, "
          f"wall/1 {s['wall'] / s['single']:.2f} (target ≤ 1.5); {s['done']}/{s['count']} done, "
          f"{s['tool_results']}/{s['count'] * TOOL_CALLS} tool results")  # fmt: skip
    print("    seconds from the first create to each session's first event (median / slowest): " + ", ".join(
        f"{name} {times['p50']:.2f} / {times['max']:.2f}" for name, times in s["phases"].items()
    ))  # fmt: skip
    cpu = ", ".join(f"{name} {value:.1f}" for name, value in s["cpu"].items() if name != "machine busy %")
    print(f"    CPU s during the run: {cpu}; machine busy {s['cpu']['machine busy %']:.0f}% of {os.cpu_count()} cores")
    # The SDK workers would run elsewhere in a real fleet; the rest is the deployment's own.
    mango = sum(
        v for k, v in s["cpu"].items() if k not in ("machine busy %", "sdk workers", "bench clients", "upstream")
    )
    print(
        f"    per session: {mango / s['count'] * 1000:.0f} ms CPU of the deployment (API, Celery, "
        f"PostgreSQL, Redis), {s['cpu']['sdk workers'] / s['count'] * 1000:.0f} ms of the SDK workers"
    )
    print(json.dumps(row))


def common_others(api, model) -> dict:
    return {"api": api.process.pid, "upstream": model.process.pid}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("MANGO_WORKER_CONCURRENCY", 100)))
    parser.add_argument("--prefork-sessions", type=int, default=10)
    parser.add_argument("--sandbox", default="local_process", choices=["local_process", "docker"])
    parser.add_argument("--cold-starts", type=int, default=20)
    parser.add_argument("--skip-prefork", action="store_true")
    # Worker processes on the node, each running --concurrency turns in threads.
    parser.add_argument("--processes", type=int, default=int(os.environ.get("MANGO_WORKER_PROCESSES", 2)))
    # How many of the sessions are followed over SSE (each stream is a client thread here).
    parser.add_argument("--streams", type=int, default=200)
    # The MCP row: --mcp-sessions sessions whose turns call a local MCP server (answering after
    # --mcp-delay s) instead of bash; 0 skips it.
    parser.add_argument("--mcp-sessions", type=int, default=100)
    parser.add_argument("--mcp-delay", type=float, default=0.2)
    parser.add_argument("--serve-mcp", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read-streams", help=argparse.SUPPRESS)  # the API's URL
    parser.add_argument("--timeout", type=float, default=600, help=argparse.SUPPRESS)
    parser.add_argument("--cache-share-only", action="store_true", help="print the prompt-cache row and stop")
    parser.add_argument("--pollers", type=int, default=50)
    parser.add_argument("--self-hosted-sessions", type=int, default=100)
    parser.add_argument("--self-hosted-workers", type=int, default=10)
    parser.add_argument("--self-hosted-only", action="store_true", help="only the self-hosted rows")
    parser.add_argument("--fleet-nice", type=int, default=0, help="the SDK workers' autogroup nice value (0..19)")
    # The multiagent row: --multiagent-sessions coordinators at once, each spawning 3 subagents.
    parser.add_argument("--multiagent-sessions", type=int, default=20)
    parser.add_argument("--multiagent-only", action="store_true", help="only the multiagent row")
    parser.add_argument("--poll-empty", nargs=2, help=argparse.SUPPRESS)  # URL, environment id
    parser.add_argument("--serve-work", nargs=3, help=argparse.SUPPRESS)  # URL, environment id, workdir
    args = parser.parse_args()
    if args.poll_empty:
        return poll_empty(*args.poll_empty, count=args.pollers, seconds=10.0)
    if args.serve_work:
        return serve_work(*args.serve_work)
    if args.cache_share_only:
        _common.setup()
        return print_cache_share()
    if args.serve_upstream:
        return serve_upstream(args.delay)
    if args.serve_mcp:
        return serve_mcp(args.mcp_delay)
    if args.read_streams:
        return read_streams(args.read_streams, args.timeout)

    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango_bench_runtime")
    os.environ.setdefault("MANGO_FILE_S3_BUCKET", "mango-b-runtime")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/1")
    queue = f"bench-turns-{os.getpid()}"
    os.environ["MANGO_SESSIONS_QUEUE"] = queue
    _common.setup()
    import anthropic
    import environ

    model = UpstreamProcess(args.delay)
    mcp_server = McpServerProcess(args.mcp_delay) if args.mcp_sessions else None
    dbname = environ.Env.db_url_config(os.environ["DATABASE_URL"])["NAME"]
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-bench",
        "MANGO_SANDBOX": args.sandbox,
        "MANGO_LOG_LEVEL": "WARNING",
        "MANGO_READYZ_REQUIRE_WORKER": "false",
        # All the sessions are one workspace's: its fair-share caps (streams 100, running turns 64,
        # sandboxes 32 by default) are raised so the bench measures the runtime, not the caps.
        "MANGO_WORKSPACE_MAX_STREAMS": str(max(100, args.streams + 10)),
        "MANGO_WORKSPACE_MAX_RUNNING_TURNS": str(max(64, args.sessions + 10)),
        # (Sandboxes stay live after their turns: every session of both layouts keeps one.)
        "MANGO_WORKSPACE_MAX_SANDBOXES": str(10 * args.sessions + 100),
        "BENCH_DBNAME": dbname,
    }
    if mcp_server:
        # The loopback MCP server is the operator's to allow (the outbound guard), API and workers.
        env["MANGO_OUTBOUND_PRIVATE_HOSTS"] = f"127.0.0.1:{mcp_server.port}"
        os.environ["MANGO_OUTBOUND_PRIVATE_HOSTS"] = env["MANGO_OUTBOUND_PRIVATE_HOSTS"]
    raw_key, _ = _common.api_key(f"bench-turns-{time.time_ns()}")
    api_app_name = f"mango-bench-api-{os.getpid()}"
    api = Api({**env, "PGAPPNAME": api_app_name})
    results = []
    hosted = None
    try:
        client = anthropic.Anthropic(base_url=api.url, api_key=raw_key, max_retries=2, timeout=600)
        agent = client.beta.agents.create(
            name="bench", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}]
        )
        environment = client.beta.environments.create(name="bench", config={"type": "cloud"})
        common = {
            "client": client,
            "agent": agent,
            "environment": environment,
            "delay": args.delay,
            "queue": queue,
            "streams": args.streams,
            "others": {"api": api.process.pid, "upstream": model.process.pid},
        }
        if args.multiagent_only:
            report_multiagent(multiagent_row(env, client, args, common), args)
            return
        if args.self_hosted_only:
            hosted = self_hosted_rows(
                env, client, agent, args, api_app_name=api_app_name, others=common_others(api, model)
            )
            return
        label = f"threads x{args.concurrency}" + (f" x{args.processes} procs" if args.processes > 1 else "")
        results.append(
            layout(
                label, env, pool="threads", concurrency=args.concurrency, count=args.sessions,
                processes=args.processes, **common,
            )
        )  # fmt: skip
        if mcp_server:
            results.append(mcp_layout(env, client, mcp_server, args, common))
        multiagent = multiagent_row(env, client, args, common) if args.multiagent_sessions else None
        if not args.skip_prefork:
            results.append(
                layout("prefork x2 (today)", env, pool="prefork", concurrency=2, count=args.prefork_sessions, **common)
            )
        hosted = self_hosted_rows(env, client, agent, args, api_app_name=api_app_name, others=common_others(api, model))
    finally:
        api.stop()
        model.close()
        if mcp_server:
            mcp_server.close()
        if hosted is not None:
            report_self_hosted(hosted, args)
    if args.self_hosted_only or args.multiagent_only:
        return
    report(results, args)
    if multiagent is not None:
        report_multiagent(multiagent, args)
    print_cache_share()
    if args.cold_starts:
        os.environ["MANGO_SANDBOX"] = "docker"
        from django.conf import settings

        settings.MANGO_SANDBOX = "docker"
        times = cold_starts(args.cold_starts)
        print(
            f"\nsandbox cold start (docker create + start + first exec), {len(times)} runs: "
            f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
            f"(target ≤ 1 s)"
        )


def mcp_layout(env, client, mcp_server, args, common) -> dict:
    """The MCP row: the same worker layout, an agent whose only tools are the bench MCP server's
    (always_allow), its token in a vault the sessions name."""
    agent = client.beta.agents.create(
        name="bench-mcp",
        model="claude-sonnet-4-5",
        mcp_servers=[{"type": "url", "name": "bench", "url": mcp_server.url}],
        tools=[
            {
                "type": "mcp_toolset",
                "mcp_server_name": "bench",
                "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
            }
        ],
    )
    vault = client.beta.vaults.create(display_name="bench")
    client.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "token": MCP_TOKEN, "mcp_server_url": mcp_server.url}
    )
    label = f"MCP threads x{args.concurrency}" + (f" x{args.processes}" if args.processes > 1 else "")
    others = {**common["others"], "mcp server": mcp_server.process.pid}
    return layout(
        label,
        env,
        **{**common, "agent": agent, "others": others},
        pool="threads",
        concurrency=args.concurrency,
        count=args.mcp_sessions,
        processes=args.processes,
        vault_ids=[vault.id],
        mcp_port=mcp_server.port,
    )


def wait_final(ids: list[str], prefix: str, *, started, timeout: float) -> float:
    """Seconds from `started` until every session in `ids` has an agent.message starting with
    `prefix` (its final answer), from the events' own timestamps (wait_all's way)."""
    from django.db.models import Min

    from sessions.models import SessionEvent

    events = SessionEvent.objects.filter(
        session_id__in=ids, type="agent.message", payload__content__0__text__startswith=prefix
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and events.values("session_id").distinct().count() < len(ids):
        time.sleep(1.0)
    firsts = [row["at"] for row in events.values("session_id").annotate(at=Min("created_at"))]
    if len(firsts) < len(ids):
        return timeout
    return (max(firsts) - started).total_seconds()


def run_multiagent(client, agent_id: str, env_id: str, count: int, prefix: str, *, timeout: float) -> dict:
    """`count` sessions of `agent_id` given a message at once; the wall until each answered."""
    from django.utils import timezone

    sessions = [client.beta.sessions.create(agent=agent_id, environment_id=env_id) for _ in range(count)]
    message = [{"type": "user.message", "content": [{"type": "text", "text": "run the steps"}]}]
    senders = [
        threading.Thread(target=client.beta.sessions.events.send, args=(s.id,), kwargs={"events": message})
        for s in sessions
    ]
    started = timezone.now()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    ids = [s.id for s in sessions]
    return {"wall": wait_final(ids, prefix, started=started, timeout=timeout), "ids": ids}


def multiagent_row(env, client, args, common) -> dict:
    """The multiagent row, on `make run`'s worker layout: one coordinator spawning 3 subagents
    (each the usual 3 bash calls) alone; the same 9 calls in one thread alone; then
    --multiagent-sessions coordinators at once. Each coordinator must answer after its 3 reports,
    with 4 threads."""
    from sessions.models import Session

    subs = [
        client.beta.agents.create(
            name=name, model="claude-sonnet-4-5", system=f"You are {name}.", tools=[{"type": "agent_toolset_20260401"}]
        )
        for name in MULTIAGENT_SUBAGENTS
    ]
    lead = client.beta.agents.create(
        name="bench-lead",
        model="claude-sonnet-4-5",
        system="You coordinate the subagents.",
        tools=[{"type": "agent_toolset_20260401"}],
        multiagent={"type": "coordinator", "agents": [sub.id for sub in subs]},
    )
    alone = client.beta.agents.create(
        name="bench-alone",
        model="claude-sonnet-4-5",
        system="You work alone.",
        tools=[{"type": "agent_toolset_20260401"}],
    )
    environment = common["environment"]
    workers = []
    for index in range(args.processes):
        log = ROOT / "var" / "log" / f"bench-turns-multiagent-{index}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        workers.append(
            start_worker(env, pool="threads", concurrency=args.concurrency, queue=common["queue"],
                         name=f"bench-multiagent-{index}", log=log)
        )  # fmt: skip
    try:
        answer = f"All {len(MULTIAGENT_SUBAGENTS)} reports in."
        single = run_multiagent(client, lead.id, environment.id, 1, answer, timeout=180)
        one_thread = run_multiagent(client, alone.id, environment.id, 1, "All the steps ran.", timeout=180)
        cpu = CpuMeter({f"worker{i or ''}": worker.pid for i, worker in enumerate(workers)} | common["others"])
        cpu.start()
        count = args.multiagent_sessions
        many = run_multiagent(client, lead.id, environment.id, count, answer, timeout=max(180, count * 6 * args.delay))
        cpu_used = cpu.stop()
    finally:
        for worker in workers:
            stop_group(worker)
    threads = {sid: Session.objects.filter(primary_id=sid).count() + 1 for sid in many["ids"]}
    return {
        "count": args.multiagent_sessions,
        "single": single["wall"],
        "one_thread": one_thread["wall"],
        "wall": many["wall"],
        "good": sum(1 for n in threads.values() if n == len(MULTIAGENT_SUBAGENTS) + 1),
        "cpu": cpu_used,
    }


def report_multiagent(row: dict, args) -> None:
    subs = len(MULTIAGENT_SUBAGENTS)
    print(
        f"\nmultiagent: a coordinator spawns {subs} subagents at once, each {TOOL_CALLS} bash calls + its report"
        f" (upstream delay {args.delay:g} s per call, sandbox {args.sandbox})"
    )
    print(f"  1 coordinator x {subs} subagents alone: {row['single']:.2f} s")
    print(f"  the same {subs * TOOL_CALLS} calls in one thread alone: {row['one_thread']:.2f} s")
    print(
        f"  {row['count']} coordinators x {subs} subagents at once: {row['wall']:.2f} s"
        f" (wall/1 {row['wall'] / row['single']:.2f}); {row['good']}/{row['count']} with {subs + 1} threads"
    )
    cpu = ", ".join(f"{name} {value:.1f}" for name, value in row["cpu"].items() if name != "machine busy %")
    busy = row["cpu"]["machine busy %"]
    print(f"    CPU s during the run: {cpu}; machine busy {busy:.0f}% of {os.cpu_count()} cores")
    print(json.dumps({"multiagent": row}))


def report(results: list[dict], args) -> None:
    print(f"\n{args.sessions} sessions, each turn = {TOOL_CALLS} bash calls + final message, upstream delay "
          f"{args.delay:g} s per call, sandbox {args.sandbox}")  # fmt: skip
    header = f"{'layout':<26}{'sessions':>9}{'1 turn s':>10}{'wall s':>9}{'wall/1':>8}{'RSS MiB':>9}"
    print(header + f"{'PG peak':>9}{'(worker)':>9}{'SSE p50 ms':>12}{'SSE p95 ms':>12}{'idle+ordered':>14}")
    for r in results:
        print(
            f"{r['label']:<26}{r['count']:>9}{r['single']:>10.2f}{r['wall']:>9.2f}{r['wall'] / r['single']:>8.2f}"
            f"{r['rss_mib']:>9.0f}{r['pg_peak']:>9}{r['pg_worker_peak']:>9}{r['sse_p50_ms']:>12.1f}{r['sse_p95_ms']:>12.1f}"
            f"{r['good']:>9}/{r['count']}"
        )
        cpu = ", ".join(f"{name} {value:.1f}" for name, value in r["cpu"].items() if name != "machine busy %")
        busy = r["cpu"]["machine busy %"]
        print(f"    CPU s during the run: {cpu}; machine busy {busy:.0f}% of {os.cpu_count()} cores")
        if r.get("mcp_connections_peak") is not None:
            print(
                f"    MCP: {TOOL_CALLS} calls per turn answering after {args.mcp_delay:g} s; peak TCP connections"
                f" to the MCP server {r['mcp_connections_peak']} (bound per workspace and worker process:"
                f" {os.environ.get('MANGO_WORKSPACE_MAX_MCP_CONNECTIONS', 64)} connections,"
                f" {os.environ.get('MANGO_WORKSPACE_MAX_MCP_CALLS', 32)} calls in flight)"
            )
        for problem in r["problems"]:
            print(f"    problem: {problem}")
        for error in r["errors"]:
            print(f"    error: {error!r}")
    plain = [r for r in results if r.get("mcp_connections_peak") is None]
    if len(plain) == 2:
        threads, prefork = plain
        per_turn = prefork["wall"] / prefork["count"]
        estimate = per_turn * threads["count"]
        print(
            f"prefork x2 extrapolated to {threads['count']} sessions: ≈ {estimate:.0f} s "
            f"({prefork['wall']:.1f} s for {prefork['count']} x {threads['count']}/{prefork['count']}; "
            f"linear, as it runs 2 turns at a time) → {estimate / threads['single']:.1f}x one turn"
        )
    print("targets: wall/1 ≤ 1.5, RSS ≤ 2048 MiB, PG peak ≤ 40, SSE p50 ≤ 50 ms")
    print(json.dumps([{k: v for k, v in r.items() if k not in ("problems", "errors")} for r in results]))


if __name__ == "__main__":
    main()
