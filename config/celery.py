"""The Celery app. Configuration lives in config.settings under the CELERY_ prefix.

Worker and beat log through Django's LOGGING (JSON lines, core/logging.py) instead of Celery's
own format, and renew their liveness heartbeats in Redis (core/heartbeats.py).
"""

import logging.config
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("mango")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.celeryd_init.connect
def _worker_connection_name(**kwargs):
    """Worker connections are named in pg_stat_activity (bench/sessions_turns.py counts them)."""
    from django.conf import settings

    settings.DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = "mango-worker"


@signals.setup_logging.connect
def _json_logging(**kwargs):
    # Connected: Celery leaves logging alone; Django's LOGGING (JSON) applies.
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


_heartbeats = []


@signals.worker_ready.connect
def _worker_heartbeat(sender, **kwargs):
    from core import heartbeats

    hostname = sender.hostname
    queues = sorted(queue.name for queue in sender.task_consumer.queues)
    _heartbeats.append(
        (
            heartbeats.Heartbeat(
                lambda: heartbeats.worker_beat(hostname=hostname, queues=queues), name="mango-heartbeat"
            ).start(),
            lambda: heartbeats.worker_gone(hostname=hostname, queues=queues),
        )
    )


@signals.worker_shutdown.connect
def _worker_heartbeat_stop(**kwargs):
    for heartbeat, gone in _heartbeats:
        heartbeat.stop()
        try:
            gone()
        except Exception:
            logging.getLogger(__name__).warning("could not clear the worker heartbeat", exc_info=True)


@signals.beat_init.connect
def _beat_heartbeat(**kwargs):
    from core import heartbeats

    heartbeats.Heartbeat(heartbeats.beat_beat, name="mango-beat-heartbeat").start()
