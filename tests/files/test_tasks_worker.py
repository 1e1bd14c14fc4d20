"""The periodic Files tasks executed by a real Celery worker (Redis broker), on a queue of this
test's own so no other worker on the machine can take the messages."""

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from config.celery import app
from files.models import File, StorageIntent
from tests.files.conftest import assert_store_consistent, make_file
from tests.files.test_services import _age, interrupted_put

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker_queue(tmp_path, s3_bucket):
    queue = f"files-test-{uuid.uuid4().hex[:12]}"
    settings = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{settings['USER'] or 'postgres'}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}",
        "DATABASE_CONN_MAX_AGE": "0",
    }
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 — closed below
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "config", "worker", "--pool", "solo", "-Q", queue],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield queue
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    log.close()


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("the worker did not do the work in time")


def test_worker_runs_expire_and_reconcile(worker_queue, workspace):
    expired = make_file(workspace, b"old", expires_at=timezone.now() - timedelta(seconds=1))
    kept = make_file(workspace, b"kept", expires_at=timezone.now() + timedelta(hours=1))
    stale = interrupted_put(workspace)
    _age([stale])
    app.send_task("files.expire", queue=worker_queue)
    app.send_task("files.reconcile", queue=worker_queue)
    wait_for(lambda: not File.objects.filter(pk=expired.pk).exists())
    wait_for(lambda: StorageIntent.objects.get(pk=stale.pk).state == "rolled_back")
    assert File.objects.filter(pk=kept.pk).exists()
    assert_store_consistent(workspace.id)
