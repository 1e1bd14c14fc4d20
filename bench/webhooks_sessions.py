"""The webhooks of sessions run at once (issue 40's benchmark row): --sessions sessions each get a
message at once and run the usual turn (bench/sessions_turns.py: 3 bash calls then a final
message against the scripted upstream, --delay s per call) on `make run`'s worker layout
(--processes x --concurrency threads), with their webhooks delivered as `make run` delivers them
(by the turn workers; --own-worker: by a worker process of their own on a queue of their own,
under `nice -n` --nice, as `make run` does with MANGO_WEBHOOKS_QUEUE set) into --endpoints
endpoints of the sessions' workspace on a loopback receiver (a process of its own). Side by side
in one run, alternating, --rounds times each:

  * no endpoint: the sessions' wall (the sends to the last session.status_idle);
  * --endpoints endpoints subscribed to every type: the sessions' wall, and the deliveries:
    how many arrived, events per second delivered (deliveries over the time from the first
    outbox row to the last arrival), and the latency of each delivery from its outbox row's
    created_at (written in the change's own transaction, just before its commit) to the
    receiver's read of the request (both clocks the machine's).

    .venv/bin/python bench/webhooks_sessions.py [--sessions 100] [--endpoints 10] [--delay 2]
        [--rounds 2] [--processes 2] [--concurrency 100] [--own-worker [--nice 19]]

Each run also prints the CPU seconds (/proc) of the turn workers, of the delivery worker and of
the database's backends (all but the bench's own: the API's and the workers').

Target: the sessions' wall with endpoints within 5 % of the wall without.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import _common
import sessions_turns as st


def serve_receiver() -> None:
    """Answer 200 to every POST; print the port; on stdin's close print {webhook-id: arrival}."""
    arrived: dict[str, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            arrived.setdefault(self.headers.get("webhook-id", ""), time.time())
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    while sys.stdin.readline():
        print(json.dumps(arrived), flush=True)


class ReceiverProcess:
    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-receiver"],
            cwd=st.ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, text=True,
        )  # fmt: skip
        self.port = int(self.process.stdout.readline())

    def arrived(self) -> dict[str, float]:
        self.process.stdin.write("dump\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        st.stop_group(self.process)


def run_sessions(client, agent_id: str, env_id: str, count: int, *, timeout: float) -> tuple[float, list[str]]:
    from django.utils import timezone

    sessions = [client.beta.sessions.create(agent=agent_id, environment_id=env_id) for _ in range(count)]
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
    return st.wait_all(ids, "session.status_idle", started=started, timeout=timeout), ids


def deliveries(workspace, receiver: ReceiverProcess, *, timeout: float) -> dict:
    """Wait until every outbox row of the workspace is delivered; their figures."""
    from webhooks.models import WebhookDelivery

    rows = WebhookDelivery.objects.filter(workspace=workspace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and rows.exclude(status="succeeded").exists():
        time.sleep(1.0)
    created = {d: at.timestamp() for d, at in rows.values_list("id", "created_at")}
    arrived = receiver.arrived()
    latencies = sorted(arrived[d] - at for d, at in created.items() if d in arrived)
    span = max(arrived[d] for d in created if d in arrived) - min(created.values()) if latencies else float("nan")
    return {
        "rows": len(created),
        "delivered": len(latencies),
        "per_second": len(latencies) / span if latencies else 0.0,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else float("nan"),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000 if latencies else float("nan"),
        "failed": rows.exclude(status="succeeded").count(),
    }


def vacuum_database() -> None:
    """Each run starts from the same tables: this machine's PostgreSQL runs no autovacuum, so the
    bench database otherwise keeps every dead row of every earlier run (a delivery leaves three:
    its lease, its record, its endpoint's deletion); after ten runs a claim's count of the
    deliveries in flight visited 45,000 index entries and 3,800 heap pages (10 ms of the
    database's CPU per claim), which production's autovacuum would have removed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def workers_cpu(workers) -> float:
    """User + system CPU seconds of the worker processes so far (/proc)."""
    return _common.cpu_seconds(pid for worker in workers for pid in _common.process_tree(worker.pid))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--own-worker", action="store_true", help="deliver in a niced worker of their own")
    parser.add_argument("--nice", type=int, default=int(os.environ.get("MANGO_WEBHOOKS_WORKER_NICE", "19")))
    parser.add_argument("--serve-receiver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_receiver:
        return serve_receiver()

    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango_bench_webhooks")
    os.environ.setdefault("MANGO_FILE_S3_BUCKET", "mango-b-webhooks")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/1")
    queue = f"bench-webhooks-sessions-{os.getpid()}"
    os.environ["MANGO_SESSIONS_QUEUE"] = queue
    # make run's layout (scripts/run.sh): deliveries in the turn workers, on the sessions' queue;
    # --own-worker: in a worker of their own under nice, on a queue of their own.
    os.environ["MANGO_WEBHOOKS_QUEUE"] = f"{queue}-webhooks" if args.own_worker else queue
    receiver = ReceiverProcess()
    os.environ["MANGO_OUTBOUND_PRIVATE_HOSTS"] = f"127.0.0.1:{receiver.port}"
    _common.setup()
    import anthropic
    import environ

    from webhooks.models import WebhookEndpoint
    from webhooks.services import endpoint_create, endpoint_delete

    model = st.UpstreamProcess(args.delay)
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-bench",
        "MANGO_SANDBOX": "local_process",
        "MANGO_LOG_LEVEL": "WARNING",
        "MANGO_READYZ_REQUIRE_WORKER": "false",
        "MANGO_WORKSPACE_MAX_RUNNING_TURNS": str(args.sessions + 10),
        "MANGO_WORKSPACE_MAX_SANDBOXES": str(10 * args.sessions + 100),
        "BENCH_DBNAME": environ.Env.db_url_config(os.environ["DATABASE_URL"])["NAME"],
    }
    raw_key, workspace = _common.api_key(f"bench-webhooks-sessions-{time.time_ns()}")
    (st.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)
    api = None
    workers = []
    delivery = []
    rows = []
    try:
        api = st.Api(env)
        for index in range(args.processes):
            log = st.ROOT / "var" / "log" / f"bench-webhooks-sessions-{index}.log"
            workers.append(
                st.start_worker(env, pool="threads", concurrency=args.concurrency, queue=queue,
                                name=f"bench-webhooks-{index}", log=log)
            )  # fmt: skip
        if args.own_worker:
            delivery.append(
                st.start_worker(env, pool="threads", concurrency=4, queue=os.environ["MANGO_WEBHOOKS_QUEUE"],
                                name="bench-webhooks-delivery", nice=args.nice,
                                log=st.ROOT / "var" / "log" / "bench-webhooks-sessions-delivery.log")
            )  # fmt: skip
        client = anthropic.Anthropic(base_url=api.url, api_key=raw_key, max_retries=2, timeout=600)
        agent = client.beta.agents.create(
            name="bench", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}]
        )
        environment = client.beta.environments.create(name="bench", config={"type": "cloud"})
        timeout = max(120, args.sessions * 4 * args.delay)
        run_sessions(client, agent.id, environment.id, 1, timeout=120)  # warm
        for _round in range(args.rounds):
            for with_endpoints in (False, True):
                endpoints = []
                if with_endpoints:
                    endpoints = [
                        endpoint_create(workspace=workspace, url=f"http://127.0.0.1:{receiver.port}/e{n}")[0]
                        for n in range(args.endpoints)
                    ]
                vacuum_database()
                cpu = workers_cpu(workers), workers_cpu(delivery), _common.database_cpu()
                wall, _ids = run_sessions(client, agent.id, environment.id, args.sessions, timeout=timeout)
                row = {"endpoints": len(endpoints), "wall": wall, "load": os.getloadavg()[0]}
                row["cpu_turns"] = workers_cpu(workers) - cpu[0]
                row["cpu_delivery_turns"] = workers_cpu(delivery) - cpu[1]
                row["cpu_db_turns"] = _common.database_cpu_since(cpu[2])
                if endpoints:
                    row |= deliveries(workspace, receiver, timeout=600)
                    row["cpu_all"] = workers_cpu(workers) - cpu[0]
                    row["cpu_delivery_all"] = workers_cpu(delivery) - cpu[1]
                    row["cpu_db_all"] = _common.database_cpu_since(cpu[2])
                    for endpoint in endpoints:
                        endpoint_delete(workspace=workspace, endpoint_id=endpoint.id)
                rows.append(row)
                print(json.dumps(row), flush=True)
        assert not WebhookEndpoint.objects.filter(workspace=workspace).exists()
    finally:
        for worker in workers + delivery:
            st.stop_group(worker)
        if api is not None:
            api.stop()
        model.close()
        receiver.close()
    report(rows, args)


def report(rows: list[dict], args) -> None:
    bare = [r["wall"] for r in rows if not r["endpoints"]]
    hooked = [r for r in rows if r["endpoints"]]
    print(
        f"\n{args.sessions} sessions at once (3 bash calls + a final message each, upstream delay {args.delay:g} s),"
        f" {args.processes} worker processes x {args.concurrency} threads, {args.rounds} rounds alternating;"
        + (f" delivered by their own worker (nice {args.nice})" if args.own_worker else " delivered by turn workers")
    )
    for r in rows:
        line = (
            f"  {r['endpoints']:>2} endpoints: sessions' wall {r['wall']:.2f} s (load {r['load']:.2f}),"
            f" CPU in it: turn workers {r['cpu_turns']:.1f} s, delivery worker {r['cpu_delivery_turns']:.1f} s,"
            f" database {r['cpu_db_turns']:.1f} s"
        )
        if r["endpoints"]:
            line += (
                f"; {r['delivered']}/{r['rows']} deliveries, {r['per_second']:.0f} events/s delivered,"
                f" latency from commit p50 {r['p50_ms']:.0f} ms p99 {r['p99_ms']:.0f} ms, {r['failed']} not delivered,"
                f" CPU until the last: turn workers {r['cpu_all']:.1f} s,"
                f" delivery worker {r['cpu_delivery_all']:.1f} s, database {r['cpu_db_all']:.1f} s"
            )
        print(line)
    ratio = statistics.mean(r["wall"] for r in hooked) / statistics.mean(bare)
    print(f"  wall with {args.endpoints} endpoints / without: {ratio:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
