"""dreams.start (sent after a dream's create commits; acks_late: a worker killed inside it has
it redelivered, and dreams.runs makes each step once) and dreams.sweep (beat, every
MANGO_DREAMS_POLL_SECONDS: re-sends the start of a dream pending for longer than
MANGO_DREAM_START_RETRY_SECONDS, fails the running ones past MANGO_DREAM_TIMEOUT_SECONDS, and
sends the interrupts that a cancel or a timeout committed but did not send)."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from dreams.runs import dream_start
from dreams.selectors import dreams_interrupt_owed, dreams_stale
from dreams.services import dream_interrupt_deliver, dream_time_out

BATCH = 100


@shared_task(name="dreams.start", acks_late=True, soft_time_limit=300, time_limit=360, ignore_result=True)
def start(dream_id: str) -> None:
    dream_start(dream_id=dream_id)


@shared_task(name="dreams.sweep", acks_late=True, soft_time_limit=300, time_limit=360, ignore_result=True)
def sweep() -> int:
    now = timezone.now()
    pending, overdue = dreams_stale(
        pending_before=now - timedelta(seconds=settings.MANGO_DREAM_START_RETRY_SECONDS),
        running_before=now - timedelta(seconds=settings.MANGO_DREAM_TIMEOUT_SECONDS),
        limit=BATCH,
    )
    for dream_id in pending:
        start.delay(dream_id)
    for dream_id in overdue:
        dream_time_out(dream_id=dream_id)
    owed = [dream_id for dream_id in dreams_interrupt_owed(limit=BATCH) if dream_interrupt_deliver(dream_id=dream_id)]
    return len(pending) + len(overdue) + len(owed)
