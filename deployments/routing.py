"""CELERY_TASK_ROUTES: deployments.* tasks go to MANGO_DEPLOYMENTS_QUEUE (read per send)."""

from django.conf import settings


def route_task(name, args, kwargs, options, task=None, **kw):
    if name.startswith("deployments."):
        return {"queue": settings.MANGO_DEPLOYMENTS_QUEUE}
    return None
