"""The Celery app. Configuration lives in config.settings under the CELERY_ prefix.

Worker and beat log through Django's LOGGING (JSON lines, core/logging.py) instead of Celery's
own format, and renew their liveness heartbeats in Redis (core/heartbeats.py). A worker's
heartbeat says "consuming": it is renewed only while the worker's consumer is connected to the
broker (the BrokerConnected step below), so after a Redis outage /readyz reports the worker ready
once it has reconnected, not when Redis answers again. The consumer retries a lost broker every
BROKER_RETRY_SECONDS (Celery's default backs off to 30 s, which would hold the turns that
long after Redis returns).
"""

import functools
import logging.config
import os
import threading

from celery import Celery, bootsteps, signals
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

BROKER_RETRY_SECONDS = 1.0


class Consumer(CeleryConsumer):
    """Celery's consumer, reconnecting to a lost broker every BROKER_RETRY_SECONDS."""

    def ensure_connected(self, conn):
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=BROKER_RETRY_SECONDS,
            interval_step=0,
            interval_max=BROKER_RETRY_SECONDS,
        )
        return super().ensure_connected(conn)

    def on_connection_error_after_connected(self, exc):
        # Celery 5.7 first collects the lost connection (which detaches its transport) and then
        # closes it; closing the Redis channel then reads the detached transport and raises
        # AttributeError, which ends the worker ("Unrecoverable error") at every Redis outage.
        # The close has nothing left to release by then.
        connection = self.connection
        if connection is not None:
            close = connection.close

            def close_detached():
                try:
                    close()
                except AttributeError:
                    pass

            connection.close = close_detached
        super().on_connection_error_after_connected(exc)


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, where the ack (or reject) of a message received on a channel that
    was lost with its broker connection is skipped: a task running through a Redis outage ends
    after the worker reconnected, and acking it on the old channel read the detached transport
    (AttributeError, which ends the worker). The message stays among Redis's unacked ones and is
    delivered again after the visibility timeout; the session and Files tasks are idempotent."""

    def basic_ack(self, delivery_tag, multiple=False):
        if self.closed:
            logger.info("ack skipped: the message came on a lost broker connection")
            return
        super().basic_ack(delivery_tag, multiple=multiple)

    def basic_reject(self, delivery_tag, requeue=False):
        if self.closed:
            logger.info("reject skipped: the message came on a lost broker connection")
            return
        super().basic_reject(delivery_tag, requeue=requeue)

    def _create_client(self, asynchronous=False):
        """One client per connection pool for the channel's short commands, not one per call:
        kombu builds a new redis.Redis for every publish, delivery and ack, and redis-py 8's
        constructor inspects its own signature each time (about 60 us; 12 % of a busy worker's
        interpreter time went there). Such a client holds no connection (each command takes one
        from the pool), so the channel's threads share it; a new pool gets a new client. The
        asynchronous clients (the BRPOP and pub/sub connections) are kombu's, made once each."""
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self.__dict__.get("_mango_client")
        if client is None or client.connection_pool is not self.pool:
            client = self._mango_client = super()._create_client()
        return client


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel


app = Celery("mango")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.worker_consumer = "config.celery:Consumer"
if app.conf.broker_url.startswith(("redis://", "rediss://", "unix://")):
    app.conf.broker_transport = "config.celery:RedisTransport"
app.autodiscover_tasks()

# Set while the worker's consumer is connected to the broker and consuming.
broker_connected = threading.Event()


class BrokerConnected(bootsteps.StartStopStep):
    """Started once the consumer's connection and task consumer are up (again, after every
    reconnect); stopped when the connection is lost."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c):
        broker_connected.set()
        for heartbeat, _ in _heartbeats:
            heartbeat.beat_now()

    def stop(self, c):
        broker_connected.clear()

    shutdown = stop


app.steps["consumer"].add(BrokerConnected)


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

    def beat():
        if broker_connected.is_set():
            heartbeats.worker_beat(hostname=hostname, queues=queues)

    _heartbeats.append(
        (
            heartbeats.Heartbeat(beat, name="mango-heartbeat").start(),
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
