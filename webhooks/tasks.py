"""webhooks.deliver_due: beat runs it every MANGO_WEBHOOK_POLL_SECONDS and each emit asks for
it after commit. It leases due deliveries (webhooks.services.deliveries_claim) for its free
threads as they free up (never waiting for a whole batch: one slow endpoint holds one thread,
and a workspace at most MANGO_WEBHOOK_INFLIGHT_MAX and never every thread; workspaces are served
in turn, webhooks.services.deliveries_claim), for at most RUN_SECONDS of claiming; a
worker killed mid-delivery leaves leases that expire, and the next run anywhere takes those
deliveries again (same webhook-id)."""

import logging
import time
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, ThreadPoolExecutor, wait

from celery import shared_task
from django.conf import settings
from django.db import connection

from webhooks import wakeup
from webhooks.delivery import delivery_attempt
from webhooks.services import Lease, Outcome, deliver_due_send, deliveries_claim, deliveries_record

logger = logging.getLogger(__name__)

RUN_SECONDS = 60.0
CLAIM_EVERY_SECONDS = 0.2
LINGER_SECONDS = 0.01


def _attempt(lease: Lease) -> Outcome | None:
    try:
        return delivery_attempt(lease=lease)
    except Exception:  # its lease expires and another run takes it again; never silently
        logger.exception("webhook delivery %s: the attempt failed unrecorded", lease.delivery_id)
        return None


# One delivery loop per process (webhooks.wakeup): a commit asks for a run (webhooks.services.
# kick) only when no loop runs, in its process or (by Redis) in another; a task that finds this
# process's loop running leaves the flag set and returns, and the loop claims again before it
# stops (a run that ended while the flag was set starts over). Many loops at once each held a
# database connection while they waited and took turns from the sessions sharing the process's
# pool (bench/webhooks_sessions.py: pool timeouts), and a task per commit cost the turn workers
# more CPU than the deliveries' records.


@shared_task(name="webhooks.deliver_due", acks_late=True, soft_time_limit=600, time_limit=660, ignore_result=True)
def deliver_due() -> int:
    wakeup.wanted.set()
    attempted = 0
    while wakeup.wanted.is_set() and wakeup.loop.acquire(blocking=False):
        try:
            looping = wakeup.Looping()
            while wakeup.wanted.is_set():
                wakeup.wanted.clear()
                count, more = _deliver(looping)
                attempted += count
                if more:  # RUN_SECONDS of claiming ended with work left: a fresh run goes on
                    deliver_due_send()
                if not wakeup.wanted.is_set() and looping.stop():  # asked for by a commit elsewhere
                    wakeup.wanted.set()
                    looping.refresh(force=True)
        finally:
            wakeup.loop.release()
    return attempted


def _deliver(looping: wakeup.Looping) -> tuple[int, bool]:
    """Attempts on this process's threads until nothing runs; (attempted, whether it stopped
    claiming at RUN_SECONDS rather than for want of due rows). Only this loop's thread uses the
    database: it claims for the free threads (the rows and their endpoints read by the claim)
    and records the outcomes that came back since its last turn in one transaction; the threads
    only sign and POST. A turn waits up to LINGER_SECONDS after the first attempt ends for the
    others to end too, so that under load a claim and a record serve several attempts each."""
    threads = settings.MANGO_WEBHOOK_DELIVERY_THREADS
    stop_claiming = time.monotonic() + RUN_SECONDS
    attempted = 0
    running: set = set()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webhook") as pool:
        while True:
            looping.refresh()
            if len(running) < threads and time.monotonic() < stop_claiming:
                leases = deliveries_claim(limit=threads - len(running), threads=threads)
                running |= {pool.submit(_attempt, lease) for lease in leases}
                attempted += len(leases)
            connection.close()  # back to the pool while this loop waits (the record and claim shared it)
            if not running:
                return attempted, time.monotonic() >= stop_claiming
            done, _ = wait(running, timeout=CLAIM_EVERY_SECONDS, return_when=FIRST_COMPLETED)
            if done:
                done, _ = wait(running, timeout=LINGER_SECONDS, return_when=ALL_COMPLETED)
            running -= done
            deliveries_record(outcomes=[outcome for future in done if (outcome := future.result()) is not None])
