"""Enqueueing session work by task name, so that services and the runtime never import
sessions.tasks (tasks sit on the top floor and import them). The router sends every sessions.*
task to MANGO_SESSIONS_QUEUE."""

from celery import current_app
from django.conf import settings
from django.db import transaction

SESSION_RUN = "sessions.run"
SANDBOX_REMOVE = "sessions.sandbox_remove"


def route_task(name, args, kwargs, options, task=None, **kw):
    """CELERY_TASK_ROUTES: sessions.* tasks go to settings.MANGO_SESSIONS_QUEUE (read per send)."""
    if name.startswith("sessions."):
        return {"queue": settings.MANGO_SESSIONS_QUEUE}
    return None


def _send(name: str, *args) -> None:
    current_app.send_task(name, args=list(args))


def session_run_enqueue(*, session_id: str) -> None:
    """Wake a runner for the session now. Harmless when one already runs (the lease decides)."""
    _send(SESSION_RUN, session_id)


def session_run_enqueue_on_commit(*, session_id: str) -> None:
    """Wake a runner once the current transaction commits (the events it must see are visible)."""
    transaction.on_commit(lambda: _send(SESSION_RUN, session_id))


def sandbox_remove_enqueue(*, session_id: str) -> None:
    _send(SANDBOX_REMOVE, session_id)
