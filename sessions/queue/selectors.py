"""Reads of the self-hosted work queue, and the resolution of the worker's credentials (an
environment key, a work item's token) to what they may reach."""

from django.db.models import Count, Min, Q

from agents.multiagent import roster_entries
from core.errors import NotFound
from core.lookups import joined_row, one_or_not_found
from core.pagination import keyset_page
from sessions.models import EnvironmentKey, Session, SessionMemoryStore, WorkItem
from sessions.queue import credentials

State = WorkItem.State


def environment_key_resolve(*, raw_key: str) -> EnvironmentKey | None:
    """The live (unrevoked) key with this raw value, its environment and workspace loaded."""
    return joined_row(
        EnvironmentKey,
        joins=("environment", "workspace"),
        where="t.key_hash = %s AND t.revoked_at IS NULL",
        params=[credentials.credential_hash(raw_key)],
    )


def work_token_resolve(*, raw_token: str, superseded: bool = False) -> WorkItem | None:
    """The open work item a token names, if the token is its current claim's (None otherwise: a
    forged or foreign token, a stopped item's, or one a reclaim superseded authorizes nothing).
    With `superseded`, the item only if an earlier claim of it signed the token: its old holder,
    which may be told that it lost the lease."""
    parsed = credentials.work_token_parse(raw_token)
    if parsed is None:
        return None
    work_id, claim = parsed
    item = joined_row(
        WorkItem, joins=("workspace",), where="t.id = %s AND t.state <> %s", params=[work_id, State.STOPPED]
    )
    if item is None or (claim < item.claims) != superseded or claim > item.claims:
        return None
    if not credentials.work_token_valid(raw_token, work_id=item.id, session_id=item.session_id, claim=claim):
        return None
    return item


def work_session_scope(*, item: WorkItem) -> dict:
    """What a work token reaches besides its session: the skills its agent runs (a multiagent
    session's roster agents' too: their threads' tools run on the same worker) and the memory
    stores attached to it, each with the access it was attached with (the SDK worker downloads
    and syncs both with the token; a read_only store is never written through it)."""
    snapshot = Session.objects.filter(id=item.session_id).values_list("agent_snapshot", flat=True).first() or {}
    refs = list(snapshot.get("skills") or [])
    for _field, entry in roster_entries(snapshot.get("multiagent")):
        refs += entry.get("skills") or []
    skills = {ref.get("skill_id") for ref in refs if ref.get("skill_id")}
    stores = dict(
        SessionMemoryStore.objects.filter(session_id=item.session_id).values_list("memory_store_id", "access")
    )
    return {"skills": skills, "memory_stores": stores}


def work_get(*, environment_id: str, work_id: str) -> WorkItem:
    return one_or_not_found(
        WorkItem.objects.filter(environment_id=environment_id, id=work_id),
        missing=NotFound(f"Work item {work_id!r} not found.", code="work_not_found"),
    )


def work_list(*, environment_id: str, limit: int, page: str | None):
    """Newest first."""
    rows, next_page, _ = keyset_page(
        WorkItem.objects.filter(environment_id=environment_id),
        key="id",
        descending=True,
        limit=limit,
        page=page,
        purpose="work",
    )
    return rows, next_page


def work_stats(*, environment_id: str) -> dict:
    """depth: queued items no poll has handed out; pending: handed out, not acknowledged;
    oldest_queued_at: the oldest of both."""
    queued = WorkItem.objects.filter(environment_id=environment_id, state=State.QUEUED)
    return queued.aggregate(
        depth=Count("id", filter=Q(polled_at__isnull=True)),
        pending=Count("id", filter=Q(polled_at__isnull=False)),
        oldest_queued_at=Min("created_at"),
    )
