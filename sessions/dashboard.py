"""Sessions' dashboard panel: sessions by status, recent session.error events, sandboxes."""

from datetime import timedelta

from django.db.models import Count
from django.utils import timezone

from sessions.models import Session, SessionEvent


def sessions_panel() -> dict:
    live = Session.objects.filter(deleted_at__isnull=True)
    counts = dict(live.values_list("status").annotate(n=Count("id")).order_by())
    since = timezone.now() - timedelta(hours=1)
    recent_errors = SessionEvent.objects.filter(type="session.error", created_at__gte=since)
    return {
        "by_status": [(status, counts.get(status, 0)) for status in Session.Status.values],
        "total": sum(counts.values()),
        "errors_last_hour": recent_errors.count(),
        "sessions_with_errors_last_hour": recent_errors.values("session_id").distinct().count(),
        "sandboxes_running": Session.objects.filter(sandbox_state=Session.SandboxState.RUNNING).count(),
        "latest_errors": list(
            recent_errors.select_related("session")
            .order_by("-created_at")
            .values("session_id", "created_at", "payload")[:5]
        ),
    }
