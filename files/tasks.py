"""Periodic Files tasks (scheduled in config.settings.CELERY_BEAT_SCHEDULE). All are idempotent
and safe to run concurrently with each other, with API processes and with themselves. A pass that
meets a database restart logs one warning and leaves the work to the next pass (minutes or seconds
away) instead of failing."""

import logging

from celery import shared_task
from django.db import DatabaseError

from files import reconcile, services

logger = logging.getLogger(__name__)


@shared_task(name="files.reconcile", acks_late=True, soft_time_limit=600, time_limit=660)
def files_reconcile() -> dict | None:
    try:
        return reconcile.reconcile().as_dict()
    except DatabaseError:
        logger.warning("files.reconcile skipped: database unavailable")
        return None


@shared_task(name="files.reconcile_given_up", acks_late=True, soft_time_limit=120, time_limit=150, expires=30)
def files_reconcile_given_up() -> dict | None:
    """Every few seconds: intents given up on while the store was unreachable are finished as
    soon as it answers again."""
    try:
        return reconcile.reconcile_given_up().as_dict()
    except DatabaseError:
        logger.warning("files.reconcile_given_up skipped: database unavailable")
        return None


@shared_task(name="files.expire", acks_late=True, soft_time_limit=120, time_limit=150)
def files_expire() -> int:
    try:
        return services.files_expire()
    except DatabaseError:
        logger.warning("files.expire skipped: database unavailable")
        return 0
