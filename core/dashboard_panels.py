"""core's dashboard panel: live Celery workers, beat's last heartbeat, API keys."""

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from core import heartbeats
from core.models import ApiKey


def celery_panel() -> dict:
    now = timezone.now()
    keys = ApiKey.objects.aggregate(
        active=Count("id", filter=Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))),
        revoked=Count("id", filter=Q(revoked_at__isnull=False)),
    )
    return {
        "workers": heartbeats.live_workers(),
        "beat_age_seconds": heartbeats.beat_age_seconds(),
        "stale_seconds": settings.MANGO_HEARTBEAT_STALE_SECONDS,
        "sessions_queue": settings.MANGO_SESSIONS_QUEUE,
        "keys": keys,
    }
