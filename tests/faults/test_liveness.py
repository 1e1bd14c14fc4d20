"""Owner liveness when the owner's database session ends while the process lives on (files/
liveness.py): the lock is retaken under a new id at once, the process's open intents are
re-stamped with it, and a reconcile run meanwhile from another process leaves the live upload
alone. The session is ended with pg_terminate_backend on this process's own lock connection (on
the shared server: nothing else is touched); tests/faults/test_outages.py restarts a private
PostgreSQL instead."""

import hashlib
import os
import threading
import time

import pytest

from files import liveness, reconcile, services, transfers
from files.models import File, StorageIntent
from tests.files.conftest import assert_store_consistent
from tests.files.server import run_manage
from tests.worker import test_database_url as database_url

pytestmark = pytest.mark.django_db(transaction=True)


def terminate_own_lock_session() -> int:
    """End this process's owner session from another connection; returns its backend pid."""
    backend = liveness.owner_backend_pid()
    assert backend is not None
    from core.database import database_connect

    with database_connect() as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone()[0]
    return backend


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def slow_upload(workspace):
    """An upload in another thread: one full part in the store, then it waits for `release`."""
    part_sent, release, outcome = threading.Event(), threading.Event(), {}
    data = b"a" * (transfers.PART_SIZE + 1)

    def chunks():
        yield data
        part_sent.set()
        release.wait(60)
        yield b"tail"

    def upload():
        from django.db import connection

        try:
            outcome["file"] = services.file_upload_stream(
                workspace=workspace, chunks=chunks(), filename="slow.txt", mime_type="text/plain"
            )
        except Exception as exc:  # noqa: BLE001 — asserted by the caller
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=upload)
    thread.start()
    assert part_sent.wait(30)
    intent = wait_for(lambda: StorageIntent.objects.filter(state="open", upload_id__isnull=False).first())
    return thread, release, outcome, intent, hashlib.sha256(data + b"tail").hexdigest()


def test_live_upload_survives_its_lock_session_terminated_and_a_reconcile(workspace):
    thread, release, outcome, intent, sha256 = slow_upload(workspace)
    old_owner = intent.owner
    assert old_owner == liveness.owner_id()

    terminate_own_lock_session()
    # Nothing runs on the lock connection; the watcher notices the goodbye and retakes at once.
    started = time.monotonic()
    wait_for(lambda: StorageIntent.objects.get(pk=intent.pk).owner != old_owner, timeout=5)
    retaken_in = time.monotonic() - started
    new_owner = StorageIntent.objects.get(pk=intent.pk).owner
    assert new_owner == liveness.owner_id() != old_owner
    assert retaken_in < liveness.RELOCK_SECONDS
    held, _ = liveness.live_owners()
    assert new_owner in held and old_owner not in held

    # A reconcile with no grace window at all, from another process, as beat would run it.
    env = {**os.environ, "DATABASE_URL": database_url(), "DATABASE_CONN_MAX_AGE": "0"}
    result = run_manage("reconcile_files", "--grace-seconds", "0", env=env)
    assert result.returncode == 0, result.stderr
    assert "uploads_rolled_back=0" in result.stdout, result.stdout
    assert StorageIntent.objects.get(pk=intent.pk).attempts == 0

    release.set()
    thread.join(60)
    assert "error" not in outcome, outcome
    file = File.objects.get(pk=outcome["file"].id)
    assert file.sha256 == sha256
    assert StorageIntent.objects.get(pk=intent.pk).state == "committed"
    assert_store_consistent(workspace.id)


def test_intent_stamped_with_the_lost_id_by_a_request_in_flight_is_re_stamped(workspace):
    """A request read the id just before the session ended and commits its intent just after the
    first re-stamp: the watcher re-stamps it too, before reconciliation would believe the old id
    dead."""
    old_owner = liveness.owner_id()
    terminate_own_lock_session()
    wait_for(lambda: liveness.owner_id() != old_owner, timeout=5)
    late = StorageIntent.objects.create(
        kind=StorageIntent.Kind.UPLOAD, workspace=workspace, object_key="files/late/none", owner=old_owner
    )
    wait_for(lambda: StorageIntent.objects.get(pk=late.pk).owner == liveness.owner_id(), timeout=5)
    assert reconcile.reconcile(grace_seconds=0, intent_ids=[late.pk]).uploads_rolled_back == 0
    StorageIntent.objects.filter(pk=late.pk).delete()


def test_owner_id_checks_the_session_before_stamping(workspace):
    """owner_id() itself notices a session the server ended (without waiting for the watcher)."""
    old_owner = liveness.owner_id()
    with liveness._lock:  # hold the watcher off: owner_id() must see it alone
        backend = liveness._state["connection"].info.backend_pid
        from core.database import database_connect

        with database_connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        deadline = time.monotonic() + 5
        while not liveness._session_lost(liveness._state["connection"]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert liveness.owner_id() != old_owner


def test_reconcile_waits_for_relock_before_taking_an_owner_for_dead(workspace):
    """An unlocked owner is confirmed dead only RELOCK_SECONDS later; a given-up intent (owner
    GIVEN_UP, held by nobody) costs no wait."""
    dead = StorageIntent.objects.create(
        kind=StorageIntent.Kind.UPLOAD, workspace=workspace, object_key="files/dead/none", owner=2_000_000_000
    )
    started = time.monotonic()
    assert 2_000_000_000 in reconcile.dead_owners()
    assert time.monotonic() - started >= liveness.RELOCK_SECONDS
    dead.owner = liveness.GIVEN_UP
    dead.save(update_fields=["owner"])
    started = time.monotonic()
    assert reconcile.dead_owners() == {liveness.GIVEN_UP}
    assert time.monotonic() - started < liveness.RELOCK_SECONDS
    StorageIntent.objects.filter(pk=dead.pk).delete()
