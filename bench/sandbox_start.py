"""Sandbox cold start: create + start + first exec of a session's Docker sandbox, median of N.

    .venv/bin/python bench/sandbox_start.py [--runs 10] [--networking none|unrestricted|both]
        [--concurrent 50,200] [--no-packages]

Each run is a new session id: ``sandbox.ensure`` (volumes, network, container, start) and then
``exec_command("true")``, timed together; the sandbox is removed (untimed) before the next run.
Issue #14 wants the median at or under 1 s. Issue #22 adds, side by side in the same run, on
MANGO_SANDBOX_IMAGE (the real image by default, whose size is printed): a session whose
environment's packages (apt, pip, npm) come from the cached derived image (``prepare_image``
timed too; the one build is untimed and reported), which must stay within 1.5x the plain start,
and a `limited` sandbox with an allow-list (its egress proxy container started too). Other
benches may import ``cold_start_seconds``.

``--repository-runs N`` (default 10; 0 skips): the cold start of a sandbox that also gets a
repository resource, cloned by the worker's code (sessions/runtime/repositories.py) from a git
smart-HTTP server on loopback (tests/git_server.py) and streamed in, against the plain start.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _setup() -> None:
    """The bench database and settings every bench uses (bench/_common.py: a secret key, a vault
    key, the bench bucket), so that it runs outside `make run`'s .env too."""
    os.environ.setdefault("MANGO_SANDBOX", "docker")
    import _common

    _common.setup()


PACKAGES = {"apt": ["tree"], "pip": ["iniconfig==2.0.0"], "npm": ["is-number@7.0.0"]}


def cold_start_seconds(*, runs: int, networking: dict | None, packages_config: dict | None = None) -> list[float]:
    """One timing per run (seconds); every sandbox made here is removed again. With
    `packages_config`, the image lookup (``prepare_image``) is timed with the start."""
    import sandboxes as sandbox

    timings = []
    for index in range(runs):
        session_id = f"sesn_bench{os.getpid()}x{index}x{time.time_ns()}"
        try:
            started = time.perf_counter()
            image = None
            if packages_config:
                image = sandbox.prepare_image(
                    session_id=session_id,
                    workspace_id="wrkspc_bench_sandbox",
                    networking=networking,
                    packages_config=packages_config,
                )
            sandbox.ensure(
                session_id=session_id, workspace_id="wrkspc_bench_sandbox", networking=networking, image=image
            )
            result = sandbox.exec_command(session_id=session_id, command="true", timeout=60)
            timings.append(time.perf_counter() - started)
            assert result.exit_code == 0, result
        finally:
            sandbox.remove(session_id=session_id)
    return timings


