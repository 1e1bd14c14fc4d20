"""webhooks.deliver_due: beat runs it every MANGO_WEBHOOK_POLL_SECONDS and each emit asks for
it after commit. It leases due deliveries (webhooks.services.deliveries_claim) and attempts them
on a few threads; a worker killed mid-delivery leaves leases that expire, and the next run
anywhere takes those deliveries again (same webhook-id)."""

from concurrent.futures import ThreadPoolExecutor

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, connections

from webhooks.delivery import delivery_attempt
from webhooks.services import deliveries_claim


def _attempt(claim: tuple[str, str]) -> None:
    close_old_connections()
    try:
        delivery_attempt(delivery_id=claim[0], lease_token=claim[1])
    finally:
        connections.close_all()


@shared_task(name="webhooks.deliver_due", acks_late=True, soft_time_limit=600, time_limit=660, ignore_result=True)
def deliver_due() -> int:
    threads = settings.MANGO_WEBHOOK_DELIVERY_THREADS
    delivered = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webhook") as pool:
        for _round in range(50):
            claims = deliveries_claim(limit=threads * 4)
            if not claims:
                break
            list(pool.map(_attempt, claims))
            delivered += len(claims)
    return delivered
