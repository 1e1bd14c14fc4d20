"""Sandbox cold start: create + start + first exec of a session's Docker sandbox, median of N.

    .venv/bin/python bench/sandbox_start.py [--runs 20] [--networking none|unrestricted|both]

Each run is a new session id: ``sandbox.ensure`` (volumes, network, container, start) and then
``exec_command("true")``, timed together; the sandbox is removed (untimed) before the next run.
Issue #14 wants the median at or under 1 s. Other benches may import ``cold_start_seconds``.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("MANGO_SANDBOX", "docker")
    import django

    django.setup()


def cold_start_seconds(*, runs: int, networking: dict | None) -> list[float]:
    """One timing per run (seconds); every sandbox made here is removed again."""
    from sessions import sandbox

    timings = []
    for index in range(runs):
        session_id = f"sesn_bench{os.getpid()}x{index}x{time.time_ns()}"
        try:
            started = time.perf_counter()
            sandbox.ensure(session_id=session_id, workspace_id="wrkspc_bench_sandbox", networking=networking)
            result = sandbox.exec_command(session_id=session_id, command="true", timeout=60)
            timings.append(time.perf_counter() - started)
            assert result.exit_code == 0, result
        finally:
            sandbox.remove(session_id=session_id)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--networking", choices=["none", "unrestricted", "both"], default="both")
    args = parser.parse_args()
    _setup()
    kinds = ["none", "unrestricted"] if args.networking == "both" else [args.networking]
    for kind in kinds:
        networking = {"type": "unrestricted"} if kind == "unrestricted" else None
        cold_start_seconds(runs=1, networking=networking)  # warm the client and the image cache
        timings = cold_start_seconds(runs=args.runs, networking=networking)
        print(
            f"sandbox cold start (networking={kind}, {args.runs} runs): median {statistics.median(timings):.3f} s, "
            f"min {min(timings):.3f} s, max {max(timings):.3f} s (target <= 1 s)"
        )


if __name__ == "__main__":
    main()
