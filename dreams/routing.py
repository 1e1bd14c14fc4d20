"""CELERY_TASK_ROUTES: dreams.* tasks go to the sessions queue (MANGO_SESSIONS_QUEUE, read per
send): a dream's start is a session's creation, and every worker that runs sessions runs it."""

from django.conf import settings


def route_task(name, args, kwargs, options, task=None, **kw):
    if name.startswith("dreams."):
        return {"queue": settings.MANGO_SESSIONS_QUEUE}
    return None
