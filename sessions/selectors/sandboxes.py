"""Reads about sessions' sandboxes for the sleep and the sweep (sessions.runtime.sleep)."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from sessions.models import Session


def sessions_sandbox_sleep_due(*, ids: list[str] | None = None, limit: int = 200) -> list[str]:
    """Sessions whose sandbox runs while they have been idle, with no runner, for
    MANGO_SANDBOX_SLEEP_SECONDS (their last event is that old), and so have their child threads
    (multiagent: they share the sandbox); among `ids` when given."""
    cutoff = timezone.now() - timedelta(seconds=settings.MANGO_SANDBOX_SLEEP_SECONDS)
    rows = Session.objects.filter(
        deleted_at__isnull=True,
        sandbox_state=Session.SandboxState.RUNNING,
        status=Session.Status.IDLE,
        runner_token__isnull=True,
        updated_at__lt=cutoff,
    ).exclude(Exists(threads_active(since=cutoff)))
    if ids is not None:
        rows = rows.filter(id__in=ids)
    return list(rows.values_list("id", flat=True)[:limit])


def threads_active(*, since):
    """A multiagent session's child threads (they run their tools in its sandbox) that run, hold a
    runner or had an event since `since`: for an Exists over the primary (OuterRef "pk")."""
    return Session.objects.filter(primary_id=OuterRef("pk"), deleted_at__isnull=True).filter(
        Q(runner_token__isnull=False) | ~Q(status=Session.Status.IDLE) | Q(updated_at__gte=since)
    )


def sessions_sandbox_states(*, ids: list[str]) -> dict[str, str]:
    """{session id: its sandbox state, or "deleted"} for the sessions of `ids` this database
    knows (a Docker host may run other deployments' sandboxes: those are not ours to touch)."""
    return {
        session_id: "deleted" if deleted_at is not None else state
        for session_id, state, deleted_at in Session.objects.filter(id__in=ids).values_list(
            "id", "sandbox_state", "deleted_at"
        )
    }


def session_sandbox_awake(*, session_id: str) -> bool:
    """Whether the session (not deleted) has a sandbox running."""
    return Session.objects.filter(
        id=session_id, deleted_at__isnull=True, sandbox_state=Session.SandboxState.RUNNING
    ).exists()


def session_sandbox_state(*, session_id: str) -> str | None:
    return Session.objects.filter(id=session_id).values_list("sandbox_state", flat=True).first()


def session_sandbox_generation(*, session_id: str) -> tuple[int, int]:
    """(sandbox_changes, sandbox_provisioned): the running sandbox needs provisioning again while
    the second is behind the first."""
    row = Session.objects.filter(id=session_id).values_list("sandbox_changes", "sandbox_provisioned").first()
    return row or (0, 0)
