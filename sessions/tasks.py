"""Celery tasks: thin, named, idempotent, taking ids (STYLE.md 10)."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

import sandboxes as sandbox
from sessions.dispatch import (
    QUEUE_ERRORS,
    SANDBOX_PATH_REMOVE,
    SANDBOX_PROXY_REMOVE,
    SANDBOX_REMOVE,
    SANDBOX_SLEEP,
    SESSION_RUN,
)
from sessions.events import RUNNER_INPUT_TYPES
from sessions.models import Session, SessionEvent
from sessions.runtime import turn  # imported before the pool forks: children start warm (anthropic is slow to import)
from sessions.runtime.fleet import fleet_connect
from sessions.runtime.sleep import sandbox_sleep, sandboxes_sweep
from sessions.services.checkpoints import checkpoint_stale_sweep
from sessions.services.sandboxes import sandbox_resource_path_remove, session_sandbox_changed
from sessions.services.sessions import deleted_session_logs_purge, session_orphan_files_delete
from sessions.services.threads import thread_status_copies_repair
from sessions.services.workflows import workflow_runs_advance_open
from skills.services import skills_unfinished_sweep

logger = logging.getLogger(__name__)


# Time-limited generously: a turn may run many tools. On the soft limit the runner hands the
# session to a fresh task, which resumes the turn.
TURN_SOFT_TIME_LIMIT = 6 * 3600


@shared_task(
    name=SESSION_RUN,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=TURN_SOFT_TIME_LIMIT,
    time_limit=TURN_SOFT_TIME_LIMIT + 300,
)
def session_run(session_id: str) -> None:
    """Run the session's pending turns. A no-op when another runner holds the session's lease
    or there is nothing to do, so duplicates and redeliveries are harmless."""
    turn.session_run(session_id=session_id)


@shared_task(name="sessions.recover_stuck", acks_late=True)
def session_recover_stuck(stale_seconds: float | None = None) -> list[str]:
    """Hand sessions whose runner died (stale lease, or running without a runner) or whose
    wake-up was lost (client input pending with no runner) to a new runner. Runs every minute."""
    now = timezone.now()
    stale = now - timedelta(
        seconds=stale_seconds if stale_seconds is not None else settings.MANGO_SESSION_LEASE_SECONDS
    )
    pending_input = SessionEvent.objects.filter(
        session=OuterRef("pk"), processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES, created_at__lt=stale
    )
    active = (Session.Status.RUNNING, Session.Status.RESCHEDULING)
    try:
        ids = list(
            Session.objects.filter(deleted_at__isnull=True)
            .filter(
                Q(runner_token__isnull=False, runner_heartbeat_at__lt=stale)
                | Q(runner_token__isnull=True, status__in=active)
                | Q(runner_token__isnull=True) & Exists(pending_input)
            )
            .values_list("id", flat=True)[:500]
        )
    except DatabaseError:
        # A database restart: the next pass (a reaper interval away) finds the same sessions.
        logger.warning("session recovery skipped: database unavailable")
        return []
    try:  # workflow runs a crash left between two steps move on (sessions.services.workflows)
        workflow_runs_advance_open()
    except Exception:
        logger.exception("workflow runs not advanced; the next pass tries again")
    try:  # thread status copies a crash lost are made again (sessions.services.threads)
        thread_status_copies_repair()
    except Exception:
        logger.exception("thread status copies not repaired; the next pass tries again")
    for index, session_id in enumerate(ids):
        logger.warning("recovering session", extra={"session_id": session_id})
        try:
            session_run.delay(session_id)
        except QUEUE_ERRORS:
            logger.warning("session recovery stopped: queue unavailable", extra={"left": len(ids) - index})
            return ids[:index]
    return ids


@shared_task(name=SANDBOX_REMOVE, acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=10)
def session_sandbox_remove(session_id: str) -> None:
    sandbox.remove(session_id=session_id)
    Session.objects.filter(id=session_id).update(sandbox_state=Session.SandboxState.REMOVED)


@shared_task(name=SANDBOX_PATH_REMOVE, acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=10)
def session_sandbox_path_remove(session_id: str, ref: str, path: str, tree: bool) -> None:
    """A deleted resource leaves the sandbox it was placed in (the API does not call Docker)."""
    sandbox_resource_path_remove(session_id=session_id, ref=ref, path=path, tree=tree)


@shared_task(name=SANDBOX_PROXY_REMOVE, acks_late=True, autoretry_for=(Exception,), retry_backoff=True, max_retries=10)
def session_sandbox_proxy_remove(session_id: str) -> None:
    """A revoked credential's secret leaves the session's egress proxy (the API does not call
    Docker); the next tool call provisions the sandbox again (a new proxy, current credentials)."""
    sandbox.proxy_remove(session_id=session_id)
    session_sandbox_changed(session_ids=[session_id])


@shared_task(name=SANDBOX_SLEEP, acks_late=True, soft_time_limit=3600, time_limit=3900)
def session_sandbox_sleep(session_id: str) -> str:
    """Checkpoint and remove the session's sandbox if it is still idle past the setting; a no-op
    otherwise (a runner holds it, it woke, it sleeps already), so redeliveries are harmless."""
    return sandbox_sleep(session_id=session_id)


def _reap() -> None:
    session_recover_stuck()
    if settings.MANGO_SANDBOX_SLEEP_SECONDS > 0:
        try:
            sandboxes_sweep()
        except Exception:
            logger.exception("sandbox sweep failed")


@shared_task(name="sessions.orphan_files_sweep", acks_late=True)
def session_orphan_files_sweep() -> int:
    """Session-scoped Files left without a live session are deleted, and deleted sessions'
    event logs purged (every 10 minutes)."""
    grace = settings.MANGO_RECONCILE_GRACE_SECONDS
    return (
        session_orphan_files_delete(older_than_seconds=grace)
        + deleted_session_logs_purge(older_than_seconds=60)
        + checkpoint_stale_sweep(older_than_seconds=grace)
    )


@shared_task(name="sessions.skills_unfinished_sweep", acks_late=True)
def skills_unfinished_sweep_task() -> int:
    """Skill uploads a crash interrupted lose their objects and rows (every 10 minutes)."""
    return skills_unfinished_sweep(older_than_seconds=settings.MANGO_RECONCILE_GRACE_SECONDS)


# Every worker reaps stale leases (a dead worker's turns) and drains on warm shutdown.
fleet_connect(_reap)
