"""Scrape-time Files metrics (registered in FilesConfig.ready(); read from PostgreSQL)."""

from django.db.models import Count, Min, Q
from django.utils import timezone

from core import metrics
from files.models import StorageIntent

# Open intents by how long since their owner last touched them; past the grace window
# reconciliation may finish them, so the oldest bucket is "stuck" unless the store is down.
AGE_BUCKETS = (("lt_1m", 0, 60), ("1m_to_1h", 60, 3600), ("gt_1h", 3600, None))


def collect():
    now = timezone.now()
    aggregates = {}
    for name, low, high in AGE_BUCKETS:
        condition = Q(updated_at__lte=now - timezone.timedelta(seconds=low))
        if high is not None:
            condition &= Q(updated_at__gt=now - timezone.timedelta(seconds=high))
        aggregates[name] = Count("id", filter=condition)
    rows = (
        StorageIntent.objects.filter(state=StorageIntent.State.OPEN)
        .values("kind")
        .annotate(oldest=Min("updated_at"), **aggregates)
    )
    open_intents = metrics.gauge(
        "mango_storage_intents_open", "Open storage intents by kind and idle age.", labels=["kind", "age"]
    )
    oldest = metrics.gauge(
        "mango_storage_intent_oldest_idle_seconds", "Idle time of the oldest open intent, by kind.", labels=["kind"]
    )
    by_kind = {row["kind"]: row for row in rows}
    for kind in StorageIntent.Kind.values:
        row = by_kind.get(kind, {})
        for name, _, _ in AGE_BUCKETS:
            open_intents.add_metric([kind, name], row.get(name, 0))
        oldest.add_metric([kind], (now - row["oldest"]).total_seconds() if row.get("oldest") else 0)
    yield open_intents
    yield oldest


RECONCILE_ACTIONS = (
    "uploads_rolled_back",
    "uploads_already_committed",
    "deletes_finished",
    "multipart_uploads_aborted",
    "orphan_objects_deleted",
    "deferred",
)


def record_reconcile(report) -> None:
    """Count what one reconciliation pass did (not dry runs)."""
    for action in RECONCILE_ACTIONS:
        if getattr(report, action):
            metrics.RECONCILE_ACTIONS.labels(action).inc(getattr(report, action))
