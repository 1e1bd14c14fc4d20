"""Session-output publication vs. uploading the same tree with boto3 directly, side by side.

    .venv/bin/python bench/outputs_publish.py [--small 500] [--large-mb 200] [--rounds 2]

A real Docker sandbox holds the tree under /mnt/session/outputs; Mango streams it out of the
container into the store (outputs_publish). The direct baseline uploads the same bytes, held in
memory, with boto3 (put_object per small file; upload_fileobj, boto3's own multipart transfer,
for the large file). Ratio = direct time / Mango time (1.0 = as fast as direct).

Targets (issue #5): ratio >= 0.5 for 500 small files, >= 0.7 for the large file; an unchanged
re-publication of the 500 files makes zero uploads and takes under 1 s.
"""

import argparse
import io
import os
import statistics
import time

import _common

SMALL_BYTES = 4096


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    os.environ.setdefault("MANGO_SANDBOX", "docker")
    _common.setup()

    import sandboxes as sandbox
    from files import storage
    from files.models import File
    from sessions.models import Session
    from sessions.services.outputs import outputs_publish
    from sessions.services.sessions import session_delete
    from tests.factories import make_session, with_sandbox

    _, workspace = _common.api_key(f"bench-outputs-{int(time.time())}")

    def new_session() -> Session:
        return with_sandbox(make_session(workspace, name="bench", config={"type": "cloud"}))

    def sh(session: Session, command: str) -> None:
        result = sandbox.exec_command(session_id=session.id, command=command, timeout=600)
        assert result.exit_code == 0, result.output

    s3 = storage.backend().client
    bucket = storage.backend().bucket

    def direct_upload_small(blobs: dict[str, bytes]) -> float:
        started = time.perf_counter()
        for name, body in blobs.items():
            s3.put_object(Bucket=bucket, Key=f"bench-direct/{name}", Body=body)
        elapsed = time.perf_counter() - started
        for name in blobs:
            s3.delete_object(Bucket=bucket, Key=f"bench-direct/{name}")
        return elapsed

    def direct_upload_large(body: bytes) -> float:
        started = time.perf_counter()
        s3.upload_fileobj(io.BytesIO(body), bucket, "bench-direct/large.bin")
        elapsed = time.perf_counter() - started
        s3.delete_object(Bucket=bucket, Key="bench-direct/large.bin")
        return elapsed

    def fetch_tree(session: Session) -> dict[str, bytes]:
        # The same bytes as in the sandbox, for the direct baseline (read outside the timing).
        return {
            f.output_path: storage.read_bounded(key=f.object_key, max_bytes=f.size_bytes)
            for f in File.objects.filter(scope_session_id=session.id, state="ready")
        }

    print(f"== {args.small} small files ({SMALL_BYTES} B each) ==")
    small_ratios, republish_times = [], []
    for round_number in range(args.rounds):
        session = new_session()
        sh(
            session,
            f"cd /mnt/session/outputs && i=1; while [ $i -le {args.small} ]; do "
            f"dd if=/dev/urandom of=f$i.bin bs={SMALL_BYTES} count=1 2>/dev/null; i=$((i+1)); done",
        )
        started = time.perf_counter()
        report = outputs_publish(session=session)
        mango = time.perf_counter() - started
        assert len(report.added) == args.small and report.uploads == args.small, report
        direct = direct_upload_small(fetch_tree(session))

        started = time.perf_counter()
        again = outputs_publish(session=session)
        republish = time.perf_counter() - started
        assert again.uploads == 0 and len(again.unchanged) == args.small
        small_ratios.append(direct / mango)
        republish_times.append(republish)
        print(
            f"round {round_number + 1}: mango {mango:.2f}s  direct {direct:.2f}s  ratio {direct / mango:.2f}  "
            f"unchanged re-publication {republish:.3f}s with {again.uploads} uploads"
        )
        session_delete(workspace=workspace, session_id=session.id)

    print(f"== one {args.large_mb} MB file ==")
    large_ratios = []
    for round_number in range(args.rounds):
        session = new_session()
        sh(
            session,
            f"dd if=/dev/urandom of=/mnt/session/outputs/large.bin bs=1000000 count={args.large_mb} 2>/dev/null",
        )
        started = time.perf_counter()
        report = outputs_publish(session=session)
        mango = time.perf_counter() - started
        assert report.added == ["large.bin"]
        body = fetch_tree(session)["large.bin"]
        direct = direct_upload_large(body)
        del body
        large_ratios.append(direct / mango)
        mb = args.large_mb
        print(
            f"round {round_number + 1}: mango {mango:.2f}s ({mb / mango:.0f} MB/s)  "
            f"direct {direct:.2f}s ({mb / direct:.0f} MB/s)  ratio {direct / mango:.2f}"
        )
        session_delete(workspace=workspace, session_id=session.id)

    print("== summary ==")
    print(f"small files ratio (median): {statistics.median(small_ratios):.2f}  (target >= 0.5)")
    print(f"large file ratio (median):  {statistics.median(large_ratios):.2f}  (target >= 0.7)")
    print(f"unchanged re-publication:   {max(republish_times):.3f}s worst, 0 uploads  (target < 1 s)")


if __name__ == "__main__":
    main()