def concurrent_starts(count: int) -> tuple[list[float], float]:
    """`count` sandboxes started at once from as many threads (as a threads-pool worker starts
    them when that many sessions make their first tool call together): each one's create + start
    + first exec, and the wall time for all. Every sandbox is removed afterwards."""
    import threading

    import sandboxes as sandbox

    stamp = time.time_ns()
    ids = [f"sesn_bench{os.getpid()}c{index}x{stamp}" for index in range(count)]
    timings: list[float] = []
    errors: list[str] = []
    gate = threading.Barrier(count + 1)

    def one(session_id: str) -> None:
        gate.wait()
        started = time.perf_counter()
        try:
            sandbox.ensure(session_id=session_id, workspace_id="wrkspc_bench_sandbox", networking=None)
            sandbox.exec_command(session_id=session_id, command="true", timeout=300)
            timings.append(time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 — reported, and the others go on
            errors.append(repr(exc))

    threads = [threading.Thread(target=one, args=(session_id,)) for session_id in ids]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    removers = [threading.Thread(target=sandbox.remove, kwargs={"session_id": i}) for i in ids]
    for thread in removers:
        thread.start()
    for thread in removers:
        thread.join()
    if errors:
        print(f"  {len(errors)} of {count} failed, e.g. {errors[0]}")
    return timings, wall


def repository_start_seconds(*, runs: int, files: int = 200, file_bytes: int = 8192) -> tuple[list[float], str]:
    """One timing per run: sandbox.ensure + the clone and placement of a repository of `files`
    files (a depth-1 branch clone, as the worker makes it) + the first exec."""
    import logging
    import secrets
    import tempfile

    from django.conf import settings

    import sandboxes as sandbox
    from core.secrets import encrypt, generate_key
    from sessions.runtime.repositories import clone_and_place
    from sessions.selectors.runner import RepositoryToClone
    from tests.git_server import GitServer

    logging.getLogger("dulwich").setLevel(logging.WARNING)
    token = secrets.token_urlsafe(16)
    port = int(os.environ.get("BENCH_GIT_PORT", "8820"))
    settings.MANGO_OUTBOUND_PRIVATE_HOSTS = [f"127.0.0.1:{port}"]
    settings.MANGO_VAULT_KEY = list(settings.MANGO_VAULT_KEY) or [generate_key()]
    with tempfile.TemporaryDirectory() as root:
        server = GitServer(Path(root), port=port, tokens={token})
        tree = {f"src/module_{n:03}.py": os.urandom(file_bytes // 2).hex().encode() for n in range(files)}
        server.add_repository("app", commits={"main": [tree]})
        server.start()
        repository = RepositoryToClone(
            id="sesrsc_bench",
            url=server.url("app"),
            checkout={"type": "branch", "name": "main"},
            mount_path="/workspace/app",
            sealed_token=encrypt(token),
        )
        timings = []
        try:
            for index in range(runs + 1):  # the first warms the client and the image cache
                session_id = f"sesn_bench{os.getpid()}r{index}x{time.time_ns()}"
                try:
                    started = time.perf_counter()
                    sandbox.ensure(session_id=session_id, workspace_id="wrkspc_bench_sandbox", networking=None)
                    failure = clone_and_place(
                        session_id=session_id,
                        workspace_id="wrkspc_bench_sandbox",
                        repository=repository,
                        should_stop=lambda: False,
                        fresh=True,
                    )
                    result = sandbox.exec_command(
                        session_id=session_id, command="test -f /workspace/app/src/module_000.py", timeout=60
                    )
                    elapsed = time.perf_counter() - started
                    assert failure is None and result.exit_code == 0, (failure, result)
                    if index:
                        timings.append(elapsed)
                finally:
                    sandbox.remove(session_id=session_id)
        finally:
            server.stop()
    return timings, f"{files} files, {files * file_bytes // 1024} KiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-packages", action="store_true", help="skip the packages and limited rows")
    parser.add_argument("--networking", choices=["none", "unrestricted", "both"], default="both")
    # Also start this many sandboxes at once (0: skip), e.g. --concurrent 50,200.
    parser.add_argument("--concurrent", default="0")
    parser.add_argument("--repository-runs", type=int, default=10)
    args = parser.parse_args()
    _setup()
    for count in [int(n) for n in args.concurrent.split(",") if int(n) > 0]:
        timings, wall = concurrent_starts(count)
        if timings:
            print(
                f"{count} sandboxes started at once (networking=none): all ready in {wall:.1f} s; each "
                f"create + start + first exec median {statistics.median(timings):.2f} s, max {max(timings):.2f} s"
            )
    kinds = ["none", "unrestricted"] if args.networking == "both" else [args.networking]
    if args.runs <= 0:
        return
    import docker
    from django.conf import settings

    client = docker.from_env()
    image = client.images.get(settings.MANGO_SANDBOX_IMAGE)
    print(f"sandbox image {settings.MANGO_SANDBOX_IMAGE}: {image.attrs['Size'] / 1024 / 1024:.0f} MiB")
    medians = {}
    for kind in kinds:
        networking = {"type": "unrestricted"} if kind == "unrestricted" else None
        cold_start_seconds(runs=1, networking=networking)  # warm the client and the image cache
        timings = cold_start_seconds(runs=args.runs, networking=networking)
        medians[kind] = statistics.median(timings)
        print(
            f"sandbox cold start (networking={kind}, {args.runs} runs): median {statistics.median(timings):.3f} s, "
            f"min {min(timings):.3f} s, max {max(timings):.3f} s (target <= 1 s)"
        )
    if args.repository_runs > 0:
        plain = statistics.median(cold_start_seconds(runs=args.repository_runs, networking=None))
        timings, size = repository_start_seconds(runs=args.repository_runs)
        median = statistics.median(timings)
        print(
            f"sandbox cold start with a repository resource ({size}, depth-1 clone from loopback; "
            f"{args.repository_runs} runs): median {median:.3f} s vs plain {plain:.3f} s ({median / plain:.2f}x)"
        )
    if args.no_packages:
        return
    _packages_rows(client, args.runs, medians)


def _packages_rows(client, runs: int, medians: dict) -> None:
    """Plain, cached-packages and limited-with-proxy starts, side by side (unrestricted, as the
    packages' build needs a registry)."""
    import sandboxes as sandbox
    from sandboxes import packages

    unrestricted = {"type": "unrestricted"}
    plain = medians.get("unrestricted") or statistics.median(cold_start_seconds(runs=runs, networking=unrestricted))
    started = time.perf_counter()
    warm_id = f"sesn_bench{os.getpid()}warm{time.time_ns()}"
    try:
        sandbox.prepare_image(
            session_id=warm_id, workspace_id="wrkspc_bench_sandbox", networking=unrestricted, packages_config=PACKAGES
        )
    finally:
        sandbox.remove(session_id=warm_id)
    build = time.perf_counter() - started
    try:
        cached = statistics.median(cold_start_seconds(runs=runs, networking=unrestricted, packages_config=PACKAGES))
        print(
            f"packages {PACKAGES}: built once in {build:.1f} s (0 s when already cached); cold start from the cache "
            f"median {cached:.3f} s = {cached / plain:.2f}x the plain unrestricted start {plain:.3f} s (target <= 1.5x)"
        )
    finally:
        for found in client.images.list(
            name=packages.REPOSITORY, filters={"label": "mango.workspace=wrkspc_bench_sandbox"}
        ):
            client.images.remove(found.id, force=True)
    limited = {"type": "limited", "allowed_hosts": ["example.com"]}
    proxied = statistics.median(cold_start_seconds(runs=runs, networking=limited))
    print(
        f"limited with an allow-list (sandbox + egress proxy): median {proxied:.3f} s = {proxied / plain:.2f}x "
        f"the plain unrestricted start"
    )


if __name__ == "__main__":
    main()
