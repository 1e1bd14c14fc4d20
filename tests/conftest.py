"""Shared fixtures. Everything here talks to real services: the PostgreSQL test database
(pytest-django), the embedded SeaweedFS S3 store started by `make test`, Redis."""

import time

import anthropic
import pytest
from botocore.exceptions import ClientError
from django.conf import settings
from django.test import Client

from core.services import api_key_create
from files import liveness, storage
from tests import openapi
from tests.worker import TEST_LEASE_SECONDS, pending_session_tasks

# The run-wide scripted model and Celery worker, one of each for every directory that uses them.
pytest_plugins = ["tests.sessions.fixtures"]

# Every response any test receives (test client or live server) is checked against the OpenAPI
# document; a departure fails the test that caused it (below).
settings.MIDDLEWARE = ["tests.openapi.ResponseSchemaMiddleware", *settings.MIDDLEWARE]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, plus: end this process's intent-owner session (files/liveness.py)
    before the test database is dropped, which an open session would block."""
    yield
    liveness.release()


@pytest.fixture(autouse=True)
def _runners_settled(request):
    """After a test, wait (a few seconds at most) until the run's worker has nothing of it left
    to do: no session task waiting in the queue and no live runner holding a lease (a worker
    finishes its bookkeeping after session.status_idle). The test database must not be flushed
    under its writes (the flush's TRUNCATE and those writes can deadlock). Any test may wake the
    worker (an event posted through the API), not only the sessions tests. Set up after the
    database fixture, so torn down before its flush."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not (marker.kwargs.get("transaction") or (marker.args and marker.args[0])):
        yield
        return
    request.getfixturevalue("_django_db_helper")
    yield
    from datetime import timedelta

    from django.utils import timezone

    from sessions.models import Session

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        live = timezone.now() - timedelta(seconds=TEST_LEASE_SECONDS)
        leased = Session.objects.filter(runner_token__isnull=False, runner_heartbeat_at__gte=live).exists()
        if not leased and not pending_session_tasks():
            return
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def responses_match_the_openapi_document():
    openapi.violations.clear()
    yield
    found = list(openapi.violations)
    openapi.violations.clear()
    assert not found, "responses that depart from /openapi.json:\n" + "\n".join(found)


@pytest.fixture(scope="session")
def s3_bucket():
    """The test bucket on the real S3 server, created if missing."""
    s3 = storage.backend().client
    try:
        s3.head_bucket(Bucket=storage.backend().bucket)
    except ClientError:
        s3.create_bucket(Bucket=storage.backend().bucket)
    return storage.backend().bucket


@pytest.fixture
def api_key(db):
    """A raw API key for workspace "alpha". The key's row is at `api_key.row`."""
    row, raw = api_key_create(workspace_name="alpha")
    return _Key(raw, row)


@pytest.fixture
def other_api_key(db):
    """A raw API key for a second workspace, "beta": for isolation tests."""
    row, raw = api_key_create(workspace_name="beta")
    return _Key(raw, row)


class _Key(str):
    def __new__(cls, raw, row):
        obj = super().__new__(cls, raw)
        obj.row = row
        obj.workspace = row.workspace
        return obj


@pytest.fixture
def api(api_key):
    """A Django test client authenticated with `api_key` (Bearer)."""
    return Client(headers={"authorization": f"Bearer {api_key}"})


@pytest.fixture
def sdk(live_server, api_key):
    """The official SDK, strictly validating responses, against the live test server."""
    return anthropic.Anthropic(
        base_url=live_server.url, api_key=str(api_key), max_retries=0, _strict_response_validation=True
    )
