"""CELERY_TASK_ROUTES: webhooks.* tasks go to MANGO_WEBHOOKS_QUEUE (read per send), so a fleet
can give deliveries workers of their own and a test run a queue of its own."""

from django.conf import settings


def route_task(name, args, kwargs, options, task=None, **kw):
    if name.startswith("webhooks."):
        return {"queue": settings.MANGO_WEBHOOKS_QUEUE}
    return None
