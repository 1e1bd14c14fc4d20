"""Memory write-back at idle vs. output publication of the same tree, side by side.

    .venv/bin/python bench/memory_writeback.py [--files 500] [--bytes 4096] [--rounds 2]

One real Docker sandbox holds two trees of `--files` text files of `--bytes` each: one under
/mnt/session/outputs, one in a read_write memory store mounted at /mnt/memory/<name>. Each
round times the idle hooks back to back on the same sandbox: outputs_publish_at_idle (the files
to the object store as session Files) and memory_writeback_at_idle (the files as memory
versions in PostgreSQL). A round first creates every file, then rewrites every file (500
created, then 500 modified). Difference = memory time - outputs time.

Target (issue #25): write-back of 500 changed memories costs at most 1 s more than publishing
500 outputs of the same sizes.
"""

import argparse
import os
import statistics
import time

import _common

TARGET_EXTRA_SECONDS = 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    os.environ.setdefault("MANGO_SANDBOX", "docker")
    os.environ.setdefault("MANGO_MEMORY_STORE_MAX_MEMORIES", str(max(2000, args.files)))
    _common.setup()

    from django.db import transaction

    import sandboxes as sandbox
    from memory.models import Memory
    from memory.services import memory_store_create
    from sessions.models import Session
    from sessions.services.memory_mounts import memory_writeback_at_idle, session_memory_place
    from sessions.services.outputs import outputs_publish_at_idle
    from sessions.services.resources import session_memory_stores_attach
    from sessions.services.sessions import session_delete
    from tests.factories import make_session, with_sandbox

    _, workspace = _common.api_key(f"bench-memory-{int(time.time())}")

    def sh(session: Session, command: str) -> None:
        result = sandbox.exec_command(session_id=session.id, command=command, timeout=600)
        assert result.exit_code == 0, result.output

    def fill(session: Session, directory: str, tag: str) -> None:
        # Text files of exactly --bytes bytes: a tag line, then base64 of random bytes.
        sh(
            session,
            f"cd {directory} && i=1; while [ $i -le {args.files} ]; do "
            f"{{ echo {tag}$i; head -c {args.bytes * 3 // 4} /dev/urandom | base64 -w0; }} | head -c {args.bytes}"
            f" > f$i.md; i=$((i+1)); done",
        )

    results = {"created": [], "modified": []}
    for round_number in range(args.rounds):
        session = with_sandbox(make_session(workspace, name="bench", config={"type": "cloud"}))
        store = memory_store_create(
            workspace=workspace, name=f"bench memory {round_number}", description="", metadata={}
        )
        with transaction.atomic():
            (attachment,) = session_memory_stores_attach(
                session=session, params=[{"memory_store_id": store.id, "access": "read_write"}]
            )
        session_memory_place(session=session, ref=session.sandbox_ref)
        for operation, tag in (("created", "a"), ("modified", "b")):
            fill(session, "/mnt/session/outputs", tag)
            fill(session, attachment.mount_path, tag)
            started = time.perf_counter()
            outputs_publish_at_idle(session=session, interrupted=False)
            outputs = time.perf_counter() - started
            started = time.perf_counter()
            report = memory_writeback_at_idle(session=session)
            memory = time.perf_counter() - started
            changed = getattr(report, operation)
            assert len(changed) == args.files and not report.problems, report
            assert Memory.objects.filter(store=store).count() == args.files
            results[operation].append((outputs, memory))
            print(
                f"round {round_number + 1} {args.files} {operation}: outputs {outputs:.2f}s  memory {memory:.2f}s  "
                f"difference {memory - outputs:+.2f}s"
            )
        started = time.perf_counter()
        report = memory_writeback_at_idle(session=session)
        unchanged = time.perf_counter() - started
        assert report.unchanged == args.files and not (report.created or report.modified), report
        print(f"round {round_number + 1} unchanged write-back: {unchanged:.3f}s, 0 versions")
        session_delete(workspace=workspace, session_id=session.id)

    print("== summary ==")
    for operation, pairs in results.items():
        extra = statistics.median(memory - outputs for outputs, memory in pairs)
        worst = max(memory - outputs for outputs, memory in pairs)
        print(
            f"{args.files} {operation} ({args.bytes} B each): memory - outputs median {extra:+.2f}s,"
            f" worst {worst:+.2f}s"
            f"  (target <= +{TARGET_EXTRA_SECONDS:.0f} s)"
        )


if __name__ == "__main__":
    main()
