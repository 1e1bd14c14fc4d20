"""Periodic Files tasks (scheduled in config.settings.CELERY_BEAT_SCHEDULE). Both are idempotent
and safe to run concurrently with each other, with API processes and with themselves."""

from celery import shared_task

from files import reconcile, services


@shared_task(name="files.reconcile", acks_late=True, soft_time_limit=600, time_limit=660)
def files_reconcile() -> dict:
    return reconcile.reconcile().as_dict()


@shared_task(name="files.expire", acks_late=True, soft_time_limit=120, time_limit=150)
def files_expire() -> int:
    return services.files_expire()
