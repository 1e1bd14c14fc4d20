"""Stopping a turn: an interrupt (the Redis flag, confirmed against the event log), the
session's deletion, or a lost lease. Blocking waits (the upstream call, back-off sleeps) poll
these so that an interrupt never waits for them."""

import concurrent.futures
import time
from collections.abc import Callable

from sessions import notify
from sessions.runtime.lease import Heartbeat
from sessions.selectors import session_interrupt_pending, session_is_deleted

POLL_SECONDS = 0.1


class Stop(Exception):
    """The turn must stop now: interrupted, session deleted, or lease lost."""


class TurnControl:
    def __init__(self, *, session_id: str, heartbeat: Heartbeat):
        self.session_id = session_id
        self.heartbeat = heartbeat

    @property
    def lease_lost(self) -> bool:
        return self.heartbeat.lost

    def should_stop(self) -> bool:
        if self.heartbeat.lost:
            return True
        if not notify.interrupt_flagged(self.session_id):
            return False
        return session_interrupt_pending(session_id=self.session_id) or session_is_deleted(session_id=self.session_id)

    def check_stop(self) -> None:
        if self.should_stop():
            raise Stop()

    def check_deleted(self) -> None:
        if session_is_deleted(session_id=self.session_id):
            raise Stop()

    def interruptible(self, call: Callable[[], object], on_abandon: Callable[[], None] | None = None):
        """Run a blocking call in a helper thread so an interrupt need not wait for it."""
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            future = executor.submit(call)
            while True:
                try:
                    return future.result(timeout=POLL_SECONDS)
                except concurrent.futures.TimeoutError:
                    try:
                        self.check_stop()
                    except Stop:
                        if on_abandon is not None:
                            on_abandon()
                        raise
        finally:
            executor.shutdown(wait=False)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_stop()
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
