"""The lease: one runner at a time owns a session (Session.runner_token), renewed by a heartbeat
thread. A runner that dies leaves a stale lease that sessions.recover_stuck (or any later
enqueue) hands to another worker, which resumes the turn from the stored events."""

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from sessions.models import Session

logger = logging.getLogger(__name__)


def lease_acquire(*, session_id: str, token: str) -> bool:
    """Take the session's lease if it is free or stale."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.MANGO_SESSION_LEASE_SECONDS)
    return (
        Session.objects.filter(id=session_id)
        .filter(Q(runner_token__isnull=True) | Q(runner_heartbeat_at__lt=stale))
        .update(runner_token=token, runner_heartbeat_at=now)
        == 1
    )


def lease_release(*, session_id: str, token: str) -> None:
    Session.objects.filter(id=session_id, runner_token=token).update(runner_token=None, runner_heartbeat_at=None)


class Heartbeat(threading.Thread):
    """Renews the lease every quarter of its duration; `lost` once another runner took it."""

    def __init__(self, *, session_id: str, token: str):
        super().__init__(daemon=True, name=f"lease-{session_id}")
        self.session_id, self.token = session_id, token
        self.stopped = threading.Event()
        self.lost = False

    def run(self):
        interval = max(0.5, settings.MANGO_SESSION_LEASE_SECONDS / 4)
        try:
            while not self.stopped.wait(interval):
                renewed = Session.objects.filter(id=self.session_id, runner_token=self.token).update(
                    runner_heartbeat_at=timezone.now()
                )
                if not renewed:
                    self.lost = True
                    return
        except Exception:
            logger.exception("lease heartbeat failed", extra={"session_id": self.session_id})
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
