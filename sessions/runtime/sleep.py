"""Sandboxes sleep when idle and wake anywhere (issue 38).

* **Sleep** (``sandbox_sleep``, the `sessions.sandbox_sleep` task): a session idle for
  MANGO_SANDBOX_SLEEP_SECONDS whose sandbox runs has it checkpointed into the object store
  (sessions/services/checkpoints.py: incremental, intent-backed) and then removed — container,
  volumes, egress proxy, network. The sleeper holds the session's lease meanwhile, so no turn runs
  in the sandbox while it is archived; input that arrives meanwhile stops the checkpoint (nothing
  commits, the sandbox stays) and the turn starts at once. Processes do not survive a sleep.
* **Wake** (``sandbox_restore``, from runtime.sandbox_ready): a sandbox made for a session that
  has a committed checkpoint gets it back before anything else is placed, on whichever worker's
  Docker host the turn runs: the same tar streams, so /workspace and the outputs tree are
  byte-identical (modes, owners, symlinks, mtimes).
* **Sweep** (``sandboxes_sweep``, each worker's reaper): sandboxes on this worker's Docker host
  whose session is deleted, or that no turn runs in (a sleep that crashed between its commit and
  the removal, a creation or wake that crashed before it was recorded), are removed; idle ones
  past the setting are put to sleep (also those whose worker died).
"""

import logging
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import close_old_connections, connection

import sandboxes as sandbox
from core.crashpoints import crash_point
from sandboxes import tarchunks
from sandboxes.base import OUTPUTS_PATH, WORKDIR
from sessions.dispatch import session_run_enqueue_soon
from sessions.models import Session
from sessions.runtime.control import db_release
from sessions.runtime.lease import keeper, lease_acquire, lease_release
from sessions.selectors.runner import session_by_id, session_pending_input
from sessions.selectors.sandboxes import session_sandbox_state, sessions_sandbox_sleep_due, sessions_sandbox_states
from sessions.services.checkpoints import (
    CheckpointAbandoned,
    checkpoint_abandon,
    checkpoint_begin,
    checkpoint_commit,
    checkpoint_committed,
    checkpoint_stream,
    chunk_store,
    chunks_known,
)
from sessions.services.sandboxes import session_sandbox_forgotten, session_sandbox_repositories_rehome

logger = logging.getLogger(__name__)

# (stream name, directory archived, directory it is restored into)
STREAMS = (("workspace", WORKDIR, "/"), ("outputs", OUTPUTS_PATH, OUTPUTS_PATH.rsplit("/", 1)[0]))
UPLOAD_THREADS = 4
INPUT_CHECK_SECONDS = 0.5


class InputArrived(Exception):
    """Client input (or a lost lease) while checkpointing: the sandbox stays awake."""


def sandbox_sleep(*, session_id: str, force: bool = False) -> str:
    """Checkpoint and remove the session's sandbox if it is idle past the setting (or `force`).
    Returns what happened: slept, not_due, busy, woken, stale or abandoned."""
    close_old_connections()
    if not sandbox.get_backend().sleeps:
        return "not_due"
    if not force and session_id not in sessions_sandbox_sleep_due(ids=[session_id]):
        return "not_due"
    token = uuid.uuid4().hex
    if not lease_acquire(session_id=session_id, token=token):
        return "busy"
    lease = keeper.hold(session_id=session_id, token=token)
    try:
        session = session_by_id(session_id=session_id)
        if session.deleted_at is not None or session.sandbox_state != Session.SandboxState.RUNNING:
            return "not_due"
        if session_pending_input(session_id=session_id):
            return "woken"
        here = [
            c["id"]
            for c in sandbox.containers(session_id=session_id)
            if c["name"] == sandbox.container_name(session_id)
        ]
        if here != [session.sandbox_ref]:
            # Not the session's sandbox (it was made again on another worker's host since): archiving
            # it would overwrite newer files. It goes; the session's own sleeps where it runs.
            if here:
                sandbox.remove(session_id=session_id)
            return "stale"
        return _checkpoint_and_remove(session, lambda: lease.lost)
    finally:
        keeper.drop(lease)
        lease_release(session_id=session_id, token=token)
        if session_pending_input(session_id=session_id):
            session_run_enqueue_soon(session_id=session_id)  # the API sent none while we held the lease
        db_release()


def _checkpoint_and_remove(session: Session, lost) -> str:
    started = time.monotonic()
    checkpoint = checkpoint_begin(session=session)
    crash_point("sandbox_checkpoint_begun")
    checked = [0.0]

    def should_stop() -> bool:
        if time.monotonic() - checked[0] < INPUT_CHECK_SECONDS:
            return False
        checked[0] = time.monotonic()
        return lost() or bool(session_pending_input(session_id=session.id))

    try:
        manifest, logical = _archive(session, should_stop)
    except InputArrived:
        checkpoint_abandon(checkpoint=checkpoint)
        return "woken"
    except Exception:
        checkpoint_abandon(checkpoint=checkpoint)
        raise
    try:
        checkpoint_commit(checkpoint=checkpoint, manifest=manifest, logical_bytes=logical)
    except CheckpointAbandoned as exc:
        logger.warning("sandbox checkpoint abandoned: %s", exc, extra={"session_id": session.id})
        return "abandoned"
    db_release()
    sandbox.remove(session_id=session.id)  # only now: the checkpoint is committed
    crash_point("sandbox_sleep_removed")
    logger.info(
        "sandbox asleep",
        extra={"session_id": session.id, "bytes": logical, "seconds": round(time.monotonic() - started, 2)},
    )
    return "slept"


