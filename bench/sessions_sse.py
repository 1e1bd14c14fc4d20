"""50 concurrent SSE event streams on a real gunicorn (gthread) server while uploads and lists
continue: open time, event delivery latency (send → seen on the stream), and the latency of
uploads and lists under that load.

    .venv/bin/python bench/sessions_sse.py [--streams 50] [--threads 64]

No worker is needed: the delivered event is a `user.interrupt` on an idle session, which the
stream carries like any other event (a turn's events take the same path).
"""

import argparse
import json
import os
import statistics
import threading
import time

import _common


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--threads", type=int, default=64)
    args = parser.parse_args()

    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    _common.setup()
    import anthropic

    raw_key, _ = _common.api_key(f"bench-sse-{time.time_ns()}")
    server = _common.Server(threads=args.threads)
    try:
        client = anthropic.Anthropic(base_url=server.url, api_key=raw_key, max_retries=0)
        agent = client.beta.agents.create(name="bench", model="claude-sonnet-4-5")
        env = client.beta.environments.create(name="bench")
        sessions = [client.beta.sessions.create(agent=agent.id, environment_id=env.id) for _ in range(args.streams)]

        opened = threading.Semaphore(0)
        seen: dict[str, float] = {}
        errors: list[BaseException] = []

        def follow(session_id: str) -> None:
            try:
                with client.beta.sessions.events.stream(session_id) as stream:
                    opened.release()
                    for event in stream:
                        if event.type == "user.interrupt":
                            seen[session_id] = time.monotonic()
                            return
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                opened.release()

        started = time.monotonic()
        threads = [threading.Thread(target=follow, args=(s.id,), daemon=True) for s in sessions]
        for thread in threads:
            thread.start()
        for _ in threads:
            opened.acquire(timeout=60)
        open_seconds = time.monotonic() - started

        uploads, lists = [], []
        payload = os.urandom(1024 * 1024)
        for i in range(20):
            t = time.monotonic()
            client.beta.files.upload(file=(f"b{i}.bin", payload, "application/octet-stream"))
            uploads.append(time.monotonic() - t)
            t = time.monotonic()
            client.beta.sessions.list(limit=20)
            lists.append(time.monotonic() - t)
            t = time.monotonic()
            client.beta.files.list(limit=20)
            lists.append(time.monotonic() - t)

        sent: dict[str, float] = {}
        for session in sessions:
            sent[session.id] = time.monotonic()
            client.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        for thread in threads:
            thread.join(timeout=30)
        delivery = [seen[sid] - sent[sid] for sid in seen]
        figures = {
            "streams": args.streams,
            "gunicorn_threads": args.threads,
            "errors": len(errors),
            "all_streams_open_seconds": round(open_seconds, 3),
            "delivered": len(seen),
            "delivery_p50_ms": round(statistics.median(delivery) * 1000, 1),
            "delivery_max_ms": round(max(delivery) * 1000, 1),
            "delivery_over_500ms": sum(1 for d in delivery if d > 0.5),
            "upload_1mib_p50_ms": round(statistics.median(uploads) * 1000, 1),
            "upload_1mib_max_ms": round(max(uploads) * 1000, 1),
            "list_p50_ms": round(statistics.median(lists) * 1000, 1),
            "list_max_ms": round(max(lists) * 1000, 1),
            "server_memory_kib": server.memory_kib(),
        }
        print(json.dumps(figures, indent=2))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
