"""deployments.fire_due: beat sends it every MANGO_DEPLOYMENTS_POLL_SECONDS; any number of beats
and workers may run it at once (deployments.runs.deployment_fire takes each due deployment under
its row lock with SKIP LOCKED, and the run's unique (deployment, scheduled_at) refuses a second)."""

from celery import shared_task

from deployments.runs import deployment_fire, deployments_due

BATCH = 100


@shared_task(name="deployments.fire_due", acks_late=True, soft_time_limit=300, time_limit=360, ignore_result=True)
def fire_due() -> int:
    fired = 0
    for deployment_id in deployments_due(limit=BATCH):
        if deployment_fire(deployment_id=deployment_id) is not None:
            fired += 1
    return fired
