"""A workspace's share of the sandbox host: at most MANGO_WORKSPACE_MAX_SANDBOXES live sandboxes
at once. A sandbox lives from a session's first sandbox tool call until the session is deleted,
and each may hold up to MANGO_SANDBOX_MEMORY (its tmpfs included), so without a cap one tenant
with many sessions could take the Docker host's memory from every other tenant.

The count and the claim happen under the workspace's row lock (the lock the Files quota also
takes), so concurrent first tool calls of one workspace cannot overshoot; the container itself is
created after the commit, holding no lock and no connection.
"""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import F

import sandboxes as sandbox
from core.models import Workspace
from sessions.dispatch import sandbox_proxy_remove_enqueue
from sessions.models import SandboxCheckpoint, Session, SessionResource

logger = logging.getLogger(__name__)

LIVE = (Session.SandboxState.STARTING, Session.SandboxState.RUNNING)


class SandboxLimitReached(sandbox.SandboxError):
    """The workspace holds its cap of live sandboxes (a tool error the model and client see)."""


def sandbox_admit(*, session: Session) -> None:
    """Before a session's sandbox is first created: claim a place among its workspace's live
    sandboxes (state `starting`), or raise SandboxLimitReached. A session whose sandbox is live
    already, or any session when the cap is 0, passes untouched."""
    cap = settings.MANGO_WORKSPACE_MAX_SANDBOXES
    if cap <= 0 or session.sandbox_state in LIVE:
        return
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(id=session.workspace_id).first()
        live = (
            Session.objects.filter(workspace_id=session.workspace_id, deleted_at__isnull=True, sandbox_state__in=LIVE)
            .exclude(id=session.id)
            .count()
        )
        if live >= cap:
            raise SandboxLimitReached(
                f"this workspace already has {live} live sandboxes (at most {cap}); delete sessions "
                "that no longer need theirs, then retry"
            )
        Session.objects.filter(id=session.id).update(sandbox_state=Session.SandboxState.STARTING)
    session.sandbox_state = Session.SandboxState.STARTING


def sandbox_proxies_revoke_on_commit(*, workspace_id: str, vault_id: str) -> None:
    """Once the current transaction commits (a credential of the vault, or the vault, was
    archived, deleted, revoked or given a new secret), the egress proxy of every live sandbox
    whose session lists the vault is removed, with the secrets it holds.

    Removed, not replaced: removing needs neither the secrets nor the session's networking, so
    it cannot hand a proxy stale values, and it is one call per session. The next tool call's
    ``sandbox.ensure`` makes the proxy again from the credentials it reads then (and also
    replaces any proxy whose label says it holds other values than those, which covers a tool
    call that read the credentials just before this commit); until then the sandbox's HTTP(S)
    goes nowhere. A worker removes it (sessions.sandbox_proxy_remove): the API never calls
    Docker."""
    transaction.on_commit(lambda: _proxies_remove(workspace_id=workspace_id, vault_id=vault_id))


def _proxies_remove(*, workspace_id: str, vault_id: str) -> None:
    rows = Session.objects.filter(workspace_id=workspace_id, vault_ids__contains=[vault_id], sandbox_state__in=LIVE)
    session_ids = list(rows.values_list("id", flat=True))
    session_sandbox_changed(session_ids=session_ids)  # the next tool call provisions again
    for session_id in session_ids:
        sandbox_proxy_remove_enqueue(session_id=session_id)  # by a worker: the API never calls Docker


def session_sandbox_changed(*, session_ids: list[str]) -> None:
    """Something the running sandboxes of these sessions were provisioned with changed (a
    credential, their egress proxy removed): the next tool call provisions again."""
    if session_ids:
        Session.objects.filter(id__in=session_ids).update(sandbox_changes=F("sandbox_changes") + 1)


def session_sandbox_provisioned(*, session: Session, generation: int) -> None:
    """The runner provisioned the sandbox as of `generation` (sandbox_changes read before it began);
    a change counted since keeps it behind, so the next tool call provisions again."""
    Session.objects.filter(id=session.id, sandbox_provisioned__lt=generation).update(sandbox_provisioned=generation)
    session.sandbox_provisioned = max(session.sandbox_provisioned, generation)


def sandbox_resource_path_remove(*, session_id: str, ref: str, path: str, tree: bool) -> None:
    """A deleted resource's file (or repository tree) leaves the sandbox it was placed in, if
    that sandbox still runs (a newer one never had it)."""
    if not Session.objects.filter(id=session_id, sandbox_ref=ref, sandbox_state=Session.SandboxState.RUNNING).exists():
        return
    if tree:
        sandbox.remove_tree(session_id=session_id, path=path)
    else:
        sandbox.remove_path(session_id=session_id, path=path)


def session_sandbox_repositories_rehome(*, session_id: str, old_ref: str, new_ref: str) -> int:
    """A woken sandbox got /workspace back from its checkpoint, with the repositories cloned
    into it (and the agent's changes to them): they count as placed in the new sandbox, so they
    are not cloned over. Repositories elsewhere (outside /workspace) are cloned again."""
    if not old_ref:
        return 0
    return SessionResource.objects.filter(
        session_id=session_id,
        type=SessionResource.Type.GITHUB_REPOSITORY,
        placed_ref=old_ref,
        mount_path__startswith=f"{sandbox.WORKDIR}/",
    ).update(placed_ref=new_ref)


def session_sandbox_forgotten(*, session_id: str) -> None:
    """A sandbox no turn ran in was removed (sessions.runtime.sleep's sweep): the session sleeps
    if it has a committed checkpoint (a wake restores it), else it has no sandbox."""
    committed = SandboxCheckpoint.objects.filter(session_id=session_id, state=SandboxCheckpoint.State.COMMITTED)
    state = Session.SandboxState.SLEEPING if committed.exists() else Session.SandboxState.REMOVED
    Session.objects.filter(id=session_id).update(sandbox_state=state, sandbox_ref=None)
