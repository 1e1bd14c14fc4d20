"""API CPU and latency of `POST /v1/sessions/{id}/events`, this checkout side by side with a git
revision (default: HEAD~1), each served as `make run` serves the API (gunicorn + one uvicorn worker
running config.asgi, config/gunicorn.conf.py).

    .venv/bin/python bench/events_post.py [--against REV] [--posts 200] [--runs 3] [--at-once 1,10]

Each run sends `--posts` one-event POSTs (a `user.interrupt`, as bench/tenancy.py sends) to each
server in turn, `--at-once` at a time (one session each), and reports the server's CPU per POST
(user + system of its processes, /proc) and the POSTs' p50 / p99; best run of `--runs` per server.
No Celery worker runs: the turns the events enqueue wait in the queue (emptied at the end).
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import _common


def loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def checkout(rev: str, into: Path) -> Path:
    """`rev`'s tree, extracted (not a worktree), using this checkout's virtualenv."""
    archive = subprocess.run(["git", "archive", rev], cwd=_common.ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / ".venv").symlink_to((_common.ROOT / ".venv").resolve())
    return into


def sessions_for(url: str, count: int) -> tuple[str, list[str]]:
    import anthropic

    raw_key, _ = _common.api_key(f"bench-events-post-{os.getpid()}")
    client = anthropic.Anthropic(base_url=url, api_key=raw_key, max_retries=0)
    agent = client.beta.agents.create(name="bench", model="claude-sonnet-4-5")
    environment = client.beta.environments.create(name="bench")
    sessions = [client.beta.sessions.create(agent=agent.id, environment_id=environment.id) for _ in range(count)]
    return raw_key, [session.id for session in sessions]


def post(port: int, key: str, session_id: str, times: list[float]) -> None:
    _, sent, answered = _common.post_interrupt(port, key, session_id)
    times.append(answered - sent)


def run(server: _common.Server, key: str, sessions: list[str], posts: int) -> tuple[float, list[float]]:
    """(server CPU seconds per POST, the POSTs' latencies)."""
    times: list[float] = []
    cpu = server.cpu_seconds()
    for _ in range(max(1, posts // len(sessions))):
        threads = [threading.Thread(target=post, args=(server.port, key, s, times)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return (server.cpu_seconds() - cpu) / len(times), sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default="HEAD~1")
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--at-once", default="1,10")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    os.environ.setdefault("MANGO_SESSIONS_QUEUE", f"bench-events-post-{os.getpid()}")
    _common.setup()
    base_dir = Path(tempfile.mkdtemp(prefix="mango-bench-"))
    servers = {}
    try:
        servers[args.against] = _common.Server(root=checkout(args.against, base_dir))
        servers["this checkout"] = _common.Server()
        print(f"layout: {servers['this checkout'].describe()}, each; load average at start {loadavg()}")
        for at_once in (int(n) for n in args.at_once.split(",")):
            best: dict[str, tuple[float, list[float]]] = {}
            for name, server in servers.items():
                key, sessions = sessions_for(server.url, at_once)
                run(server, key, sessions, 10 * at_once)  # warm-up
                best[name] = (float("inf"), [])
                for _ in range(args.runs):
                    result = run(server, key, sessions, args.posts)
                    best[name] = min(best[name], result, key=lambda r: r[0])
            for name, (cpu, times) in best.items():
                p50, p99 = times[len(times) // 2], times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
                print(
                    f"{at_once} at once, {name}: {cpu * 1000:.2f} ms of API CPU per POST (best of {args.runs}); "
                    f"POST p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
                )
            ratio = best["this checkout"][0] / best[args.against][0]
            print(f"{at_once} at once: CPU per POST, this checkout / {args.against}: {ratio:.2f}")
        print(f"load average at end {loadavg()}")
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(base_dir, ignore_errors=True)
        import redis

        redis.Redis.from_url(os.environ["REDIS_URL"]).delete(os.environ["MANGO_SESSIONS_QUEUE"])


if __name__ == "__main__":
    main()
