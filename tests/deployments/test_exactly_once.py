"""Exactly once per due time: a process firing a due deployment is SIGKILLed (kill -9, through
core.crashpoints) at each step — the deployment claimed under its row lock, the session created,
the run recorded, before the commit, after it — and a new process then fires it: every due
time has one run and one session, none lost, none twice (counted in the database)."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from deployments import services
from deployments.models import Deployment, DeploymentRun
from sessions.models import Session
from tests import worker
from tests.factories import make_session
from tests.worker import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

STEPS = (
    "deployments.fire.claimed",
    "deployments.fire.session_created",
    "deployments.fire.run_recorded",
    "deployments.fire.before_commit",
    "deployments.fire.committed",
)
FIRE = "import django; django.setup(); from deployments.tasks import fire_due; print(fire_due())"


def fire_process(crash_point: str | None = None) -> subprocess.CompletedProcess:
    """deployments.fire_due as a worker runs it, in a process of its own."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": worker.test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "MANGO_SESSIONS_QUEUE": settings.MANGO_SESSIONS_QUEUE,
    }
    env.pop("MANGO_TEST_CRASH_POINT", None)
    if crash_point:
        env["MANGO_TEST_CRASH_POINT"] = crash_point
    return subprocess.run([sys.executable, "-c", FIRE], cwd=ROOT, env=env, capture_output=True, timeout=60)


# Due once a year: the time a test makes due is the only one due while it runs, however slowly
# (with `* * * * *` a run that crossed a minute's turn had the next minute due as well).
YEARLY = "0 0 1 1 *"


def scheduled_deployment(workspace, *, due_ago: timedelta, expression: str = "* * * * *") -> Deployment:
    session = make_session(workspace)  # an agent and a self_hosted environment
    deployment = services.deployment_create(
        workspace=workspace,
        data={
            "agent": session.agent_id,
            "environment_id": session.environment_id,
            "name": "minutely",
            "initial_events": [{"type": "user.message", "content": [{"type": "text", "text": "tick"}]}],
            "schedule": {"type": "cron", "expression": expression, "timezone": "UTC"},
        },
    )
    # The clock moved: the deployment's first time came `due_ago` ago (nothing ran since).
    due = (timezone.now() - due_ago).replace(second=0, microsecond=0)
    Deployment.objects.filter(id=deployment.id).update(next_run_at=due)
    return deployment


@pytest.mark.parametrize("step", STEPS)
def test_a_fire_killed_at_each_step_runs_the_time_once(api_key, step):
    deployment = scheduled_deployment(api_key.workspace, due_ago=timedelta(seconds=5), expression=YEARLY)
    killed = fire_process(step)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    runs = DeploymentRun.objects.filter(deployment=deployment)
    committed = step == "deployments.fire.committed"
    # Before the commit the kill leaves nothing: no run, no session (one transaction).
    assert runs.count() == (1 if committed else 0)
    assert Session.objects.filter(deployment_id=deployment.id).count() == (1 if committed else 0)

    for _ in range(2):  # the restarted fleet, twice: the time is run once, then no more
        again = fire_process()
        assert again.returncode == 0, again.stderr.decode()[-2000:]
    (run,) = runs
    session = Session.objects.get(deployment_id=deployment.id)
    assert run.session_id == session.id and run.error is None and run.trigger_type == "schedule"
    deployment.refresh_from_db()
    assert deployment.next_run_at > timezone.now() and deployment.last_run_at is not None
    assert session.events.filter(type="user.message").count() == 1


def test_missed_times_run_once_as_the_latest(api_key):
    """Nothing ran for 10 minutes: one run, for the latest missed minute (not ten)."""
    deployment = scheduled_deployment(api_key.workspace, due_ago=timedelta(minutes=10))
    assert fire_process().returncode == 0
    (run,) = DeploymentRun.objects.filter(deployment=deployment)
    now = timezone.now()
    assert now - timedelta(seconds=61) < run.scheduled_at <= now and run.scheduled_at.second == 0


def test_a_paused_deployment_never_fires(api_key):
    deployment = scheduled_deployment(api_key.workspace, due_ago=timedelta(seconds=5))
    services.deployment_pause(workspace=api_key.workspace, deployment_id=deployment.id)
    assert fire_process().returncode == 0
    assert not DeploymentRun.objects.filter(deployment=deployment).exists()
