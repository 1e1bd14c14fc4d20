"""Crash campaign: SIGKILL a process at random points wherever PostgreSQL and the object store
are both touched, restart, reconcile, and check the invariants after every kill.

    .venv/bin/python bench/crash_campaign.py [--points 100] [--seed N] [--no-outputs] [--only memory]

Each point forks a child process (a real process with its own PostgreSQL sessions, its own
intent owner — files/liveness.py — and its own S3 and Docker clients) that runs one operation
with MANGO_TEST_CRASH_POINT set to one of the `crash_point()`s on its path (core/crashpoints.py),
or kills itself after a random number of upload bytes. The operations: uploads (random byte
offsets and every intent transition, single PUT and multipart), deletes, resource copies,
expiry, session-output publication (small-file batches, multipart, the visibility swap, the
cleanup of the hidden Files), memory write-back at idle (before and after each file's commit),
and reconciliation itself (after first leaving interrupted work).

After each kill this process plays the restarted server: it runs reconciliation as startup does
(the default grace window: only owner liveness lets it finish the dead child's work at once),
re-runs an interrupted output publication as the resumed turn would, and then counts:

* visible Files without their bytes (missing object, or a size or SHA-256 that differs),
* objects without a File row or an open intent, open multipart uploads, open intents, hidden
  (`deleting`) rows left,
* ready Files lost (ready before the point and not something the operation was deleting),
* output sets that were half-swapped when the process died, or that differ from the last tree
  whose publication completed (the tree the idle event is committed for);
* memories lost (a path neither deleted by the tree nor holding its old or its new content at
  the kill), half-written versions (a memory whose current version is not its latest, or whose
  content, path or SHA-256 differs from it; a version whose SHA-256 is not its content's; a
  memory gone without a `deleted` version), and, after the resumed write-back, a store (or the
  session's baseline) that differs from the sandbox's tree.

Standalone it uses the bench database and bucket (bench/_common.py); tests call run() inside
their own test database. Exit status 1 if any count is not 0.
"""

import argparse
import hashlib
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OUT = "/mnt/session/outputs"
MEMORY_DIR = "/mnt/memory/campaign-memory"
MEMORY_BATCH_FILES = 2
SMALL_MAX = 256 * 1024
PART = 8 * 1024 * 1024
COUNTS = (
    "visible Files without bytes",
    "size/SHA-256 mismatches",
    "objects without a row or open intent",
    "open multipart uploads",
    "open intents after reconcile",
    "hidden rows left",
    "ready Files lost",
    "outputs half-swapped at the kill",
    "outputs differing from the last idle tree",
    "committed memories lost",
    "half-written memory versions visible",
    "memories differing from the last idle tree",
)


@dataclass
class Point:
    operation: str
    crash: str  # a crash_point name, name@N, or "bytes@N" (die after N upload bytes)
    detail: str = ""


@dataclass
class Result:
    points: int = 0
    killed: int = 0
    not_reached: int = 0
    child_errors: int = 0
    by_operation: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(self.counts[name] for name in COUNTS) + self.child_errors


# --- the child ---------------------------------------------------------------------------------


def _in_child(crash: str, operation) -> int:
    """Fork; in the child, reset what must not be shared, arm the crash point, run."""
    from django.db import connections

    connections.close_all()  # the child must not inherit (and later close) our sessions
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            import sandboxes as sandbox

            sandbox._backend = None  # (the object store's backend forgets itself at fork)
            if not crash.startswith("bytes@"):
                os.environ["MANGO_TEST_CRASH_POINT"] = crash
            operation()
        except BaseException:  # noqa: BLE001 — reported by the exit status
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    _wait_sessions_gone(pid)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _wait_sessions_gone(pid: int, timeout: float = 10.0) -> None:
    """A restart takes longer than PostgreSQL needs to notice that a killed process's sessions
    are gone; here the "restart" is immediate, so wait for that explicitly (its owner lock)."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [f"mango-intent-owner-{pid}"]
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.02)


def _chunks(data: bytes, crash: str):
    """The upload's bytes as a client sends them; `bytes@N`: the process dies after N."""
    limit = int(crash.split("@")[1]) if crash.startswith("bytes@") else None
    sent = 0
    step = 64 * 1024
    for start in range(0, len(data), step):
        chunk = data[start : start + step]
        if limit is not None and sent + len(chunk) > limit:
            yield chunk[: limit - sent]
            os.kill(os.getpid(), signal.SIGKILL)
        sent += len(chunk)
        yield chunk


