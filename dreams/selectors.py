"""Reads, scoped to the caller's workspace: a foreign id is the same not-found as a missing one."""

from core.errors import NotFound
from core.pagination import in_range, keyset_page
from dreams.models import Dream
from sessions.models import Session

ZERO_USAGE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "input_tokens": 0, "output_tokens": 0}


def dream_get(*, workspace, dream_id: str, for_update: bool = False) -> Dream:
    rows = Dream.objects.filter(workspace=workspace, id=dream_id)
    if for_update:
        rows = rows.select_for_update()
    dream = rows.first()
    if dream is None:
        raise NotFound(f"No dream {dream_id!r}.")
    return dream


def dream_list(
    *, workspace, limit: int, page: str | None, created: dict, include_archived: bool, statuses: list[str]
) -> tuple[list[Dream], str | None]:
    rows = Dream.objects.filter(workspace=workspace)
    if not include_archived:
        rows = rows.filter(archived_at__isnull=True)
    if statuses:
        rows = rows.filter(status__in=statuses)
    rows, next_page, _ = keyset_page(
        in_range(rows, "created_at", created), key="id", descending=True, limit=limit, page=page, purpose="dreams"
    )
    return rows, next_page


def dream_usages(dreams: list[Dream]) -> dict[str, dict]:
    """The token counts of the dreams' sessions, by dream id (one read for a page): a dream's
    usage is its session's (which keeps changing after a cancel, as the SDK says)."""
    by_session = {dream.session_id: dream.id for dream in dreams if dream.session_id}
    usages = {dream.id: dict(ZERO_USAGE) for dream in dreams}
    if by_session:
        for session_id, usage in Session.objects.filter(id__in=list(by_session)).values_list("id", "usage"):
            usages[by_session[session_id]] = {key: int((usage or {}).get(key) or 0) for key in ZERO_USAGE}
    return usages


def dream_for_session(*, session_id: str, for_update: bool = False) -> Dream | None:
    rows = Dream.objects.filter(session_id=session_id)
    if for_update:
        rows = rows.select_for_update()
    return rows.first()


def dreams_interrupt_owed(*, limit: int) -> list[str]:
    """Ids of the dreams whose session is still owed a cancel's or a timeout's interrupt (the
    process that committed it was lost before sending it)."""
    owed = Dream.objects.filter(interrupt_owed=True).order_by("id")
    return list(owed.values_list("id", flat=True)[:limit])


def dreams_stale(*, pending_before, running_before, limit: int) -> tuple[list[str], list[str]]:
    """Ids of the pending dreams created before `pending_before` (their start task lost or
    retried) and of the running ones started before `running_before` (over their time)."""
    pending = Dream.objects.filter(status=Dream.Status.PENDING, created_at__lt=pending_before)
    running = Dream.objects.filter(status=Dream.Status.RUNNING, started_at__lt=running_before)
    return (
        list(pending.order_by("id").values_list("id", flat=True)[:limit]),
        list(running.order_by("id").values_list("id", flat=True)[:limit]),
    )
