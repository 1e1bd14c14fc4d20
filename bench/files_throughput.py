"""Upload and download throughput through the API vs. boto3 straight to the same S3 store,
measured side by side in one run, plus the server worker's peak RSS growth.

    .venv/bin/python bench/files_throughput.py [--sizes 100,500] [--rounds 2]

Targets (issue #3): API upload >= 0.7 x direct, API download >= 0.7 x direct, and peak RSS
growth of the server <= 64 MiB while it moves a 500 MB file.
"""

import argparse
import http.client
import os
import time
from pathlib import Path

import _common

MB = 1_000_000
MIB = 1024 * 1024
BOUNDARY = "mango-bench-boundary"


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
    import json

    size = path.stat().st_size
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def body():
        yield head
        with open(path, "rb") as handle:
            while chunk := handle.read(MIB):
                yield chunk
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
    total = 0
    while chunk := response.read(MIB):
        total += len(chunk)
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


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def reset_peak(server) -> None:
    # Writing 5 to clear_refs resets VmHWM (the peak RSS) to the current RSS.
    with open(f"/proc/{server.worker_pid()}/clear_refs", "w") as handle:
        handle.write("5")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,500", help="file sizes in MB (10^6 bytes)")
    parser.add_argument("--rounds", type=int, default=2, help="best of N for each measurement")
    parser.add_argument("--layout", default="asgi", choices=["asgi", "wsgi"], help="asgi = make run's server")
    args = parser.parse_args()

    _common.setup()
    from files import storage
    from files.models import File

    raw_key, _ = _common.api_key(f"bench-throughput-{int(time.time())}")
    s3 = storage.client()
    bucket = storage.bucket()
    data_dir = _common.ROOT / "var" / "bench"
    data_dir.mkdir(parents=True, exist_ok=True)
    server = _common.Server(layout=args.layout)
    try:
        # Warm up: imports, connections, thread pools.
        warm = data_dir / "warm.bin"
        make_data(warm, 9 * MIB)
        warm_id = api_upload(server, raw_key, warm)
        File.objects.filter(pk=warm_id).update(downloadable=True)
        api_download(server, raw_key, warm_id)

        endpoint = storage.client().meta.endpoint_url
        kind = "uvicorn worker (config.asgi)" if args.layout == "asgi" else "gthread (config.wsgi)"
        print(f"server: gunicorn {kind}, 1 worker, pid {server.worker_pid()}; store {endpoint}")
        header = f"{'size':>6} {'op':<9} {'API MB/s':>9} {'direct MB/s':>12} {'ratio':>6}   direct = "
        print(header)
        for size_mb in [int(s) for s in args.sizes.split(",")]:
            size = size_mb * MB
            path = data_dir / f"data-{size_mb}MB.bin"
            make_data(path, size)
            up_api, up_direct, down_api, down_transfer, down_stream = [], [], [], [], []
            peaks = []
            file_ids = []
            for round_number in range(args.rounds):
                rss_before = server.memory_kib()["VmRSS"]
                reset_peak(server)
                elapsed, file_id = timed(api_upload, server, raw_key, path)
                up_peak = server.memory_kib()["VmHWM"] - rss_before
                up_api.append(elapsed)
                file_ids.append(file_id)
                # Bench only: make the upload downloadable (client uploads are not).
                File.objects.filter(pk=file_id).update(downloadable=True)

                rss_before = server.memory_kib()["VmRSS"]
                reset_peak(server)
                elapsed, total = timed(api_download, server, raw_key, file_id)
                assert total == size
                down_peak = server.memory_kib()["VmHWM"] - rss_before
                down_api.append(elapsed)
                peaks.append((up_peak, down_peak))

                direct_key = f"bench-direct/{size_mb}-{round_number}-{time.time_ns()}"
                up_direct.append(timed(direct_upload, s3, bucket, path, direct_key)[0])
                down_transfer.append(timed(direct_download_transfer, s3, bucket, direct_key)[0])
                down_stream.append(timed(direct_download_stream, s3, bucket, direct_key)[0])
                s3.delete_object(Bucket=bucket, Key=direct_key)

            def rate(seconds, size=size):
                return size / MB / min(seconds)

            rows = [
                ("upload", rate(up_api), rate(up_direct), "boto3 upload_file (8 MiB parts, 10 threads)"),
                ("download", rate(down_api), rate(down_transfer), "boto3 download_fileobj (ranged, 10 threads)"),
                ("download", rate(down_api), rate(down_stream), "boto3 get_object single stream"),
            ]
            for op, api_rate, direct_rate, how in rows:
                ratio = api_rate / direct_rate
                print(f"{size_mb:>4}MB {op:<9} {api_rate:>9.0f} {direct_rate:>12.0f} {ratio:>6.2f}   {how}")
            up_peak = max(p[0] for p in peaks) / 1024
            down_peak = max(p[1] for p in peaks) / 1024
            print(f"{size_mb:>4}MB server peak RSS growth: upload {up_peak:.1f} MiB, download {down_peak:.1f} MiB")
            for file_id in file_ids:
                conn = http.client.HTTPConnection("127.0.0.1", server.port)
                conn.request("DELETE", f"/v1/files/{file_id}", headers={"Authorization": f"Bearer {raw_key}"})
                conn.getresponse().read()
        conn = http.client.HTTPConnection("127.0.0.1", server.port)
        conn.request("DELETE", f"/v1/files/{warm_id}", headers={"Authorization": f"Bearer {raw_key}"})
        conn.getresponse().read()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
