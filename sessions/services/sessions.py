import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agents.configs import agent_snapshot, mcp_references_check
from agents.multiagent import roster_entries, roster_replace
from agents.selectors import agent_get, agent_version_get, environment_get
from agents.services import agent_skills_resolve
from core.errors import InvalidRequest, NotFound
from core.ids import new_id
from core.metadata import metadata_patch_apply
from core.models import Workspace
from core.updates import model_update
from files.selectors import session_scoped_files_orphaned
from files.services import session_files_delete
from sessions import events as ev
from sessions import notify, pricing
from sessions.dispatch import sandbox_remove_enqueue_on_commit
from sessions.events import EventType
from sessions.models import Session
from sessions.queue.services import session_work_ensure, session_work_stop
from sessions.selectors import session_get
from sessions.services.admission import events_admit
from sessions.services.announce import announce_change
from sessions.services.checkpoints import checkpoints_delete
from sessions.services.events import events_append_locked, session_events_purge
from sessions.services.repositories import repositories_admit, repository_rows_create
from sessions.services.resources import (
    resource_rows_create,
    resources_admit,
    resources_copy,
    session_memory_stores_attach,
)
from sessions.services.termination import session_archive_locked
from sessions.services.user_events import user_events_append_locked
from vaults.selectors import live_vault_ids

logger = logging.getLogger(__name__)


def _resolve_agent_ref(*, workspace, agent) -> tuple:
    """The agent row and version a (validated) agent reference names."""
    agent_id, version = (agent, None) if isinstance(agent, str) else (agent["id"], agent.get("version"))
    row = agent_get(workspace=workspace, agent_id=agent_id)
    if row.archived_at is not None:
        raise InvalidRequest(f"Agent {agent_id!r} is archived.")
    return row, agent_version_get(agent=row, version=version)


def session_create(
    *,
    workspace,
    agent,
    environment_id: str,
    metadata: dict,
    title: str | None,
    initial_events: list[dict],
    resources: list,
    budget: dict | None = None,
    memory_stores: list | None = None,
    repositories: list | None = None,
    vault_ids: list[str] | None = None,
    deployment_id: str | None = None,
) -> Session:
    """A session starts idle with a snapshot of the agent version and the environment config.

    Everything that reads or copies objects happens first, outside any transaction: initial
    events are admitted (File references read and snapshotted) and file resources are admitted
    and copied. Then one transaction creates the session, its resources and its events (which
    wake the runner), and attaches its memory stores (snapshotting their names and
    descriptions). A rejected File or store means no session at all; if the transaction fails,
    the copies are deleted."""
    session_id = new_id("sesn")
    admitted, media = events_admit(
        workspace=workspace, parsed=initial_events, session_id=session_id, field="initial_events"
    )
    try:
        sources = resources_admit(workspace=workspace, params=resources, existing=[])
        repos = repositories_admit(params=repositories or [], existing=[path for _, path in sources])
        copies = resources_copy(session_id=session_id, admitted=sources)
    except BaseException:
        media.discard()
        raise
    try:
        with transaction.atomic():
            session = _session_create(
                session_id=session_id,
                workspace=workspace,
                agent=agent,
                environment_id=environment_id,
                metadata=metadata,
                title=title,
                initial_events=admitted,
                budget=budget,
                vault_ids=vault_ids or [],
                deployment_id=deployment_id,
            )
            resource_rows_create(session=session, copies=copies)
            if repos and not session.tool_host.has_sandbox:
                # No silent drop: the worker clones into its own sandboxes, and this one has none.
                raise InvalidRequest(
                    "resources: github_repository resources need a cloud environment (the worker clones them"
                    " into its sandbox); a self_hosted environment runs tools on the client's machine.",
                    code="repository_not_supported",
                )
            repository_rows_create(session=session, admitted=repos)
            session_memory_stores_attach(session=session, params=memory_stores or [])
            return session
    except BaseException:
        if copies or media.made:
            session_files_delete(workspace=workspace, session_id=session_id)
        raise


def _check_mcp_references(snapshot: dict) -> None:
    """Every mcp_toolset names one of the session agent's MCP servers and every server is named
    by one (after overrides)."""
    mcp_references_check(snapshot, field="agent.")


