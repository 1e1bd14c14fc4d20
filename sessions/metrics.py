"""Scrape-time sessions metrics (registered in SessionsConfig.ready(); read from PostgreSQL)."""

from django.db.models import Count

from core import metrics
from sessions.models import Session


def collect():
    live = Session.objects.filter(deleted_at__isnull=True)
    by_status = dict(live.values_list("status").annotate(n=Count("id")).order_by())
    sessions = metrics.gauge("mango_sessions", "Sessions (not deleted) by status.", labels=["status"])
    for status in Session.Status.values:
        sessions.add_metric([status], by_status.get(status, 0))
    yield sessions
    running = metrics.gauge("mango_turns_running", "Turns running now (sessions in status running).")
    running.add_metric([], by_status.get(Session.Status.RUNNING, 0))
    yield running
    by_sandbox = dict(Session.objects.values_list("sandbox_state").annotate(n=Count("id")).order_by())
    sandboxes = metrics.gauge("mango_sandboxes", "Session sandboxes by state.", labels=["state"])
    for state in Session.SandboxState.values:
        sandboxes.add_metric([state], by_sandbox.get(state, 0))
    yield sandboxes
