"""Create, cancel and archive (the API's writes), and the status moves the session's changes
and the sweep make (final statuses never change again: completed, failed, canceled)."""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.errors import ApiError, Conflict, InvalidRequest, NotFound, RateLimited
from core.limits import workspace_rows_cap
from dreams.interest import workspace_dreaming_mark
from dreams.models import Dream
from dreams.selectors import dream_get
from memory.selectors import memory_store_get
from sessions.models import Session
from sessions.pricing import price_for
from sessions.services.user_events import session_events_send

logger = logging.getLogger(__name__)


def dream_create(*, workspace, params: dict, api_key_id: str | None) -> Dream:
    """A pending dream, its start task sent after commit. The input store and sessions are
    checked here (400s naming them); `update_existing` takes the store's row lock, so two such
    dreams on one store cannot both start (the second is a 409). The caller sends the start
    task after the commit (a process lost in between: the sweep sends it)."""
    store_id, session_ids = params["memory_store_id"], params["session_ids"]
    with transaction.atomic():
        # Each dream is a session at work: a tenant's at once are bounded (a 429 until one ends).
        active = Dream.objects.filter(workspace=workspace, status__in=[Dream.Status.PENDING, Dream.Status.RUNNING])
        limit, setting = settings.MANGO_WORKSPACE_MAX_DREAMS, "MANGO_WORKSPACE_MAX_DREAMS"
        workspace_rows_cap(
            workspace=workspace, rows=active, limit=limit, what="pending or running dreams", setting=setting,
            error=RateLimited,
        )  # fmt: skip
        try:
            store = memory_store_get(workspace=workspace, memory_store_id=store_id, for_update=True)
        except NotFound:
            raise InvalidRequest(f"inputs: memory store {store_id!r} not found.") from None
        if store.archived_at is not None:
            raise InvalidRequest(f"inputs: memory store {store_id!r} is archived.")
        found = set(
            Session.objects.filter(workspace=workspace, id__in=session_ids, deleted_at__isnull=True).values_list(
                "id", flat=True
            )
        )
        missing = [sid for sid in session_ids if sid not in found]
        if missing:
            raise InvalidRequest(f"inputs: session {missing[0]!r} not found.")
        if params["output_behavior"] == "update_existing":
            busy = Dream.objects.filter(
                workspace=workspace, memory_store_id=store_id, output_behavior="update_existing",
                status__in=[Dream.Status.PENDING, Dream.Status.RUNNING],
            ).first()  # fmt: skip
            if busy is not None:
                raise Conflict(
                    f"output_behavior: dream {busy.id} is still updating memory store {store_id!r}; cancel it or"
                    " wait for it to stop."
                )
        cap = settings.MANGO_DREAM_MAX_LIST_COST_CENTS or None
        if cap is not None and price_for(params["model_id"]) is None:
            raise InvalidRequest(
                f"model: {params['model_id']!r} has no public list price here, so the dream's budget"
                " (MANGO_DREAM_MAX_LIST_COST_CENTS) cannot be enforced (an operator may set its price in"
                " MANGO_MODEL_LIST_PRICES).",
                code="model_not_budgetable",
            )
        dream = Dream.objects.create(
            workspace=workspace,
            memory_store_id=store_id,
            session_ids=session_ids,
            model_id=params["model_id"],
            instructions=params["instructions"],
            output_behavior=params["output_behavior"],
            output_store_id=store_id if params["output_behavior"] == "update_existing" else None,
            api_key_id=api_key_id,
            max_list_cost_cents=cap,
            created_at=timezone.now(),
        )
        workspace_dreaming_mark(workspace.id)
        return dream


def dream_interrupt_deliver(*, dream_id: str) -> bool:
    """Send the interrupt a cancel or a timeout owes the dream's session, once: the claim (the
    conditional update clearing `interrupt_owed`) and the session's user.interrupt commit
    together, so whoever comes first (the API after its commit, or the sweep after a crash
    between the two) sends it and the other finds nothing owed. The session's row is locked
    first, the order its status change takes (session, then dream: dreams/receivers.py)."""
    dream = Dream.objects.select_related("workspace").filter(id=dream_id, interrupt_owed=True).first()
    if dream is None or not dream.session_id:
        return False
    with transaction.atomic():
        Session.objects.select_for_update().filter(id=dream.session_id).first()
        if not Dream.objects.filter(id=dream_id, interrupt_owed=True).update(interrupt_owed=False):
            return False
        try:
            with transaction.atomic():
                session_events_send(
                    workspace=dream.workspace,
                    session_id=dream.session_id,
                    parsed=[{"type": "user.interrupt", "payload": {"session_thread_id": None}}],
                )
        except ApiError:  # an archived or deleted session has nothing to interrupt
            logger.info("a dream's session could not be interrupted", extra={"dream_id": dream_id})
    return True


def _end_interrupting(dream: Dream, status: str, error: dict | None = None) -> None:
    """The final status of a dream whose session may be at work (its row locked by the caller),
    with the interrupt owed to that session in the same commit."""
    dream_end_locked(dream, status, error)
    if dream.session_id:
        dream.interrupt_owed = True
        dream.save(update_fields=["interrupt_owed"])


def dream_cancel(*, workspace, dream_id: str) -> Dream:
    """Canceled at once, the interrupt owed to its session committed with it; the session is
    interrupted after that commit (dream_interrupt_deliver; the sweep delivers it if this process
    is lost in between). Never the session's lock while holding the dream's: the session's status
    change locks the session's row and then the dream's (receivers), so the other order could
    deadlock with it."""
    with transaction.atomic():
        dream = dream_get(workspace=workspace, dream_id=dream_id, for_update=True)
        if dream.status == Dream.Status.CANCELED:
            return dream
        if dream.status in (Dream.Status.COMPLETED, Dream.Status.FAILED):
            raise InvalidRequest(f"Dream {dream_id!r} is {dream.status} and cannot be canceled.")
        _end_interrupting(dream, Dream.Status.CANCELED)
    crash_point("dreams.cancel.committed")
    dream_interrupt_deliver(dream_id=dream.id)
    return dream


def dream_archive(*, workspace, dream_id: str) -> Dream:
    with transaction.atomic():
        dream = dream_get(workspace=workspace, dream_id=dream_id, for_update=True)
        if dream.archived_at is not None:
            return dream
        if dream.status not in Dream.FINAL:
            raise InvalidRequest(f"Dream {dream_id!r} is {dream.status}: cancel it before archiving it.")
        dream.archived_at = timezone.now()
        dream.save(update_fields=["archived_at"])
        return dream


def dream_end_locked(dream: Dream, status: str, error: dict | None = None) -> None:
    """The dream's final status (its row locked by the caller; a final one is left as it is)."""
    if dream.status in Dream.FINAL:
        return
    dream.status, dream.error, dream.ended_at = status, error, timezone.now()
    dream.save(update_fields=["status", "error", "ended_at"])


def dream_time_out(*, dream_id: str) -> None:
    """The sweep's: a dream running past MANGO_DREAM_TIMEOUT_SECONDS fails (type timeout), and
    its session is interrupted (what it wrote stays in its store)."""
    with transaction.atomic():
        dream = Dream.objects.select_for_update().select_related("workspace").filter(id=dream_id).first()
        if dream is None or dream.status != Dream.Status.RUNNING:
            return
        _end_interrupting(dream, Dream.Status.FAILED, {"type": "timeout", "message": "The dream ran out of time."})
    dream_interrupt_deliver(dream_id=dream.id)  # after the commit, as dream_cancel does