def _archive(session: Session, should_stop) -> tuple[dict[str, list[int]], int]:
    """Both streams cut into chunks; the new ones stored by UPLOAD_THREADS threads (at most
    twice UPLOAD_THREADS chunks in memory). Returns the manifest and the streams' total size."""
    known = chunks_known(session_id=session.id)
    manifest: dict[str, list] = {}
    logical = 0
    in_flight: dict[str, Future] = {}
    slots = threading.BoundedSemaphore(2 * UPLOAD_THREADS)

    def store(data: bytes) -> int:
        try:
            return chunk_store(session=session, data=data)
        finally:
            slots.release()
            connection.close()  # this upload thread's own

    with ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="mango-checkpoint") as pool:
        for name, directory, _target in STREAMS:
            stream, _stat = sandbox.get_archive(session_id=session.id, path=directory)
            entries: list = []
            for data in tarchunks.chunks(stream):
                if should_stop():
                    raise InputArrived()
                logical += len(data)
                digest = tarchunks.digest(data)
                if digest in known:
                    entries.append(known[digest])
                    continue
                if digest not in in_flight:
                    slots.acquire()
                    in_flight[digest] = pool.submit(store, data)
                entries.append(in_flight[digest])
            manifest[name] = entries
        db_release()
    return {
        name: [e if isinstance(e, int) else e.result() for e in entries] for name, entries in manifest.items()
    }, logical


def sandbox_restore(*, session: Session, ref: str) -> bool:
    """Give a sandbox just made for the session its committed checkpoint, if it has one (before
    anything else is placed). Idempotent: a wake that a crash interrupted restores again over
    what it left. Returns whether there was one."""
    checkpoint = checkpoint_committed(session_id=session.id)
    if checkpoint is None:
        return False
    started = time.monotonic()
    for name, _directory, target in STREAMS:
        sandbox.put_archive(
            session_id=session.id, directory=target, chunks=checkpoint_stream(checkpoint=checkpoint, stream=name)
        )
        crash_point(f"sandbox_wake_{name}_restored")
    # Repositories cloned into /workspace came back with it (with the agent's changes): not cloned again.
    session_sandbox_repositories_rehome(session_id=session.id, old_ref=checkpoint.sandbox_ref, new_ref=ref)
    logger.info(
        "sandbox woken",
        extra={
            "session_id": session.id,
            "bytes": checkpoint.logical_bytes,
            "seconds": round(time.monotonic() - started, 2),
        },
    )
    return True


def sandboxes_sweep() -> dict[str, int]:
    """One pass over this worker's Docker host (each worker's reaper): sandboxes of deleted or
    sleeping sessions are removed, idle ones past MANGO_SANDBOX_SLEEP_SECONDS put to sleep."""
    done = {"removed": 0, "slept": 0}
    backend = sandbox.get_backend()
    if not backend.sleeps:
        return done
    session_ids = backend.sessions_present()
    states = sessions_sandbox_states(ids=session_ids)  # other deployments' sandboxes are not listed
    for session_id, state in states.items():
        if state == "deleted":
            sandbox.remove(session_id=session_id)
            done["removed"] += 1
        elif state in LEFT_BEHIND and _remove_left_behind(session_id):
            done["removed"] += 1
    for session_id in sessions_sandbox_sleep_due(ids=list(states)):
        if sandbox_sleep(session_id=session_id) == "slept":
            done["slept"] += 1
    return done


# Sandboxes no session runs in: a sleep that crashed after its commit (sleeping), a creation or a
# wake that crashed before it was recorded (starting, failed). Creation and wake hold the lease.
LEFT_BEHIND = (Session.SandboxState.SLEEPING, Session.SandboxState.STARTING, Session.SandboxState.FAILED)


def _remove_left_behind(session_id: str) -> bool:
    """Remove the sandbox under the session's lease (so no turn is making it right now); the
    session then sleeps (its committed checkpoint is what it had) or has no sandbox."""
    token = uuid.uuid4().hex
    if not lease_acquire(session_id=session_id, token=token):
        return False
    try:
        if session_sandbox_state(session_id=session_id) not in LEFT_BEHIND:
            return False
        sandbox.remove(session_id=session_id)
        session_sandbox_forgotten(session_id=session_id)
        return True
    finally:
        lease_release(session_id=session_id, token=token)
