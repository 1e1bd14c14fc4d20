"""Upload and download throughput through the API vs. boto3 straight to the same S3 store,
measured side by side in one run, with the CPU each side spends per GB and the server's RSS.

    .venv/bin/python bench/files_throughput.py [--sizes 100,500] [--rounds 3] [--concurrency 8]

Single transfers: API upload vs boto3 `upload_file`; API download vs one `get_object` stream
(and, for information, boto3 `download_fileobj`). Concurrent: N uploads of 64 MiB through the
API at once vs N boto3 `upload_file` at once, and N downloads vs N `get_object` streams
(aggregate MB/s). Each figure is the best of --rounds, with the range of the ratio.

CPU s/GB: the server's (master + workers, from /proc, before/after) per GB moved through it,
next to this process's own CPU for the direct boto3 transfers (nothing else runs in it then).
RSS: growth of the server worker's peak RSS (VmHWM, reset before each run) over its RSS just
before the run; "over idle" is the peak over the worker's RSS after warm-up.

Targets (issue #15): upload >= 0.95 x upload_file, download >= 0.90 x get_object at 100 and
500 MB; N=8 concurrent >= 0.85 x; RSS growth <= 32 MiB (500 MB upload), <= 64 MiB (8-way).

Where the time goes (2026-11-30, per-thread CPU of the uvicorn worker from /proc, py-spy on it;
2-core machine shared with the store and the client; the CPU s/GB columns are the figures to
compare, MB/s ratios swing by +-0.15 from run to run):

- The machine is CPU-bound in every transfer (busy 84-98 %), and the store is most of it:
  SeaweedFS spends 10-14 CPU s/GB on an upload and 1.4-2.4 on a download (column store/GB),
  the same through the API as direct. A ratio is therefore about (store + boto3) / (store +
  client + server) CPU per GB: whatever the server spends per byte comes straight off it.
- Uploads, 2.4-3.4 server CPU s/GB (boto3's upload_file: 1.6-2.4 for the same bytes). The reader
  thread (~1.7): SHA-256 of every byte (required: the File's digest; ~0.64 with SHA-NI), the
  multipart delimiter search (bytearray.find, ~0.17), recv's kernel copy (~0.3-0.4; reads average
  ~740 KB, so the Python steps per read do not count). The part threads (~0.8): the kernel's send
  to the store (~0.3-0.35 sys), CRC32C (~0.05) and what is left of the request (~0.1-0.2): each
  part is one signed PUT on the thread's own connection (files/storage/signed.py), where
  botocore's request pipeline cost ~0.5 s/GB more (3.12-3.50 -> 2.64-2.82 s/GB side by side).
  Part size stays 5 MiB x 4 in flight x 10 pooled buffers (8 MiB parts broke the 8-way RSS bound).
- Downloads, 0.2-0.5 server CPU s/GB: splice(2) store socket -> pipe -> client socket, nearly all
  kernel time, plus the request: a 1000-byte download takes 5.5 ms (get_object: 2.5 ms) and
  3.7-3.9 ms of server CPU, of which Django and the key and File lookups ~3.3 (the store's GET
  is a signed request of our own, files/storage/signed.py: through botocore it was 6.5-6.9 ms
  and 4.7-5.2 ms of CPU). A read/write relay instead of splice cost more (0.40-0.48 vs 0.30-0.34);
  SO_RCVLOWAT on the store socket, gc.freeze() and pipe sizes changed nothing measurable.
- "via C proxy" rows: the same boto3 transfers through socat (C, read/write, 1 MiB buffers), i.e.
  the cost of one more TCP hop and nothing else. Best-of-3 ratios on the final code of
  2026-11-30 (three runs, 21:34-21:41, load 1.0-4.4), hop / API:
    download 100 MB  0.82 0.83 0.84 / 0.74 0.85 0.70    500 MB 0.97 0.99 0.91 / 0.92 0.93 0.80
    8 x 64 MiB down  0.72 0.70 0.82 / 0.81 0.68 0.77
    upload 100 MB    0.96 0.97 0.95 / 1.00 0.88 0.94    500 MB 0.96 1.05 1.01 / 0.90 0.97 0.97
    8 x 64 MiB up    0.80 0.95 0.97 / 0.90 0.93 0.91
  In none of those runs does a bare C hop reach 0.90 on a 100 MB download or 0.85 on eight
  downloads at once.
- The store keeps deleted objects' bytes until it vacuums: the script asks it to at the end
  (_common.vacuum_store); six runs without that filled the disk with ~75 GB of volumes.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import _common

MB = 1_000_000
MIB = 1024 * 1024
BOUNDARY = "mango-bench-boundary"
CLIENT_CHUNK = MIB


def make_data(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    with open(path, "wb") as handle:
        left = size
        block = os.urandom(8 * MIB)
        while left:
            piece = block[: min(left, len(block))]
            handle.write(piece)
            left -= len(piece)


def api_upload(server, key: str, path: Path) -> str:
    size = path.stat().st_size
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def body():
        yield head
        buffer = bytearray(CLIENT_CHUNK)
        view = memoryview(buffer)
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                yield view[:count]  # http.client sends it before asking for the next one
        yield tail

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request(
        "POST",
        "/v1/files",
        body=body(),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            "Content-Length": str(len(head) + size + len(tail)),
        },
    )
    response = conn.getresponse()
    payload = response.read()
    assert response.status == 200, payload
    conn.close()
    return json.loads(payload)["id"]


def api_download(server, key: str, file_id: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("GET", f"/v1/files/{file_id}/content", headers={"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    assert response.status == 200, response.read()
    buffer = bytearray(CLIENT_CHUNK)
    total = 0
    while count := response.readinto(buffer):
        total += count
    conn.close()
    return total


class _Sink:
    def __init__(self):
        self.total = 0

    def write(self, data):
        self.total += len(data)
        return len(data)


def direct_upload(s3, bucket: str, path: Path, key: str) -> None:
    s3.upload_file(str(path), bucket, key)  # boto3 defaults: 8 MiB parts, 10 threads


def direct_download_transfer(s3, bucket: str, key: str) -> int:
    sink = _Sink()
    s3.download_fileobj(bucket, key, sink)  # boto3 defaults: ranged GETs, 10 threads
    return sink.total


def direct_download_stream(s3, bucket: str, key: str) -> int:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    total = 0
    for chunk in body.iter_chunks(MIB):
        total += len(chunk)
    return total


class Measure:
    """Wall time, server CPU and this process's CPU around one operation (or N at once), and
    the server worker's peak RSS growth."""

    def __init__(self, server, proxy=None):
        self.server = server
        self.proxy = proxy
        self.store = _common.store_pids()

    def run(self, fn, *args_list):
        """Run fn(*args) for each args in args_list at once (one thread each)."""
        server = self.server
        rss_before = server.memory_kib()["VmRSS"]
        server.reset_peak_rss()
        cpu_server = server.cpu_seconds()
        cpu_store = _common.cpu_seconds(self.store)
        cpu_proxy = self.proxy.cpu_seconds() if self.proxy else 0.0
        busy_before, total_before = _common.machine_busy_seconds()
        cpu_self = time.process_time()
        results = [None] * len(args_list)
        errors = []

        def one(index, args):
            try:
                results[index] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 — re-raised below
                errors.append(exc)

        started = time.perf_counter()
        if len(args_list) == 1:
            one(0, args_list[0])
        else:
            threads = [threading.Thread(target=one, args=(i, a)) for i, a in enumerate(args_list)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        elapsed = time.perf_counter() - started
        if errors:
            raise errors[0]
        memory = server.memory_kib()
        busy_after, total_after = _common.machine_busy_seconds()
        return {
            "seconds": elapsed,
            "server_cpu": server.cpu_seconds() - cpu_server,
            "self_cpu": time.process_time() - cpu_self,
            "store_cpu": _common.cpu_seconds(self.store) - cpu_store,
            "proxy_cpu": (self.proxy.cpu_seconds() - cpu_proxy) if self.proxy else 0.0,
            "busy": (busy_after - busy_before) / max(total_after - total_before, 1e-9),
            "rss_growth_mib": (memory["VmHWM"] - rss_before) / 1024,
            "peak_mib": memory["VmHWM"] / 1024,
            "results": results,
        }


class ProxyHop:
    """The cost of one extra TCP hop alone, for reference: socat (a C proxy: read/write with
    1 MiB buffers, no Python, no HTTP parsing) between boto3 and the store. The direct boto3
    transfer through it, next to the same transfer straight to the store, is the best ratio any
    server that passes the bytes through itself could reach on this machine, where the store,
    the client and the hop share two cores (rows "via C proxy"; skipped without socat)."""

    def __init__(self, s3, credentials):
        import boto3

        self.port = _common.free_port()
        self.process = subprocess.Popen(
            ["socat", "-b", str(MIB), f"TCP-LISTEN:{self.port},bind=127.0.0.1,fork,reuseaddr", f"TCP:{_netloc(s3)}"],
            start_new_session=True,
        )
        credentials = credentials.get_frozen_credentials()
        self.s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            region_name=s3.meta.region_name,
            aws_access_key_id=credentials.access_key,
            aws_secret_access_key=credentials.secret_key,
            aws_session_token=credentials.token,
            config=s3.meta.config,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("socat did not start")

    def cpu_seconds(self) -> float:
        """socat's listener and the child it forks per connection."""
        return _common.cpu_seconds(_common.process_tree(self.process.pid))

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(5)


def _netloc(s3) -> str:
    from urllib.parse import urlsplit

    endpoint = urlsplit(s3.meta.endpoint_url)
    return f"{endpoint.hostname}:{endpoint.port or 80}"


RESULTS: dict[str, dict] = {}
HOP_UP = "ref: upload_file via socat / direct"
HOP_DOWN = "ref: get_object via socat / direct"


def summarize(name: str, api: list[dict], direct: list[dict], nbytes: int, how: str, *, hop: bool = False) -> list[str]:
    """One row: best API and direct rates, ratio of the bests and the range over rounds, CPU s/GB.
    The first row of a name is also kept in RESULTS (for the targets). `hop`: the "API" side is
    the direct transfer through the reference proxy, whose CPU fills the server column."""
    gb = nbytes / 1e9
    api_rates = [nbytes / MB / m["seconds"] for m in api]
    direct_rates = [nbytes / MB / m["seconds"] for m in direct]
    ratios = [a / d for a, d in zip(api_rates, direct_rates, strict=True)]
    best_ratio = max(api_rates) / max(direct_rates)
    server_cpu = min(m["proxy_cpu" if hop else "server_cpu"] for m in api) / gb
    if hop:
        name = f"  {name.split()[-1]} via C proxy"
    boto_cpu = min(m["self_cpu"] for m in direct) / gb
    rss = max(m["rss_growth_mib"] for m in api)
    store_api = min(m["store_cpu"] for m in api) / gb
    store_direct = min(m["store_cpu"] for m in direct) / gb
    busy_api = sum(m["busy"] for m in api) / len(api) * 100
    busy_direct = sum(m["busy"] for m in direct) / len(direct) * 100
    if not hop:
        RESULTS.setdefault(name, {"ratio": best_ratio, "rss": rss})
    return [
        f"{name:<22} {max(api_rates):>8.0f} {max(direct_rates):>9.0f} {best_ratio:>6.2f} "
        f"{min(ratios):>5.2f}-{max(ratios):<5.2f} {server_cpu:>10.2f} {boto_cpu:>9.2f} {rss:>8.1f} "
        f"{store_api:>5.2f}/{store_direct:<5.2f} {busy_api:>4.0f}/{busy_direct:<4.0f}  {how}"
    ]


HEADER = (
    f"{'transfer':<22} {'API MB/s':>8} {'direct':>9} {'ratio':>6} {'range':<11} "
    f"{'srv CPU/GB':>10} {'boto3/GB':>9} {'RSS+MiB':>8} {'store/GB':<11} {'busy%':<9}  direct ="
)
# store/GB: the local store's own CPU s/GB (SeaweedFS, which shares the cores), through the API /
# direct. busy%: the machine's CPU busy share during the transfers (2 cores = 100 %), API / direct.


def load() -> str:
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


TARGETS = [
    # (row name pattern, ratio at least, RSS growth at most in MiB or None)
    ("100MB upload", 0.95, None),
    ("500MB upload", 0.95, 32),
    ("100MB download", 0.90, None),
    ("500MB download", 0.90, None),
    ("{n}x{mib}MiB upload", 0.85, 64),
    ("{n}x{mib}MiB download", 0.85, 64),
]


def print_targets(n: int, mib: int) -> None:
    """Each issue #15 target next to the measured figure (ratio of the bests; RSS growth over
    the worker's RSS just before the run, worst round)."""
    print("targets (issue #15):")
    for pattern, ratio, rss in TARGETS:
        name = pattern.format(n=n, mib=mib)
        result = RESULTS.get(name)
        if result is None:
            continue
        verdict = "met" if result["ratio"] >= ratio and (rss is None or result["rss"] <= rss) else "NOT met"
        rss_text = f", RSS +{result['rss']:.1f} MiB (<= {rss})" if rss is not None else ""
        print(f"  {name:<22} ratio {result['ratio']:.2f} (>= {ratio:.2f}){rss_text}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,500", help="single-transfer sizes in MB (10^6 bytes)")
    parser.add_argument("--rounds", type=int, default=3, help="best of N for each measurement")
    parser.add_argument("--concurrency", type=int, default=8, help="transfers at once (0 to skip)")
    parser.add_argument("--concurrent-mib", type=int, default=64, help="size of each concurrent transfer")
    parser.add_argument("--layout", default="asgi", choices=["asgi", "wsgi"], help="asgi = make run's server")
    parser.add_argument("--no-hop", action="store_true", help="skip the C proxy reference rows (socat)")
    args = parser.parse_args()

    _common.setup()
    from files import storage
    from files.models import File

    raw_key, _ = _common.api_key(f"bench-throughput-{int(time.time())}")
    s3 = storage.backend().client
    bucket = storage.backend().bucket
    data_dir = _common.ROOT / "var" / "bench"
    data_dir.mkdir(parents=True, exist_ok=True)
    server = _common.Server(layout=args.layout)
    hop = ProxyHop(s3, storage.backend().credentials) if shutil.which("socat") and not args.no_hop else None
    measure = Measure(server, hop)
    created: list[str] = []

    def make_downloadable(file_id):
        created.append(file_id)
        # Bench only: make the upload downloadable (client uploads are not).
        File.objects.filter(pk=file_id).update(downloadable=True)

    try:
        # Warm up: imports, connections, thread pools.
        warm = data_dir / "warm.bin"
        make_data(warm, 9 * MIB)
        warm_id = api_upload(server, raw_key, warm)
        make_downloadable(warm_id)
        api_download(server, raw_key, warm_id)
        idle_rss = server.memory_kib()["VmRSS"] / 1024

        endpoint = storage.backend().client.meta.endpoint_url
        print(f"server: {server.describe()}, pid {server.worker_pid()}; store {endpoint}; best of {args.rounds}")
        print(f"start: {load()}")
        print(f"worker RSS after warm-up: {idle_rss:.1f} MiB")
        if hop is None:
            print("no socat (apt-get install socat): the C proxy reference rows are skipped")
        print(HEADER)
        peaks = {}
        for size_mb in [int(s) for s in args.sizes.split(",") if s]:
            size = size_mb * MB
            path = data_dir / f"data-{size_mb}MB.bin"
            make_data(path, size)
            runs = {"up": [], "down": [], "d_up": [], "d_stream": [], "d_transfer": [], "p_up": [], "p_stream": []}
            for round_number in range(args.rounds):
                up = measure.run(api_upload, (server, raw_key, path))
                file_id = up["results"][0]
                make_downloadable(file_id)
                down = measure.run(api_download, (server, raw_key, file_id))
                assert down["results"][0] == size
                direct_key = f"bench-direct/{size_mb}-{round_number}-{time.time_ns()}"
                runs["d_up"].append(measure.run(direct_upload, (s3, bucket, path, direct_key)))
                runs["d_stream"].append(measure.run(direct_download_stream, (s3, bucket, direct_key)))
                runs["d_transfer"].append(measure.run(direct_download_transfer, (s3, bucket, direct_key)))
                if hop:
                    runs["p_up"].append(measure.run(direct_upload, (hop.s3, bucket, path, direct_key)))
                    runs["p_stream"].append(measure.run(direct_download_stream, (hop.s3, bucket, direct_key)))
                s3.delete_object(Bucket=bucket, Key=direct_key)
                runs["up"].append(up)
                runs["down"].append(down)
            peaks[f"{size_mb}MB upload"] = max(m["peak_mib"] for m in runs["up"])
            peaks[f"{size_mb}MB download"] = max(m["peak_mib"] for m in runs["down"])
            for line in (
                summarize(f"{size_mb}MB upload", runs["up"], runs["d_up"], size, "upload_file (8 MiB, 10 threads)")
                + summarize(f"{size_mb}MB download", runs["down"], runs["d_stream"], size, "one get_object stream")
                + summarize(f"{size_mb}MB download", runs["down"], runs["d_transfer"], size, "download_fileobj (info)")
                + (
                    summarize(f"{size_mb}MB upload", runs["p_up"], runs["d_up"], size, HOP_UP, hop=True)
                    + summarize(f"{size_mb}MB download", runs["p_stream"], runs["d_stream"], size, HOP_DOWN, hop=True)
                    if hop
                    else []
                )
            ):
                print(line, flush=True)

        n = args.concurrency
        if n:
            size = args.concurrent_mib * MIB
            path = data_dir / f"data-{args.concurrent_mib}MiB.bin"
            make_data(path, size)
            runs = {"up": [], "down": [], "d_up": [], "d_stream": [], "p_up": [], "p_stream": []}
            for round_number in range(args.rounds):
                up = measure.run(api_upload, *[(server, raw_key, path)] * n)
                for file_id in up["results"]:
                    make_downloadable(file_id)
                down = measure.run(api_download, *[(server, raw_key, file_id) for file_id in up["results"]])
                assert down["results"] == [size] * n
                keys = [f"bench-direct/c{i}-{round_number}-{time.time_ns()}" for i in range(n)]
                runs["d_up"].append(measure.run(direct_upload, *[(s3, bucket, path, key) for key in keys]))
                runs["d_stream"].append(measure.run(direct_download_stream, *[(s3, bucket, key) for key in keys]))
                if hop:
                    runs["p_up"].append(measure.run(direct_upload, *[(hop.s3, bucket, path, key) for key in keys]))
                    streams = [(hop.s3, bucket, key) for key in keys]
                    runs["p_stream"].append(measure.run(direct_download_stream, *streams))
                for key in keys:
                    s3.delete_object(Bucket=bucket, Key=key)
                runs["up"].append(up)
                runs["down"].append(down)
            peaks[f"{n}x{args.concurrent_mib}MiB upload"] = max(m["peak_mib"] for m in runs["up"])
            peaks[f"{n}x{args.concurrent_mib}MiB download"] = max(m["peak_mib"] for m in runs["down"])
            label = f"{n}x{args.concurrent_mib}MiB"
            total = n * size
            lines = summarize(f"{label} upload", runs["up"], runs["d_up"], total, f"{n} x upload_file at once")
            lines += summarize(f"{label} download", runs["down"], runs["d_stream"], total, f"{n} x get_object at once")
            if hop:
                lines += summarize(f"{label} upload", runs["p_up"], runs["d_up"], total, HOP_UP, hop=True)
                lines += summarize(f"{label} download", runs["p_stream"], runs["d_stream"], total, HOP_DOWN, hop=True)
            for line in lines:
                print(line, flush=True)
        print(
            "worker peak RSS over its RSS after warm-up (MiB): "
            + ", ".join(f"{name} {peak - idle_rss:+.1f}" for name, peak in peaks.items())
        )
        print_targets(args.concurrency, args.concurrent_mib)
        print(f"end: {load()}")
    finally:
        if hop:
            hop.stop()
        for file_id in created:
            conn = http.client.HTTPConnection("127.0.0.1", server.port)
            conn.request("DELETE", f"/v1/files/{file_id}", headers={"Authorization": f"Bearer {raw_key}"})
            conn.getresponse().read()
            conn.close()
        server.stop()
        print(_common.vacuum_store())


if __name__ == "__main__":
    main()
