"""A `* * * * *` deployment runs exactly once per minute for 3 minutes across a fleet: two
`celery beat` processes sending deployments.fire_due every second side by side, one of them
SIGKILLed and restarted; two workers, one SIGKILLed inside a fire (a crash point after its session
is created, before the commit) and one SIGKILLed at a minute's turn, each restarted. Pausing one
deployment stops it. Counted in the database: every due minute has one run and one session."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from deployments import services
from deployments.models import DeploymentRun
from sessions.models import Session
from tests import worker as workers
from tests.factories import make_session
from tests.worker import ROOT, CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]


class Beat:
    def __init__(self, env: dict, schedule: Path, log: Path):
        self._log = open(log, "ab")  # noqa: SIM115 — closed in kill()/stop()
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "celery"), "-A", "config", "beat", "--schedule", str(schedule)],
            cwd=ROOT, env={**os.environ, "DATABASE_URL": workers.test_database_url(), "REDIS_URL": settings.REDIS_URL,
                           **env},
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(10)
        self._log.close()


def _sleep_until(moment) -> None:
    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()))


def test_each_minute_runs_once_across_two_beats_and_killed_workers(api_key, tmp_path):
    queue = f"mango-test-deployments-{os.getpid()}"
    spare = f"{queue}-other"  # the beats' other tasks go where nobody consumes them
    env = {
        "MANGO_DEPLOYMENTS_QUEUE": queue,
        "MANGO_DEPLOYMENTS_POLL_SECONDS": "1",
        "MANGO_WEBHOOKS_QUEUE": spare,
        "MANGO_SESSIONS_QUEUE": spare,
    }
    workspace = api_key.workspace
    template = make_session(workspace)

    fleet, beats = [], []
    try:
        # The fleet first: a deployment created before its workers and beats are up could pass its
        # first minute (or be paused) before anything ran to fire it.
        worker_a = CeleryWorker(env=env, queues=queue, concurrency=2).start()
        worker_b = CeleryWorker(
            env={**env, "MANGO_TEST_CRASH_POINT": "deployments.fire.session_created"}, queues=queue, concurrency=2
        ).start()
        fleet += [worker_a, worker_b]
        beats += [Beat(env, tmp_path / f"beat-{n}", tmp_path / "beat.log") for n in range(2)]

        # Created away from a minute's turn, so that all six have the same first minute.
        now = timezone.now()
        if now.second >= 50:
            _sleep_until(now.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=1))
        deployments = [
            services.deployment_create(
                workspace=workspace,
                data={
                    "agent": template.agent_id,
                    "environment_id": template.environment_id,
                    "name": f"minutely-{n}",
                    "initial_events": [{"type": "user.message", "content": [{"type": "text", "text": "tick"}]}],
                    "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
                },
            )
            for n in range(6)
        ]
        assert len({d.next_run_at for d in deployments}) == 1
        minutes = [deployments[0].next_run_at + timedelta(minutes=n) for n in range(3)]
        paused = deployments[0]

        _sleep_until(minutes[0] + timedelta(seconds=8))
        beats[0].kill()  # a beat lost; its successor starts a little later
        time.sleep(3)
        beats[0] = Beat(env, tmp_path / "beat-0", tmp_path / "beat.log")
        # Paused once its first minute has run (on a loaded machine that may take longer than the
        # sleep above): from then on it must not run again.
        _wait_for(lambda: _ran(paused, minutes[0]), until=minutes[1] - timedelta(seconds=5))
        services.deployment_pause(workspace=workspace, deployment_id=paused.id)

        _sleep_until(minutes[1] - timedelta(seconds=0.5))
        worker_a.kill()  # at the minute's turn, whatever it is doing
        time.sleep(2)
        fleet.append(CeleryWorker(env=env, queues=queue, concurrency=2).start())

        # Worker B dies at its first fire, inside the transaction (whichever minute that is). The
        # fleet is stopped once every active deployment has run its last minute (or 45 s after it,
        # well before the next one).
        crashed = False
        while timezone.now() < minutes[2] + timedelta(seconds=45):
            if not crashed and worker_b.process.poll() is not None:
                crashed = worker_b.process.returncode == -signal.SIGKILL
                worker_b.kill()
                fleet.append(CeleryWorker(env=env, queues=queue, concurrency=2).start())
            if crashed and all(_ran(d, minutes[2]) for d in deployments if d.id != paused.id):
                break
            time.sleep(0.5)
    finally:
        for beat in beats:
            beat.kill(signal.SIGTERM)
        for process in fleet:
            process.kill()
        redis.Redis.from_url(settings.REDIS_URL).delete(queue, spare)

    lost, twice = [], 0
    for n, deployment in enumerate(deployments):
        expected = minutes[:1] if deployment.id == paused.id else minutes
        runs = list(DeploymentRun.objects.filter(deployment=deployment).values_list("scheduled_at", flat=True))
        lost += [(n, minute.strftime("%H:%M")) for minute in sorted(set(expected) - set(runs))]
        twice += len(runs) - len(set(runs))
        assert set(runs) <= set(expected), (deployment.id, runs, expected)
        sessions = Session.objects.filter(deployment_id=deployment.id).count()
        assert sessions == len(runs), (deployment.id, sessions, runs)
    print(f"fleet: {len(deployments)} deployments x {len(minutes)} minutes: lost {len(lost)} {lost}, twice {twice}")
    assert (lost, twice) == ([], 0)
    assert crashed, "worker B never reached its crash point"
    assert not DeploymentRun.objects.filter(error__isnull=False).exists()


def _ran(deployment, minute) -> bool:
    return DeploymentRun.objects.filter(deployment=deployment, scheduled_at=minute).exists()


def _wait_for(condition, *, until) -> None:
    while not condition() and timezone.now() < until:
        time.sleep(0.5)
