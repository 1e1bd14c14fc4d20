"""Sandbox sleep and wake (issue 38): checkpoint and restore times against the raw limit.

    .venv/bin/python bench/sandbox_sleep.py [--sizes 10,100,1024] [--changed-mib 1] [--idle 200]

For each size (MiB of random data in /workspace, in files of 1 MiB to 64 MiB, plus 200 small
files), side by side in one run:

* checkpoint: ``sandbox_sleep`` (archive through dockerd, cut, hash, upload the new chunks through
  the files app, commit, remove the sandbox), as the worker runs it;
* wake: a new sandbox and the restore of the checkpoint into it (what the next tool call adds),
  and the first tool result after it (wake and one exec);
* raw: the same tree as one ``tar | zstd -1`` stream made in the sandbox and PUT to the same store,
  then GET and ``zstd -d | tar -x`` into a fresh sandbox — the limit a whole-archive design reaches;
* incremental: after ``--changed-mib`` MiB rewritten in place in the largest size, the next
  checkpoint's time and uploaded bytes.
* idle: ``--idle`` sessions (200) that each ran one tool call in a sandbox of their own, then went
  idle: their running containers and those containers' memory (the cgroups' memory.current)
  before, and after one pass of the workers' sweep (``sandboxes_sweep``) once
  MANGO_SANDBOX_SLEEP_SECONDS (1 s here) has passed; the target after is 0 and 0.
"""

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("MANGO_SANDBOX", "docker")
os.environ.setdefault("MANGO_SANDBOX_IMAGE", "mango-sandbox:bookworm")
os.environ.setdefault("MANGO_SANDBOX_WORKDIR_SIZE", "2g")
os.environ.setdefault("MANGO_SANDBOX_SLEEP_SECONDS", "1")


def _setup() -> None:
    import _common

    _common.setup()


