"""Reads, scoped to the caller's workspace: a foreign id is the same not-found as a missing one."""

from core.errors import InvalidRequest, NotFound
from core.pagination import in_range, keyset_page
from deployments.models import Deployment, DeploymentRun


def deployment_get(*, workspace, deployment_id: str, for_update: bool = False) -> Deployment:
    rows = Deployment.objects.filter(workspace=workspace, id=deployment_id)
    if for_update:
        rows = rows.select_for_update()
    deployment = rows.first()
    if deployment is None:
        raise NotFound(f"No deployment {deployment_id!r}.")
    return deployment


def deployment_list(
    *, workspace, limit: int, page: str | None, agent_id: str | None, created: dict, include_archived: bool,
    status: str | None,
) -> tuple[list[Deployment], str | None]:  # fmt: skip
    if status is not None and include_archived:
        raise InvalidRequest("status: cannot be combined with include_archived.")
    rows = Deployment.objects.filter(workspace=workspace)
    if not include_archived:
        rows = rows.filter(archived_at__isnull=True)
    if agent_id:
        rows = rows.filter(agent_id=agent_id)
    if status == "paused":
        rows = rows.filter(paused_at__isnull=False)
    elif status == "active":
        rows = rows.filter(paused_at__isnull=True)
    rows, next_page, _ = keyset_page(
        in_range(rows, "created_at", created), key="id", descending=True, limit=limit, page=page, purpose="deployments"
    )
    return rows, next_page


def run_get(*, workspace, run_id: str) -> DeploymentRun:
    run = DeploymentRun.objects.filter(workspace=workspace, id=run_id).first()
    if run is None:
        raise NotFound(f"No deployment run {run_id!r}.")
    return run


def run_list(
    *, workspace, limit: int, page: str | None, deployment_id: str | None, created: dict, has_error: bool | None,
    trigger_type: str | None,
) -> tuple[list[DeploymentRun], str | None]:  # fmt: skip
    """A deployment_id that names nothing lists nothing (200, as the SDK documents)."""
    rows = DeploymentRun.objects.filter(workspace=workspace)
    if deployment_id:
        rows = rows.filter(deployment_id=deployment_id)
    if has_error is not None:
        rows = rows.filter(error__isnull=not has_error)
    if trigger_type:
        rows = rows.filter(trigger_type=trigger_type)
    rows, next_page, _ = keyset_page(
        in_range(rows, "created_at", created), key="id", descending=True, limit=limit, page=page,
        purpose="deployment_runs",
    )  # fmt: skip
    return rows, next_page