# --- the campaign ------------------------------------------------------------------------------


class Campaign:
    def __init__(self, *, seed: int, outputs: bool, log=print, only: str | None = None):
        from core.models import Workspace

        self.rng = random.Random(seed)
        self.log = log
        self.workspace, _ = Workspace.objects.get_or_create(name=f"crash-campaign-{seed}-{os.getpid()}")
        self.sha_cache: dict[str, str] = {}
        self.session = self._new_session() if outputs else None
        self.memory_store_id = self._attach_memory() if outputs else None
        self.idle_tree: dict[str, str] = {}
        self.result = Result()
        self.only = only

    # setup ---------------------------------------------------------------------------------

    def _new_session(self):
        from tests.factories import CLOUD_LIMITED, TOOLSET, make_session, with_sandbox

        return with_sandbox(make_session(self.workspace, name="campaign", tools=TOOLSET, config=CLOUD_LIMITED))

    def _attach_memory(self) -> str:
        """A read_write memory store with a few memories, attached to the session and placed in
        its sandbox, as at the session's first tool call."""
        from django.db import transaction

        from memory.services import memory_create, memory_store_create
        from sessions.services.memory_mounts import session_memory_place
        from sessions.services.resources import session_memory_stores_attach

        store = memory_store_create(workspace=self.workspace, name="campaign memory", description="", metadata={})
        actor = {"type": "api_actor", "api_key_id": "apikey_campaign"}
        for n in range(5):
            memory_create(
                workspace=self.workspace, memory_store_id=store.id, path=f"/m{n}.md", content=f"seed {n}", actor=actor
            )
        with transaction.atomic():
            session_memory_stores_attach(
                session=self.session, params=[{"memory_store_id": store.id, "access": "read_write"}]
            )
        session_memory_place(session=self.session, ref=self.session.sandbox_ref)
        return store.id

    def close(self) -> None:
        if self.session is not None:
            import sandboxes as sandbox

            sandbox.remove(session_id=self.session.id)

    def _data(self, size: int) -> bytes:
        return self.rng.randbytes(size)

    def _top_level(self, count: int = 3) -> list:
        """At least `count` ready top-level Files to delete, copy or expire."""
        from files import services
        from files.models import File

        files = list(File.objects.filter(workspace=self.workspace, state="ready", scope_session_id__isnull=True))
        while len(files) < count:
            data = self._data(self.rng.randint(1, SMALL_MAX))
            files.append(
                services.file_upload_stream(
                    workspace=self.workspace, chunks=[data], filename=f"seed-{len(files)}.bin", mime_type="x/y"
                )
            )
        return files

    def _trim(self) -> None:
        """Keep the store small: delete the largest top-level Files beyond 40 MB in all."""
        from files import services
        from files.models import File

        files = list(
            File.objects.filter(workspace=self.workspace, state="ready", scope_session_id__isnull=True).order_by(
                "-size_bytes"
            )
        )
        total = sum(f.size_bytes for f in files)
        for file in files:
            if total <= 40 * 1024 * 1024 and len(files) <= 30:
                break
            services.file_delete(file=file)
            total -= file.size_bytes
            files = files[1:]

    # outputs tree ----------------------------------------------------------------------------

    def _sh(self, command: str) -> str:
        import sandboxes as sandbox

        result = sandbox.exec_command(session_id=self.session.id, command=command, timeout=120)
        if result.exit_code != 0:
            raise RuntimeError(result.output.decode(errors="replace"))
        return result.output.decode()

    def _tree(self) -> dict[str, str]:
        out = self._sh(f"cd {OUT} && find . -type f -exec sha256sum {{}} + || true")
        tree = {}
        for line in out.splitlines():
            digest, _, path = line.partition("  ")
            if digest:
                tree[path.removeprefix("./")] = digest
        return tree

    def _visible_outputs(self) -> dict[str, str]:
        from files.models import File

        return {
            f.output_path: f.sha256
            for f in File.objects.filter(scope_session_id=self.session.id, origin="session_output", state="ready")
        }

    def _mutate_tree(self, *, big: bool) -> int:
        """Add, rewrite and remove files under the outputs directory; returns how many files
        the next publication uploads."""
        tree = self._tree()
        commands, changed = [], 0
        for _ in range(self.rng.randint(1, 6)):
            name = f"f{self.rng.randint(0, 24)}.txt"
            commands.append(f"head -c {self.rng.randint(1, 40_000)} /dev/urandom > {OUT}/{name}")
        for path in self.rng.sample(sorted(tree), k=min(len(tree), self.rng.randint(0, 2))):
            if not path.startswith("big"):
                commands.append(f"rm -f {OUT}/{path}")
        if big:
            commands.append(f"head -c {PART + self.rng.randint(1, 3 * 1024 * 1024)} /dev/urandom > {OUT}/big.bin")
        self._sh(" && ".join(commands))
        new = self._tree()
        changed = sum(1 for path, digest in new.items() if tree.get(path) != digest)
        return changed

    # invariants ----------------------------------------------------------------------------

    def _sha(self, key: str) -> str:
        from files import storage

        if key not in self.sha_cache:
            digest = hashlib.sha256()
            for chunk in storage.iter_object(storage.open_object(key=key)):
                digest.update(chunk)
            self.sha_cache[key] = digest.hexdigest()
        return self.sha_cache[key]

    def _ready_ids(self) -> set[str]:
        from files.models import File

        return set(File.objects.filter(workspace=self.workspace, state="ready").values_list("id", flat=True))

    def _check(self, *, before: set[str], may_vanish: set[str]) -> Counter:
        from files import storage
        from files.models import File, StorageIntent

        counts = Counter()
        keys = {o["key"]: o["size"] for o in storage.list_objects(prefix=storage.workspace_prefix(self.workspace.id))}
        rows = list(File.objects.filter(workspace=self.workspace))
        for file in rows:
            if file.state != "ready":
                counts["hidden rows left"] += 1
            elif file.object_key not in keys:
                counts["visible Files without bytes"] += 1
            elif keys[file.object_key] != file.size_bytes or self._sha(file.object_key) != file.sha256:
                counts["size/SHA-256 mismatches"] += 1
        open_keys = set(
            StorageIntent.objects.filter(workspace=self.workspace, state="open").values_list("object_key", flat=True)
        )
        counts["open intents after reconcile"] += len(open_keys)
        row_keys = {file.object_key for file in rows}
        counts["objects without a row or open intent"] += len(set(keys) - row_keys - open_keys)
        counts["open multipart uploads"] += len(
            list(storage.list_multipart_uploads(prefix=storage.workspace_prefix(self.workspace.id)))
        )
        ready = {file.id for file in rows if file.state == "ready"}
        counts["ready Files lost"] += len((before - may_vanish) - ready)
        return counts

    # points ----------------------------------------------------------------------------------

    def _upload_point(self) -> tuple[Point, callable, set[str]]:
        from files import services

        multipart = self.rng.random() < 0.35
        size = self.rng.randint(PART + 1, 2 * PART + 4 * 1024 * 1024) if multipart else self.rng.randint(0, SMALL_MAX)
        choices = ["upload_intent_opened", "upload_object_stored", "upload_before_commit", "upload_after_commit"]
        choices += ["bytes@"] * 3
        if multipart:
            choices += ["upload_multipart_started", f"upload_part_stored@{self.rng.randint(1, size // PART)}"]
        crash = self.rng.choice(choices)
        if crash == "bytes@":
            crash = f"bytes@{self.rng.randint(0, max(size - 1, 0))}"
        data = self._data(size)

        def operation():
            services.file_upload_stream(
                workspace=self.workspace, chunks=_chunks(data, crash), filename="campaign.bin", mime_type="x/y"
            )

        return Point("upload", crash, f"{size} bytes"), operation, set()

    def _delete_point(self):
        from files import services

        file = self.rng.choice(self._top_level())
        crash = self.rng.choice(["delete_after_hide", "delete_object_deleted"])
        return Point("delete", crash), lambda: services.file_delete(file=file), {file.id}

    def _copy_point(self):
        from files import services

        source = self.rng.choice(self._top_level())
        crash = self.rng.choice(
            ["copy_intent_opened", "copy_object_stored", "upload_before_commit", "upload_after_commit"]
        )
        return (
            Point("resource copy", crash),
            lambda: services.file_copy(source=source, scope_session_id="sesn_campaign"),
            set(),
        )

    def _expire_point(self):
        from django.utils import timezone

        from files import services
        from files.models import File

        files = self.rng.sample(self._top_level(4), k=self.rng.randint(1, 3))
        File.objects.filter(pk__in=[f.pk for f in files]).update(expires_at=timezone.now() - timedelta(seconds=1))
        crash = self.rng.choice(["expire_after_hide", f"delete_object_deleted@{self.rng.randint(1, len(files))}"])
        return Point("expiry", crash, f"{len(files)} expired"), services.files_expire, {f.id for f in files}

    def _outputs_point(self):
        from sessions.services.outputs import outputs_publish_at_idle

        big = self.rng.random() < 0.25
        changed = self._mutate_tree(big=big)
        current = set(self._visible_outputs())
        choices = ["stager_intents_opened", "outputs_before_apply", "outputs_after_swap"]
        if changed:
            choices.append(f"stager_object_stored@{self.rng.randint(1, changed)}")
        if big:
            choices += ["upload_multipart_started", "upload_part_stored@1"]
        if current:
            choices.append(f"delete_object_deleted@{self.rng.randint(1, 2)}")
        crash = self.rng.choice(choices)
        session = self.session
        may_vanish = {
            f_id
            for f_id in self._output_ids()  # replaced and removed outputs are hidden on purpose
        }
        return (
            Point("outputs", crash, f"{changed} changed{' +multipart' if big else ''}"),
            lambda: outputs_publish_at_idle(session=session, interrupted=False),
            may_vanish,
        )

    def _memory_tree(self) -> dict[str, str]:
        out = self._sh(f"cd {MEMORY_DIR} && find . -type f -exec sha256sum {{}} + || true")
        tree = {}
        for line in out.splitlines():
            digest, _, path = line.partition("  ")
            if digest:
                tree[path.removeprefix(".")] = digest
        return tree

    def _memories(self) -> dict[str, str]:
        from memory.models import Memory

        return dict(Memory.objects.filter(store_id=self.memory_store_id).values_list("path", "content_sha256"))

    def _mutate_memory(self) -> int:
        """Write, rewrite and remove text files in the store's directory; returns how many paths
        the next write-back changes."""
        tree = self._memory_tree()
        commands = []
        for _ in range(self.rng.randint(1, 6)):
            folder = self.rng.choice(["", "/d1", "/d2/e"])
            commands.append(f"mkdir -p {MEMORY_DIR}{folder}")
            name = f"{MEMORY_DIR}{folder}/m{self.rng.randint(0, 20)}.md"
            commands.append(f"head -c {self.rng.randint(0, 30_000)} /dev/urandom | base64 > {name}")
        for path in self.rng.sample(sorted(tree), k=min(len(tree), self.rng.randint(0, 3))):
            commands.append(f"rm -f {MEMORY_DIR}{path}")
        self._sh(" && ".join(commands))
        new = self._memory_tree()
        return sum(1 for path in set(tree) | set(new) if tree.get(path) != new.get(path))

    def _memory_point(self):
        from sessions.services.memory_mounts import memory_writeback_at_idle

        changed = self._mutate_memory()
        where = self.rng.choice(["memory_writeback_before_commit", "memory_writeback_after_commit"])
        batches = max(1, -(-changed // MEMORY_BATCH_FILES))
        crash = f"{where}@{self.rng.randint(1, batches)}"
        session = self.session

        def operation():
            from django.conf import settings

            settings.MANGO_MEMORY_WRITEBACK_BATCH_FILES = MEMORY_BATCH_FILES  # several commits per write-back
            memory_writeback_at_idle(session=session)

        return Point("memory", crash, f"{changed} changed"), operation, set()

    def _check_memory(self, before: dict[str, str], new_tree: dict[str, str]) -> Counter:
        """At the kill: every path holds its old or its new content (a path gone only if the tree
        removed it), and the version log is whole. After the resumed write-back: the store and
        the baseline equal the tree."""
        import hashlib as _hashlib

        from memory.models import Memory, MemoryVersion
        from sessions.models import SessionMemoryStore
        from sessions.services.memory_mounts import memory_writeback_at_idle

        counts = Counter()
        now = self._memories()
        for path in set(before) | set(now):
            if now.get(path) not in (before.get(path), new_tree.get(path)):
                counts["committed memories lost"] += 1
        latest: dict[str, MemoryVersion] = {}
        for version in MemoryVersion.objects.filter(store_id=self.memory_store_id).order_by("id"):
            latest[version.memory_id] = version
            if version.content is not None:
                digest = _hashlib.sha256(version.content.encode()).hexdigest()
                if digest != version.content_sha256 or len(version.content.encode()) != version.content_size_bytes:
                    counts["half-written memory versions visible"] += 1
        live = {m.id: m for m in Memory.objects.filter(store_id=self.memory_store_id)}
        for memory_id, version in latest.items():
            memory = live.get(memory_id)
            if memory is None:
                counts["half-written memory versions visible"] += version.operation != "deleted"
            elif (memory.version_id, memory.content_sha256, memory.path) != (
                version.id,
                version.content_sha256,
                version.path,
            ) or _hashlib.sha256(memory.content.encode()).hexdigest() != memory.content_sha256:
                counts["half-written memory versions visible"] += 1
        counts["half-written memory versions visible"] += len(set(live) - set(latest))

        memory_writeback_at_idle(session=self.session)
        attachment = SessionMemoryStore.objects.get(session=self.session, memory_store_id=self.memory_store_id)
        baseline = {path: sha for path, (_id, sha) in attachment.baseline.items()}
        tree = self._memory_tree()
        if self._memories() != tree or baseline != tree:
            counts["memories differing from the last idle tree"] += 1
        return counts

    def _output_ids(self) -> set[str]:
        from files.models import File

        return set(
            File.objects.filter(scope_session_id=self.session.id, origin="session_output", state="ready").values_list(
                "id", flat=True
            )
        )

    def _reconcile_point(self):
        """Leave interrupted work (an upload and a delete killed midway), then kill the
        reconciler that is finishing it."""
        from files import reconcile, services

        data = self._data(self.rng.randint(1, SMALL_MAX))
        _in_child(
            "upload_object_stored",
            lambda: services.file_upload_stream(
                workspace=self.workspace, chunks=[data], filename="r.bin", mime_type="x/y"
            ),
        )
        victim = self.rng.choice(self._top_level())
        _in_child("delete_after_hide", lambda: services.file_delete(file=victim))
        crash = self.rng.choice(["reconcile_claimed", "reconcile_object_removed@1", "reconcile_object_removed@2"])
        return Point("reconciliation", crash), lambda: reconcile.reconcile(), {victim.id}

    def run_point(self, number: int) -> None:
        from files import reconcile

        makers = [self._upload_point] * 4 + [self._delete_point, self._copy_point, self._expire_point]
        makers += [self._reconcile_point]
        if self.session is not None:
            makers += [self._outputs_point] * 3 + [self._memory_point] * 2
        if self.only is not None:
            makers = [maker for maker in makers if maker.__name__ == f"_{self.only}_point"]
        maker = self.rng.choice(makers)
        before_outputs = self._visible_outputs() if self.session is not None else {}
        before_memories = self._memories() if self.session is not None else {}
        point, operation, may_vanish = maker()
        before = self._ready_ids()
        new_tree = self._tree() if point.operation == "outputs" else None
        new_memory_tree = self._memory_tree() if point.operation == "memory" else None

        started = time.monotonic()
        status = _in_child(point.crash, operation)
        killed = status == -signal.SIGKILL
        # The restarted server: startup reconciliation with the default grace window.
        report = reconcile.reconcile()
        counts = Counter()
        if point.operation == "outputs":
            counts.update(self._check_outputs(before_outputs, new_tree, killed))
        if point.operation == "memory":
            counts.update(self._check_memory(before_memories, new_memory_tree))
        counts.update(self._check(before=before, may_vanish=may_vanish))
        self._trim()

        self.result.points += 1
        self.result.by_operation[point.operation] += 1
        self.result.killed += killed
        self.result.not_reached += status == 0
        self.result.child_errors += status not in (0, -signal.SIGKILL)
        self.result.counts.update(counts)
        bad = {k: v for k, v in counts.items() if v}
        outcome = "killed" if killed else ("not reached" if status == 0 else f"child failed ({status})")
        finished = report.uploads_rolled_back + report.deletes_finished + report.uploads_already_committed
        line = (
            f"#{number:03d} {point.operation:<15} {point.crash:<32} {point.detail:<24} {outcome:<12} "
            f"reconciled {finished:>2}  {bad if bad else 'OK'}  {time.monotonic() - started:.1f}s"
        )
        self.result.lines.append(line)
        self.log(line)

    def _check_outputs(self, before: dict[str, str], new_tree: dict[str, str], killed: bool) -> Counter:
        """At the kill the visible set is the old tree or the new one, never a mix; the resumed
        turn's publication then makes it the tree it commits the idle event for."""
        from sessions.services.outputs import outputs_publish_at_idle

        counts = Counter()
        visible = self._visible_outputs()
        if killed and visible not in (before, new_tree):
            counts["outputs half-swapped at the kill"] += 1
        outputs_publish_at_idle(session=self.session, interrupted=False)
        self.idle_tree = self._tree()
        if self._visible_outputs() != self.idle_tree:
            counts["outputs differing from the last idle tree"] += 1
        return counts


def run(*, points: int, seed: int, outputs: bool = True, log=print, only: str | None = None) -> Result:
    """Run the campaign in the current (set up) Django process; returns the counts. `only`: one
    kind of point (upload, delete, copy, expire, reconcile, outputs, memory)."""
    campaign = Campaign(seed=seed, outputs=outputs, log=log, only=only)
    log(f"crash campaign: {points} points, seed {seed}, outputs {'on' if outputs else 'off'}")
    try:
        for number in range(1, points + 1):
            campaign.run_point(number)
    finally:
        campaign.close()
    result = campaign.result
    log("")
    log(
        f"points: {result.points} (killed at the point: {result.killed}; point not reached, operation "
        f"completed: {result.not_reached}; child failed otherwise: {result.child_errors})"
    )
    log("by operation: " + ", ".join(f"{name} {count}" for name, count in sorted(result.by_operation.items())))
    for name in COUNTS:
        log(f"{name}: {result.counts[name]}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-outputs", action="store_true", help="skip output publication (no Docker)")
    parser.add_argument("--only", default=None, help="one kind of point, e.g. memory")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common

    _common.setup()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    result = run(points=args.points, seed=seed, outputs=not args.no_outputs, only=args.only)
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
