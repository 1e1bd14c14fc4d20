"""`GET /v1/files` latency (p50, p99) with 1k and with 100k Files in a workspace, through a real
gunicorn server over keep-alive HTTP.

    .venv/bin/python bench/files_list.py [--requests 300]

Rows are bulk-inserted straight into the database (listing never touches the object store).
Target (issue #3): the 100k figure <= 1.5 x the 1k figure: keyset pagination on the partial
index (workspace, created_at desc, id desc), so neither the workspace size nor the depth of
the page matters.
"""

import argparse
import http.client
import json
import random
import secrets
import statistics
import time

import _common

DAY_MS = 86_400_000


def synthetic_id(millis: int) -> str:
    from core.ids import _encode

    return f"file_{_encode(millis, 10)}{_encode(secrets.randbits(80), 16)}"


def populate(workspace, count: int) -> list[str]:
    """`count` ready Files spread over the last 30 days, created like the service creates them
    (created_at is the time embedded in the id). Returns ids newest first."""
    from files.models import File, file_id_time

    now_ms = time.time_ns() // 1_000_000
    rows = []
    for _ in range(count):
        file_id = synthetic_id(now_ms - secrets.randbelow(30 * DAY_MS))
        rows.append(
            File(
                id=file_id,
                workspace=workspace,
                created_at=file_id_time(file_id),
                filename="bench.txt",
                mime_type="text/plain",
                size_bytes=1234,
                sha256="0" * 64,
                object_key=f"files/{workspace.id}/bench-{file_id}",
            )
        )
    File.objects.bulk_create(rows, batch_size=5000)
    return [r.id for r in sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)]


def request(conn, key: str, path: str) -> float:
    """One GET; milliseconds. A keep-alive connection the server closed is reopened (and that
    attempt not timed)."""
    for attempt in range(2):
        started = time.perf_counter()
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
            response = conn.getresponse()
            body = response.read()
            break
        except (ConnectionError, http.client.RemoteDisconnected):
            conn.close()
            if attempt:
                raise
    elapsed = time.perf_counter() - started
    assert response.status == 200, body
    return elapsed * 1000


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--sizes", default="1000,100000")
    args = parser.parse_args()

    _common.setup()
    from django.db import connection

    from files import selectors
    from files.models import File

    stamp = int(time.time())
    setups = []
    for size in [int(s) for s in args.sizes.split(",")]:
        raw_key, workspace = _common.api_key(f"bench-list-{size}-{stamp}")
        started = time.perf_counter()
        ids = populate(workspace, size)
        print(f"inserted {size} rows in {time.perf_counter() - started:.1f}s")
        setups.append((size, raw_key, workspace, ids))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE files_file")
    connection.close()

    server = _common.Server()
    results = {}
    try:
        # The sizes are measured interleaved, request by request, so that load from anything
        # else on the machine hits them alike.
        per_size = {}
        for size, raw_key, _workspace, ids in setups:
            deep = ids[int(len(ids) * 0.9)]
            deep_file = File.objects.get(pk=deep)
            cursor = selectors.cursor_encode(selectors.Position(created_at=deep_file.created_at, id=deep))
            per_size[size] = {
                "key": raw_key,
                "conn": http.client.HTTPConnection("127.0.0.1", server.port, timeout=60),
                "queries": {
                    "first page (limit=20)": "/v1/files",
                    "page cursor at 90% depth": f"/v1/files?page={cursor}",
                    "after_id at 90% depth": f"/v1/files?after_id={deep}",
                    "first page (limit=1000)": "/v1/files?limit=1000",
                },
            }
        names = list(next(iter(per_size.values()))["queries"])
        print(f"{'files':>7} {'query':<34} {'p50 ms':>7} {'p99 ms':>7}")
        for name in names:
            samples = {size: [] for size in per_size}
            for i in range(args.requests + 20):
                order = list(per_size.items())
                random.shuffle(order)
                for size, target in order:
                    elapsed = request(target["conn"], target["key"], target["queries"][name])
                    if i >= 20:  # warm-up
                        samples[size].append(elapsed)
            for size in per_size:
                p50, p99 = percentile(samples[size], 50), percentile(samples[size], 99)
                results[(size, name)] = (p50, p99)
                print(f"{size:>7} {name:<34} {p50:>7.2f} {p99:>7.2f}")
        for size, raw_key, _workspace, ids in setups:
            conn = per_size[size]["conn"]
            conn.request("GET", "/v1/files?limit=5", headers={"Authorization": f"Bearer {raw_key}"})
            assert [f["id"] for f in json.loads(conn.getresponse().read())["data"]] == ids[:5]
            conn.close()

        small, large = setups[0][0], setups[-1][0]
        if small != large:
            print(f"\nratio {large} / {small} files (target <= 1.5):")
            for name in names:
                (p50_s, p99_s), (p50_l, p99_l) = results[(small, name)], results[(large, name)]
                print(f"  {name:<34} p50 {p50_l / p50_s:.2f}  p99 {p99_l / p99_s:.2f}")

        size, raw_key, workspace, ids = setups[-1]
        from django.db.models import Q
        from django.utils import timezone

        deep = ids[int(len(ids) * 0.9)]
        deep_file = File.objects.get(pk=deep)

        plan_qs = (
            File.objects.filter(workspace=workspace, state="ready")
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
            .filter(selectors._after(selectors.Position(created_at=deep_file.created_at, id=deep)))
            .order_by("-created_at", "-id")[:21]
        )
        print(f"\nplan for the deep page at {size} files:")
        print("  " + plan_qs.explain(analyze=True).replace("\n", "\n  "))
    finally:
        server.stop()
        for _, _, workspace, _ in setups:
            File.objects.filter(workspace=workspace).delete()


if __name__ == "__main__":
    main()
