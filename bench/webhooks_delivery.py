"""Webhook delivery throughput and latency: Mango's outbox and worker side by side with the raw
signed POST of the same bodies, to the same loopback receiver, in one run.

    .venv/bin/python bench/webhooks_delivery.py [--events 200] [--endpoints 10] [--threads 8]

Mango: `--events` changes, each committed in its own transaction with its outbox rows (one per
endpoint: events x endpoints deliveries), delivered by a real Celery worker (webhooks.deliver_due,
MANGO_WEBHOOK_DELIVERY_THREADS=--threads, MANGO_WEBHOOK_INFLIGHT_MAX=--threads: one workspace) as
each commit asks for it; latency is from the event's commit to the receiver's read of the body.
Raw: the same bodies, signed with standardwebhooks as Mango signs them, POSTed by `--threads`
threads with the same HTTP client (httpx2, one keep-alive client per thread: the best a sender
without an outbox does), all ready at t0; latency is from t0 to the receiver's read. The
receiver answers 200 and verifies nothing.
"""

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import _common


class Receiver:
    def __init__(self):
        self.arrived: dict[str, float] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.arrived[self.headers["webhook-id"]] = time.time()
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.daemon_threads = True
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mango(args, receiver: Receiver) -> dict:
    from django.db import transaction

    from webhooks.models import WebhookDelivery, WebhookEndpoint
    from webhooks.services import endpoint_create, webhook_event_emit

    _, workspace = _common.api_key(f"bench-webhooks-{os.getpid()}")
    for n in range(args.endpoints):
        endpoint_create(workspace=workspace, url=f"{receiver.url}/e{n}")
    committed: dict[str, float] = {}
    started = time.time()
    for n in range(args.events):
        with transaction.atomic():
            webhook_event_emit(workspace_id=workspace.id, type="session.idled", object_id=f"sesn_bench{n}")
            event = (
                WebhookDelivery.objects.filter(workspace=workspace)
                .order_by("-created_at")
                .values_list("event_id", flat=True)[0]
            )
        committed[event] = time.time()
    total = args.events * args.endpoints
    deadline = time.time() + 300
    while len(receiver.arrived) < total and time.time() < deadline:
        time.sleep(0.05)
    wall = max(receiver.arrived.values()) - started
    rows = dict(WebhookDelivery.objects.filter(workspace=workspace).values_list("id", "event_id"))
    latencies = [receiver.arrived[d] - committed[rows[d]] for d in rows if d in receiver.arrived]
    bodies = [
        (f"msg_raw{n}", f"{receiver.url}/e{n % args.endpoints}", body)
        for n, body in enumerate(WebhookDelivery.objects.filter(workspace=workspace).values_list("body", flat=True))
    ]
    WebhookEndpoint.objects.filter(workspace=workspace).delete()
    return {"delivered": len(latencies), "of": total, "wall": wall, "latencies": latencies, "bodies": bodies}


def raw(args, receiver: Receiver, bodies: list[tuple[str, str, str]]) -> dict:
    import httpx2

    from webhooks.delivery import signed_headers

    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    receiver.arrived.clear()

    local = threading.local()

    def post(item):
        delivery_id, url, body = item
        headers = signed_headers(delivery_id=delivery_id, body=body, secrets=[secret], now=datetime.now(UTC))
        if not hasattr(local, "client"):
            local.client = httpx2.Client(timeout=15.0)
        local.client.post(url, content=body.encode(), headers=headers)

    started = time.time()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        list(pool.map(post, bodies))
    wall = max(receiver.arrived.values()) - started
    latencies = [at - started for at in receiver.arrived.values()]
    return {"delivered": len(latencies), "of": len(bodies), "wall": wall, "latencies": latencies}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    queue = f"bench-webhooks-{os.getpid()}"
    os.environ.update(
        {
            "MANGO_WEBHOOKS_QUEUE": queue,
            "MANGO_OUTBOUND_PRIVATE_HOSTS": "127.0.0.1",
            "MANGO_WEBHOOK_DELIVERY_THREADS": str(args.threads),
            "MANGO_WEBHOOK_INFLIGHT_MAX": str(args.threads),
        }
    )
    _common.setup()
    from tests.worker import CeleryWorker

    receiver = Receiver()
    worker = CeleryWorker(queues=queue, concurrency=2, env={"MANGO_LOG_LEVEL": "INFO"})
    try:
        worker.start()
        cpu, db_cpu = _common.cpu_seconds(_common.process_tree(worker.process.pid)), _common.database_cpu()
        results = {"mango": mango(args, receiver)}
        results["mango"]["cpu"] = _common.cpu_seconds(_common.process_tree(worker.process.pid)) - cpu
        results["mango"]["db_cpu"] = _common.database_cpu_since(db_cpu)
    finally:
        worker.kill()  # a worker that never got ready is killed too
    bodies = results["mango"].pop("bodies")
    results["raw signed POST"] = raw(args, receiver, bodies)
    print(
        f"{args.events} events x {args.endpoints} endpoints, {args.threads} threads, loadavg {os.getloadavg()[0]:.2f}"
    )
    for name, result in results.items():
        lat = result["latencies"]
        rate = result["delivered"] / result["wall"]
        print(
            f"{name:>16}: {result['delivered']}/{result['of']} delivered in {result['wall']:.2f} s, {rate:.0f}"
            f" deliveries/s, latency p50 {statistics.median(lat) * 1000:.0f} ms"
            f" p99 {percentile(lat, 0.99) * 1000:.0f} ms"
            + (
                f", CPU each: worker {result['cpu'] * 1000 / result['delivered']:.2f} ms,"
                f" database {result['db_cpu'] * 1000 / result['delivered']:.2f} ms"
                if "cpu" in result
                else ""
            )
        )


if __name__ == "__main__":
    main()
