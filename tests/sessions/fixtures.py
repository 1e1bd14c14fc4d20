"""The run-wide scripted upstream and real Celery worker that the session tests (and any other
directory's, tests/webhooks) share: registered once for the whole run by tests/conftest.py's
pytest_plugins, so one pytest process never has two workers on its sessions queue, each talking to a
scripted model of its own."""

import pytest
import redis
from django.conf import settings

from tests.scripted_model import ScriptedModel
from tests.worker import TEST_LEASE_SECONDS, CeleryWorker


@pytest.fixture(scope="session")
def scripted_model():
    model = ScriptedModel()
    yield model
    model.close()


@pytest.fixture
def model(scripted_model):
    """The scripted upstream with an empty script (and the default answer) for this test."""
    scripted_model.reset()
    yield scripted_model
    scripted_model.reset()


def worker_env(scripted_model: ScriptedModel) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": scripted_model.url,
        "ANTHROPIC_API_KEY": "sk-test-scripted",
        "MANGO_SANDBOX": "docker",
        "MANGO_SANDBOX_IMAGE": settings.MANGO_SANDBOX_IMAGE,
        "MANGO_SANDBOX_WORKDIR_SIZE": settings.MANGO_SANDBOX_WORKDIR_SIZE,
        "MANGO_SESSION_LEASE_SECONDS": str(TEST_LEASE_SECONDS),
        "MANGO_MODEL_MAX_RETRIES": "1",
        "MANGO_MODEL_RETRY_BACKOFF_SECONDS": "0.1",
        # A grader call that lasts a second says so (test_file_admission's heartbeat test).
        "MANGO_OUTCOME_HEARTBEAT_SECONDS": "1",
        # The run's shared worker leaves recovery to the tests that call sessions.recover_stuck
        # (tests/sessions/test_fleet.py runs workers with their reapers on).
        "MANGO_SESSION_REAPER_SECONDS": "0",
    }


class WorkerHandle:
    """The run's worker, replaceable: a test may kill it (a crash) and start a successor, which
    later tests keep using."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.current = CeleryWorker(env=env).start()

    def kill(self) -> None:
        self.current.kill()

    def start_new(self, **extra_env: str) -> CeleryWorker:
        """A successor (with `extra_env` on top of the run's environment, for one test)."""
        self.current = CeleryWorker(env={**self.env, **extra_env}).start()
        return self.current

    def stop(self) -> None:
        self.current.stop()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, scripted_model):
    """One real worker for the whole run, on the tests' own Redis database. (Stale tasks left
    there by an earlier run are harmless: a run for an unknown session does nothing.)"""
    with django_db_blocker.unblock():
        handle = WorkerHandle(worker_env(scripted_model))
    yield handle
    handle.stop()
    redis.Redis.from_url(settings.REDIS_URL).delete(settings.MANGO_SESSIONS_QUEUE)  # leftovers
