"""Runs: a session of the deployment's agent and environment, created with its resources,
vaults, budget and initial events and `deployment_id` set, and a DeploymentRun recording it (or
the error that stopped it), announced as deployment_run.started and .succeeded or .failed.

Exactly once per due time, across any number of beats and workers: deployment_fire takes the
deployment's row lock (SKIP LOCKED: a racing process moves on), re-reads that the time is still
due, and in that one transaction creates the session, records the run under the unique
(deployment, scheduled_at) constraint and moves next_run_at past now. A process killed before
the commit leaves nothing (the next fire runs the time); after it, the time is no longer due.
The session's copies of Files are made inside that transaction, their objects named by upload
intents committed before it on a connection of their own (files.intents.upload_intents_scope):
a killed fire's copies are deleted by the periodic files.reconcile once the process is gone, and
those of a fire whose transaction rolled back, or whose session was refused, within seconds.
Missed times (nothing ran for a while) run once, as the latest of them (schedule.latest_due)."""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.errors import ApiError, InvalidRequest, NotFound
from core.signals import resource_change_announce
from deployments.models import Deployment, DeploymentRun
from deployments.schedule import latest_due, next_after
from deployments.selectors import deployment_get
from deployments.services import deployment_pause_locked, deployment_session_params
from files.intents import upload_intents_scope
from sessions.services.sessions import session_create

logger = logging.getLogger(__name__)

# Errors of a scheduled run that pause the deployment (the SDK's paused-reason error types):
# the deployment cannot run until someone changes it.
PAUSING_ERRORS = frozenset(
    {
        "agent_archived_error", "environment_archived_error", "environment_not_found_error",
        "vault_not_found_error", "vault_archived_error", "file_not_found_error", "memory_store_archived_error",
        "skill_not_found_error", "session_resource_not_found_error", "self_hosted_resources_unsupported_error",
    }
)  # fmt: skip


def run_error(exc: ApiError) -> dict:
    """The run's error object (the SDK's BetaManagedAgents*RunErrorObject) for a refused session."""
    message = str(getattr(exc, "message", "") or exc)[:1000]
    lowered, code = message.lower(), getattr(exc, "code", None) or ""
    if code == "vault_not_found" or ("vault" in lowered and "no such" in lowered):
        kind = "vault_not_found_error"
    elif "agent" in lowered and "archived" in lowered:
        kind = "agent_archived_error"
    elif code == "environment_archived" or ("environment" in lowered and "archived" in lowered):
        kind = "environment_archived_error"
    elif isinstance(exc, NotFound) and "environment" in lowered:
        kind = "environment_not_found_error"
    elif code == "repository_not_supported":
        kind = "self_hosted_resources_unsupported_error"
    elif "file" in lowered and isinstance(exc, (NotFound, InvalidRequest)) and "not found" in lowered:
        kind = "file_not_found_error"
    elif isinstance(exc, InvalidRequest):
        kind = "session_creation_rejected_error"
    else:
        kind = "unknown_error"
    return {"type": kind, "message": message}


def _announce(run: DeploymentRun, type: str) -> None:
    resource_change_announce(workspace_id=run.workspace_id, type=type, object_id=run.id)


def _run_record(*, deployment: Deployment, trigger: str, scheduled_at=None) -> DeploymentRun:
    """Inside the caller's transaction: the session (in a savepoint: a refused one leaves
    nothing), then the run, then their announcements. IntegrityError: this time already ran."""
    run = DeploymentRun(
        workspace_id=deployment.workspace_id,
        deployment=deployment,
        agent_id=deployment.agent_id,
        agent_version=deployment.agent_version,
        trigger_type=trigger,
        scheduled_at=scheduled_at,
        created_at=timezone.now(),
    )
    try:
        with transaction.atomic():
            session = session_create(
                workspace=deployment.workspace, **deployment_session_params(deployment), deployment_id=deployment.id
            )  # fmt: skip
        run.session_id = session.id
    except ApiError as exc:
        run.error = run_error(exc)
    crash_point("deployments.fire.session_created")
    with transaction.atomic():
        run.save(force_insert=True)
    crash_point("deployments.fire.run_recorded")
    _announce(run, "deployment_run.started")
    _announce(run, "deployment_run.failed" if run.error else "deployment_run.succeeded")
    return run


def deployment_run_now(*, workspace, deployment_id: str) -> DeploymentRun:
    """A manual run, at once (a paused deployment too, as the SDK allows; not an archived one)."""
    with upload_intents_scope(), transaction.atomic():
        deployment = deployment_get(workspace=workspace, deployment_id=deployment_id, for_update=True)
        if deployment.archived_at is not None:
            raise InvalidRequest(f"Deployment {deployment_id!r} is archived.")
        return _run_record(deployment=deployment, trigger=DeploymentRun.Trigger.MANUAL)


def deployments_due(*, limit: int) -> list[str]:
    """Ids of the deployments with a due time (unpaused, unarchived), oldest due first."""
    return list(
        Deployment.objects.filter(next_run_at__lte=timezone.now(), paused_at__isnull=True, archived_at__isnull=True)
        .order_by("next_run_at")
        .values_list("id", flat=True)[:limit]
    )


def deployment_fire(*, deployment_id: str) -> DeploymentRun | None:
    """Start the run of the deployment's due time, once: None when it is not due (any more),
    is paused or archived, or another process holds it right now."""
    with upload_intents_scope(), transaction.atomic():
        now = timezone.now()
        deployment = (
            Deployment.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("workspace")
            .filter(id=deployment_id, next_run_at__lte=now, paused_at__isnull=True, archived_at__isnull=True)
            .first()
        )
        if deployment is None:
            return None
        crash_point("deployments.fire.claimed")
        expression, zone = deployment.schedule_expression, deployment.schedule_timezone
        scheduled_at = latest_due(expression=expression, timezone=zone, first_due=deployment.next_run_at, now=now)
        try:
            with transaction.atomic():
                run = _run_record(
                    deployment=deployment, trigger=DeploymentRun.Trigger.SCHEDULE, scheduled_at=scheduled_at
                )
        except IntegrityError:
            logger.warning("deployment time already ran", extra={"deployment_id": deployment_id})
            run = None
        deployment.next_run_at = next_after(expression=expression, timezone=zone, after=max(now, scheduled_at))
        fields = ["next_run_at"]
        if run is not None:
            deployment.last_run_at = now
            fields.append("last_run_at")
            if run.error and run.error["type"] in PAUSING_ERRORS:
                deployment.save(update_fields=fields)
                deployment_pause_locked(deployment=deployment, reason={"type": "error", "error": run.error})
                return run
        deployment.save(update_fields=fields)
        crash_point("deployments.fire.before_commit")
    crash_point("deployments.fire.committed")
    return run
