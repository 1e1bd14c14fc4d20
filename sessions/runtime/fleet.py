"""A worker as one member of a fleet. Workers on any number of hosts share sessions through the
queue; the lease (runtime.lease) makes one of them the runner of a session at a time.

* Reaper: every MANGO_SESSION_REAPER_SECONDS each worker process looks for sessions whose
  runner died (stale lease, or running without a runner) or whose wake-up was lost, and
  enqueues a run for them, so a killed worker's turns resume elsewhere within the lease time
  plus one reaper interval, without waiting for the beat schedule.
* Drain: on warm shutdown (SIGTERM) the worker stops taking messages and every turn it runs
  hands its session back at its next safe point (no tool use open, no model call in flight):
  the lease is released, the session stays running, and a run is enqueued for another worker,
  which resumes the turn. No event is lost or written twice.
"""

import logging
import threading
import time

from celery import signals
from django.conf import settings
from django.db import connection

from sessions.runtime.control import draining

logger = logging.getLogger(__name__)


class Reaper(threading.Thread):
    def __init__(self, recover):
        super().__init__(daemon=True, name="mango-reaper")
        self.recover = recover
        self.stopped = threading.Event()

    def run(self) -> None:
        interval = settings.MANGO_SESSION_REAPER_SECONDS
        ended = time.monotonic()
        while not self.stopped.wait(interval):
            if draining.is_set():
                return
            began = time.monotonic()
            try:
                self.recover()
            except Exception:
                logger.exception("session reaper pass failed")
            finally:
                connection.close()
            # A pass that starts late (this thread starved) or takes long delays every recovery by
            # as much: said when it happens, as the passes themselves log nothing when all is well.
            waited, took = began - ended, time.monotonic() - began
            if took > 2 * interval or waited > 3 * interval:
                logger.warning(
                    "session reaper pass late or slow",
                    extra={"waited_seconds": round(waited, 2), "pass_seconds": round(took, 2)},
                )
            ended = time.monotonic()


_reapers: list[Reaper] = []


def fleet_connect(recover) -> None:
    """Connect the worker signals (called once by sessions.tasks); `recover` enqueues runs for
    sessions that need a runner."""

    @signals.worker_ready.connect(weak=False)
    def _start_reaper(**kwargs):
        if settings.MANGO_SESSION_REAPER_SECONDS > 0:
            reaper = Reaper(recover)
            reaper.start()
            _reapers.append(reaper)

    @signals.worker_shutting_down.connect(weak=False)
    def _drain(**kwargs):
        logger.warning("worker draining: running turns hand their sessions back")
        draining.set()
        for reaper in _reapers:
            reaper.stopped.set()
