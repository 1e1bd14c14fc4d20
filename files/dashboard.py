"""Files' dashboard panel: storage per workspace and open storage intents (stuck ones flagged)."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone

from core.models import Workspace
from files.models import StorageIntent

TOP_WORKSPACES = 25


def storage_panel() -> dict:
    ready = Q(files__state="ready")
    workspaces = list(
        Workspace.objects.annotate(
            file_count=Count("files", filter=ready), file_bytes=Sum("files__size_bytes", filter=ready)
        )
        .filter(file_count__gt=0)
        .order_by("-file_bytes", "name")[:TOP_WORKSPACES]
    )
    totals = Workspace.objects.aggregate(
        file_count=Count("files", filter=ready), file_bytes=Sum("files__size_bytes", filter=ready)
    )
    for workspace in workspaces:
        workspace.quota_bytes = _quota_bytes(workspace)
    now = timezone.now()
    grace = timedelta(seconds=settings.MANGO_RECONCILE_GRACE_SECONDS)
    open_intents = StorageIntent.objects.filter(state=StorageIntent.State.OPEN)
    intents = []
    for kind in StorageIntent.Kind.values:
        row = open_intents.filter(kind=kind).aggregate(
            total=Count("id"),
            under_1m=Count("id", filter=Q(updated_at__gt=now - timedelta(minutes=1))),
            under_grace=Count("id", filter=Q(updated_at__lte=now - timedelta(minutes=1), updated_at__gt=now - grace)),
            stuck=Count("id", filter=Q(updated_at__lte=now - grace)),
            oldest=Min("updated_at"),
            errored=Count("id", filter=~Q(last_error="")),
            last_attempt=Max("attempts"),
        )
        row["kind"] = kind
        row["oldest_age"] = (now - row["oldest"]) if row["oldest"] else None
        intents.append(row)
    return {
        "workspaces": workspaces,
        "totals": totals,
        "workspace_count": Workspace.objects.count(),
        "intents": intents,
        "grace": grace,
        "stuck_total": sum(row["stuck"] for row in intents),
    }


def _quota_bytes(workspace) -> int | None:
    # The per-workspace Files quota (files/quotas.py) once it exists; usage only until then.
    try:
        from files import quotas
    except ImportError:
        return None
    limit = getattr(quotas, "quota_bytes", None)
    return limit(workspace=workspace) if callable(limit) else None
