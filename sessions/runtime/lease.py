"""The lease: one runner at a time owns a session (Session.runner_token). One keeper thread per
worker process renews every lease the process holds in a single UPDATE every eighth of the
lease time (RENEWALS_PER_LEASE), and returns its database connection in between. A process that
dies leaves stale leases that another worker's reaper (runtime.fleet) hands on, and that worker
resumes the turn from the stored events. A runner whose lease was taken over cannot write any
more (services.events.runner_fence)."""

import logging
import threading

from django.conf import settings
from django.db import connection

from sessions.services.runner import session_lease_release, session_lease_take, session_leases_renew

logger = logging.getLogger(__name__)

# Renewals per lease period: a process whose keeper is starved (a loaded machine) keeps its leases
# unless it stays silent for 7/8 of the lease time.
RENEWALS_PER_LEASE = 8


def lease_acquire(*, session_id: str, token: str) -> bool:
    """Take the session's lease if it is free or stale."""
    return session_lease_take(session_id=session_id, token=token)


def lease_release(*, session_id: str, token: str) -> None:
    session_lease_release(session_id=session_id, token=token)


class Lease:
    """A held lease; `lost` once another runner took the session."""

    def __init__(self, session_id: str, token: str):
        self.session_id, self.token = session_id, token
        self.lost = False


class LeaseKeeper:
    """Renews the process's leases; started with the first lease it holds."""

    def __init__(self):
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._thread: threading.Thread | None = None

    def hold(self, *, session_id: str, token: str) -> Lease:
        lease = Lease(session_id, token)
        with self._lock:
            self._leases[token] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="mango-leases")
                self._thread.start()
        return lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(lease.token, None)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    def _run(self) -> None:
        while True:
            threading.Event().wait(max(0.25, settings.MANGO_SESSION_LEASE_SECONDS / RENEWALS_PER_LEASE))
            try:
                self.renew()
            except Exception:
                logger.exception("lease renewal failed")
            finally:
                connection.close()

    def renew(self) -> None:
        leases = self.held()
        if not leases:
            return
        kept = session_leases_renew(tokens=[lease.token for lease in leases])
        for lease in leases:
            if lease.token not in kept:
                lease.lost = True
                self.drop(lease)


keeper = LeaseKeeper()