FILL = """set -e; cd /workspace; left={size}; n=0
while [ $left -gt 0 ]; do c=$(( left < 64 ? left : 64 )); c=$(( c > 1 ? c / (1 + n % 3) : 1 ))
  head -c ${{c}}M /dev/urandom > f$n.bin; left=$((left - c)); n=$((n + 1)); done
mkdir small; for i in $(seq 200); do head -c 3000 /dev/urandom > small/$i; done"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1024")
    parser.add_argument("--changed-mib", type=int, default=1)
    parser.add_argument("--idle", type=int, default=200, help="idle sessions (0: not measured)")
    args = parser.parse_args()
    _setup()
    import sandboxes as sandbox
    from core.services import api_key_create
    from files import storage
    from sessions.models import SandboxCheckpoint, SandboxChunk, Session
    from sessions.runtime.sleep import sandbox_restore, sandbox_sleep
    from tests.factories import CLOUD_LIMITED, TOOLSET, make_session

    _row, _raw = api_key_create(workspace_name=f"bench-sleep-{uuid.uuid4().hex[:6]}")
    workspace = _row.workspace
    client = storage.backend().client
    bucket = storage.backend().bucket
    rows = []
    largest = None
    for size in [int(part) for part in args.sizes.split(",")]:
        session = make_session(workspace, name=f"sleep{size}", tools=TOOLSET, config=CLOUD_LIMITED)
        ref = sandbox.ensure(session_id=session.id, workspace_id=workspace.id, networking=None)
        Session.objects.filter(pk=session.id).update(sandbox_state="running", sandbox_ref=ref)
        result = sandbox.exec_command(session_id=session.id, command=FILL.format(size=size), timeout=900)
        assert result.exit_code == 0, result.output[-500:]
        # raw: one tar | zstd stream, PUT and GET through the same store
        started = time.perf_counter()
        stream, _ = sandbox.get_archive(session_id=session.id, path="/workspace")
        tar = subprocess.run(["zstd", "-1", "-q", "-c"], input=b"".join(stream), capture_output=True, check=True)
        key = f"bench-raw/{session.id}.tar.zst"
        client.put_object(Bucket=bucket, Key=key, Body=tar.stdout)
        raw_put = time.perf_counter() - started
        started = time.perf_counter()
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        plain = subprocess.run(["zstd", "-d", "-q", "-c"], input=body, capture_output=True, check=True).stdout
        other = f"{session.id}raw"
        sandbox.ensure(session_id=other, workspace_id=workspace.id, networking=None)
        sandbox.put_archive(
            session_id=other, directory="/", chunks=[plain[i : i + (4 << 20)] for i in range(0, len(plain), 4 << 20)]
        )
        raw_get = time.perf_counter() - started
        sandbox.remove(session_id=other)
        client.delete_object(Bucket=bucket, Key=key)
        # checkpoint and sleep, as the worker does
        started = time.perf_counter()
        assert sandbox_sleep(session_id=session.id, force=True) == "slept"
        sleep_seconds = time.perf_counter() - started
        checkpoint = SandboxCheckpoint.objects.get(session_id=session.id, state="committed")
        # wake: a new sandbox and the restore
        started = time.perf_counter()
        ref = sandbox.ensure(session_id=session.id, workspace_id=workspace.id, networking=None)
        session.refresh_from_db()
        sandbox_restore(session=session, ref=ref)
        wake_seconds = time.perf_counter() - started
        first = sandbox.exec_command(session_id=session.id, command="ls /workspace | wc -l", timeout=60)
        first_result = time.perf_counter() - started
        assert first.exit_code == 0, first.output
        Session.objects.filter(pk=session.id).update(sandbox_state="running", sandbox_ref=ref)
        rows.append((size, sleep_seconds, wake_seconds, first_result, raw_put, raw_get, checkpoint.stored_bytes))
        largest = session
    # incremental: a few MiB rewritten in place in the largest
    change = f"dd if=/dev/urandom of=/workspace/f0.bin bs=1M count={args.changed_mib} seek=3 conv=notrunc 2>/dev/null"
    assert sandbox.exec_command(session_id=largest.id, command=change, timeout=60).exit_code == 0
    before = set(SandboxChunk.objects.filter(session_id=largest.id).values_list("id", flat=True))
    started = time.perf_counter()
    assert sandbox_sleep(session_id=largest.id, force=True) == "slept"
    incremental = time.perf_counter() - started
    new = SandboxChunk.objects.filter(session_id=largest.id).exclude(id__in=before)
    uploaded = sum(new.values_list("size_bytes", flat=True))

    print(f"sandbox sleep/wake, image {os.environ['MANGO_SANDBOX_IMAGE']}, store {storage.backend().bucket}")
    print(
        f"{'MiB':>6} {'checkpoint s':>13} {'wake s':>8} {'1st result s':>13} {'raw PUT s':>10} {'raw GET s':>10}"
        f" {'stored MiB':>11}"
    )
    for size, sleep_seconds, wake_seconds, first_result, raw_put, raw_get, stored in rows:
        print(
            f"{size:>6} {sleep_seconds:>13.2f} {wake_seconds:>8.2f} {first_result:>13.2f} {raw_put:>10.2f}"
            f" {raw_get:>10.2f} {stored / 2**20:>11.1f}"
        )
    print(
        f"incremental: {args.changed_mib} MiB changed in {rows[-1][0]} MiB: checkpoint {incremental:.2f} s, "
        f"{uploaded / 2**20:.1f} MiB uploaded in {new.count()} chunks"
    )
    for session in Session.objects.filter(workspace=workspace):
        sandbox.remove(session_id=session.id)
    if args.idle:
        _idle(workspace, args.idle)


def _idle(workspace, count: int) -> None:
    """`count` sessions that each ran one tool call, idle: their containers and memory before
    and after the sleep setting and one sweep."""
    import docker

    import sandboxes as sandbox
    from sessions.models import Session
    from sessions.runtime.sleep import sandboxes_sweep
    from tests.factories import CLOUD_LIMITED, TOOLSET, make_session

    client = docker.from_env()
    started = time.perf_counter()
    ids = []
    for n in range(count):
        session = make_session(workspace, name=f"idle{n}", tools=TOOLSET, config=CLOUD_LIMITED)
        ref = sandbox.ensure(session_id=session.id, workspace_id=workspace.id, networking=None)
        Session.objects.filter(pk=session.id).update(sandbox_state="running", sandbox_ref=ref)
        result = sandbox.exec_command(session_id=session.id, command="echo one > /workspace/one.txt", timeout=60)
        assert result.exit_code == 0, result.output
        ids.append(session.id)
    made = time.perf_counter() - started
    Session.objects.filter(pk__in=ids).update(status="idle", runner_token=None)
    before = _containers(client, workspace.id)
    time.sleep(float(os.environ["MANGO_SANDBOX_SLEEP_SECONDS"]) + 1)
    started = time.perf_counter()
    swept = {"slept": 0}
    while swept["slept"] < count:  # the sweep sleeps at most 200 a pass
        done = sandboxes_sweep()
        if not done["slept"]:
            break
        swept["slept"] += done["slept"]
    sweep = time.perf_counter() - started
    after = _containers(client, workspace.id)
    asleep = Session.objects.filter(pk__in=ids, sandbox_state="sleeping").count()
    print(
        f"idle: {count} sessions with one tool call each (made in {made:.0f} s): running containers"
        f" {before[0]}, their memory {before[1] / 2**20:.1f} MiB; after the sleep setting and the sweep"
        f" ({sweep:.1f} s, {asleep} asleep): {after[0]} containers, {after[1] / 2**20:.1f} MiB"
    )
    for session_id in ids:
        sandbox.remove(session_id=session_id)


def _containers(client, workspace_id: str) -> tuple[int, int]:
    """The workspace's running containers and the sum of their memory cgroups' usage (read on this
    host: cgroup v2 or v1 with the cgroupfs driver; else dockerd's stats, a second each)."""
    found = client.containers.list(filters={"label": f"mango.workspace={workspace_id}", "status": "running"})
    memory = 0
    for container in found:
        for path in (
            f"/sys/fs/cgroup/docker/{container.id}/memory.current",
            f"/sys/fs/cgroup/system.slice/docker-{container.id}.scope/memory.current",
            f"/sys/fs/cgroup/memory/docker/{container.id}/memory.usage_in_bytes",
        ):
            if os.path.exists(path):
                memory += int(Path(path).read_text())
                break
        else:
            memory += container.stats(stream=False).get("memory_stats", {}).get("usage", 0)
    return len(found), memory


if __name__ == "__main__":
    main()