def _session_create(
    *,
    session_id: str,
    workspace,
    agent,
    environment_id: str,
    metadata: dict,
    title,
    initial_events: list[dict],
    budget: dict | None,
    vault_ids: list[str],
    deployment_id: str | None = None,
) -> Session:
    agent_row, version = _resolve_agent_ref(workspace=workspace, agent=agent)
    environment = environment_get(workspace=workspace, environment_id=environment_id)
    if environment.archived_at is not None:
        raise InvalidRequest(f"Environment {environment_id!r} is archived.", code="environment_archived")
    snapshot = agent_snapshot(agent_id=agent_row.id, version=version.version, config=version.config)
    if isinstance(agent, dict) and agent.get("type") == "agent_with_overrides":
        if "system" in agent:
            snapshot["system"] = agent["system"]
        if "tools" in agent:
            snapshot["tools"] = agent["tools"] or []
        if agent.get("model") is not None:
            snapshot["model"] = agent["model"]
        if agent.get("skills") is not None:
            snapshot["skills"] = agent["skills"]
        if agent.get("mcp_servers") is not None:
            snapshot["mcp_servers"] = agent["mcp_servers"]
    _check_mcp_references(snapshot)
    # Skills are pinned at session start: `latest` becomes the version it is now.
    resolved = agent_skills_resolve(workspace=workspace, skills=snapshot.get("skills") or [])
    snapshot["skills"] = [
        {"type": ref.get("type") or "custom", "skill_id": ref["skill_id"], "version": row.version}
        for ref, row in resolved
    ]
    if snapshot.get("multiagent"):
        snapshot["multiagent"] = _session_multiagent(workspace=workspace, snapshot=snapshot, environment=environment)
    if vault_ids:
        live = live_vault_ids(workspace=workspace, vault_ids=vault_ids)
        unknown = [vault_id for vault_id in vault_ids if vault_id not in live]
        if unknown:
            raise InvalidRequest(
                f"vault_ids: no such vault (or archived): {', '.join(repr(v[:64]) for v in unknown[:5])}.",
                code="vault_not_found",
            )
    if budget is not None:
        _check_budgetable(snapshot)
    now = timezone.now()
    session = Session.objects.create(
        id=session_id,
        budget=budget,
        workspace=workspace,
        agent=agent_row,
        agent_version=version.version,
        agent_snapshot=snapshot,
        vault_ids=vault_ids,
        deployment_id=deployment_id,
        environment_id=environment.id,
        environment_config=environment.config,
        metadata=metadata,
        title=title,
        created_at=now,
        updated_at=now,
    )
    if initial_events:
        session = Session.objects.select_for_update().get(pk=session.pk)
        user_events_append_locked(session=session, parsed=initial_events)
    # A new self_hosted session needs a worker (a no-op if its initial events queued one).
    session_work_ensure(session=session)
    announce_change(workspace_id=workspace.id, session_id=session.id, change="session.created")
    return session


def _thread_agent(*, workspace, snapshot: dict, ref: dict, field: str) -> dict:
    """The full definition (SessionThreadAgent) of one roster entry as the session keeps it: the
    session's own agent (overrides applied) for `self`, else the pinned version, its skills
    pinned. Refused with a 400 naming the entry: an agent gone or given multiagent since the
    roster was saved."""
    if ref["id"] == snapshot["id"]:
        definition = {key: value for key, value in snapshot.items() if key != "multiagent"}
    else:
        try:
            row = agent_get(workspace=workspace, agent_id=ref["id"])
            version = agent_version_get(agent=row, version=ref["version"])
        except NotFound as exc:
            raise InvalidRequest(f"agent.{field}: {exc.message}") from None
        if version.config.get("multiagent"):
            raise InvalidRequest(
                f"agent.{field}: agent {row.id!r} (version {version.version}) has multiagent itself (depth limit 1)."
            )
        definition = agent_snapshot(agent_id=row.id, version=version.version, config=version.config)
        definition.pop("multiagent", None)
        resolved = agent_skills_resolve(workspace=workspace, skills=definition.get("skills") or [])
        definition["skills"] = [
            {"type": "custom", "skill_id": skill["skill_id"], "version": skill_row.version}
            for skill, skill_row in resolved
        ]
    return definition


def _session_multiagent(*, workspace, snapshot: dict, environment) -> dict:
    """The agent's multiagent configuration as the session shows it (SessionMultiagent): each
    roster entry's full definition, resolved now and kept for the session's life."""
    config = snapshot["multiagent"]
    definitions = [
        _thread_agent(workspace=workspace, snapshot=snapshot, ref=entry, field=field)
        for field, entry in roster_entries(config)
    ]
    return roster_replace(config, definitions)


# session.updated names the agent; the row keeps it as its snapshot.
FIELD_OF = {"agent": "agent_snapshot"}
# What a removed budget leaves (rendered as null; it cannot be re-added).
BUDGET_REMOVED = {"type": "removed"}


def _check_budgetable(snapshot: dict) -> None:
    model = snapshot["model"]["id"]
    if pricing.price_for(model) is None:
        raise InvalidRequest(
            f"budget: model {model!r} has no public list price here, so a budget cannot be enforced"
            " (an operator may set its price in MANGO_MODEL_LIST_PRICES).",
            code="model_not_budgetable",
        )


def _budget_change(session: Session, budget: dict | None) -> dict:
    """The stored budget after an update: raised or lowered while above what was spent, or
    removed; never added to a session created without one, nor re-added once removed."""
    if session.budget is None or session.budget == BUDGET_REMOVED:
        raise InvalidRequest(
            "budget: a budget can only be set when the session is created (and not re-added once removed).",
            code="budget_create_only",
        )
    if budget is None:
        return BUDGET_REMOVED
    _check_budgetable(session.agent_snapshot)
    spent = int((session.usage or {}).get("list_cost_nanousd") or 0)
    if pricing.amount_nanousd(budget["max_list_cost"]["amount"]) <= spent:
        raise InvalidRequest(
            f"budget.max_list_cost: must be above the session's list cost so far ({pricing.cents(spent)} cents).",
            code="budget_not_raised",
        )
    return budget


@transaction.atomic
def session_update(*, workspace, session_id: str, changes: dict) -> Session:
    """Given fields change (metadata patches; the agent's tools and MCP servers only while idle); the change is
    logged as session.updated with what changed."""
    session = session_get(workspace=workspace, session_id=session_id, for_update=True)
    updated = {}
    if "title" in changes:
        updated["title"] = changes["title"]
    if "metadata" in changes:
        updated["metadata"] = metadata_patch_apply(session.metadata, changes["metadata"])
    if changes.get("agent") is not None:
        if session.status == Session.Status.RUNNING:
            raise InvalidRequest("agent: cannot change the agent while the session is running.")
        snapshot = dict(session.agent_snapshot)
        if "tools" in changes["agent"]:
            snapshot["tools"] = changes["agent"]["tools"] or []
        if "mcp_servers" in changes["agent"]:
            snapshot["mcp_servers"] = changes["agent"]["mcp_servers"] or []
        _check_mcp_references(snapshot)
        updated["agent"] = snapshot
    if "budget" in changes:
        updated["budget"] = _budget_change(session, changes["budget"])
    model_update(instance=session, data={FIELD_OF.get(key, key): value for key, value in updated.items()})
    if updated:
        if updated.get("budget") == BUDGET_REMOVED:
            updated["budget"] = None
        events_append_locked(session=session, items=[ev.item(EventType.SESSION_UPDATED, updated)])
    return session


@transaction.atomic
def session_archive(*, workspace, session_id: str) -> Session:
    """Archive a session and its child threads: each accepts no more input and is terminated
    (sessions.services.termination). The primary's row is locked before its threads' (one lock
    order)."""
    session = session_get(workspace=workspace, session_id=session_id, for_update=True)
    archived = session.archived_at is None
    session_archive_locked(locked=session)
    threads = Session.objects.select_for_update().filter(primary=session, deleted_at__isnull=True).order_by("id")
    for thread in threads:
        session_archive_locked(locked=thread)
    if archived and session.primary_id is None:
        announce_change(workspace_id=session.workspace_id, session_id=session.id, change="session.archived")
    return session


def session_delete(*, workspace, session_id: str) -> None:
    """Hide the session from every route at once and end its streams (session.deleted), and delete
    its sandbox checkpoints (their objects go once this commits); then stop any running turn, have
    a worker remove the sandbox, and clean up the session's Files."""
    with transaction.atomic():
        session = session_get(workspace=workspace, session_id=session_id, for_update=True)
        session.deleted_at = timezone.now()
        session.save(update_fields=["deleted_at"])
        events_append_locked(session=session, items=[ev.item(EventType.SESSION_DELETED)])
        session_work_stop(session_id=session_id)
        # A multiagent session's child threads go with it (their turns stop: their flags).
        threads = list(Session.objects.filter(primary=session, deleted_at__isnull=True).values_list("id", flat=True))
        Session.objects.filter(id__in=threads).update(deleted_at=session.deleted_at)
        checkpoints_delete(session_id=session_id)  # a sleeping sandbox's objects go after the commit
        sandbox_remove_enqueue_on_commit(session_id=session_id)  # by a worker: the API never calls Docker
    notify.set_interrupt(session_id)
    for thread_id in threads:
        notify.set_interrupt(thread_id)
    session_resources_cleanup(workspace=workspace, session_id=session_id)
    try:
        for thread_id in threads:
            session_events_purge(session_id=thread_id)
        session_events_purge(session_id=session_id)
    except Exception:
        logger.exception("event log purge failed; the sweep retries it", extra={"session_id": session_id})


def session_resources_cleanup(*, workspace, session_id: str) -> None:
    """The session's Files. (Its sandbox is removed by a worker: sessions.sandbox_remove.)"""
    session_files_delete(workspace=workspace, session_id=session_id)


def session_orphan_files_delete(*, older_than_seconds: float) -> int:
    """Delete session-scoped Files whose session does not exist (a crash between copying a
    resource and committing the session) or was deleted (a cleanup that failed). Only Files
    older than `older_than_seconds`, so a session being created right now is never touched.
    Returns how many sessions' Files were cleaned up."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    live = Session.objects.filter(deleted_at__isnull=True).values("id")
    orphans = session_scoped_files_orphaned(live_session_ids=live, created_before=cutoff, limit=500)
    count = 0
    for workspace_id, session_id in orphans:
        logger.warning("deleting orphaned session files", extra={"session_id": session_id})
        session_files_delete(workspace=Workspace.objects.get(pk=workspace_id), session_id=session_id)
        count += 1
    return count


def deleted_session_logs_purge(*, older_than_seconds: float) -> int:
    """Purge the event logs of sessions deleted over `older_than_seconds` ago that still hold
    bytes (a purge that failed, or a runner's appends after it). Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    ids = list(Session.objects.filter(deleted_at__lt=cutoff, event_bytes__gt=0).values_list("id", flat=True)[:500])
    for session_id in ids:
        session_events_purge(session_id=session_id)
    return len(ids)
