"""Who owns an open StorageIntent, and whether that owner is still alive.

Every process that opens intents (API processes, Celery workers, the test process) takes an
owner id from a PostgreSQL sequence (never reused) and holds a session-level advisory lock on
it for as long as it lives, on one small connection of its own. It stamps every intent it
opens with that id. PostgreSQL releases the lock when the owner's session ends — when the
process exits or is killed with SIGKILL, its socket closes and the backend goes away — so
"the lock on owner X is not held" proves "X is dead, and its open intents will never be
finished by it". Reconciliation reads the held locks from pg_locks (no locking on its side).

The connection is deliberately not one of Django's: those may come from a pool and be shared
or handed back, which would hand the lock (and the "alive" claim) to another request or drop
it early. Cost: one extra PostgreSQL connection per process that writes Files.

The lock is checked, not assumed. A living process can lose its session — the database
restarts, an operator terminates the backend, the network drops — and nothing else runs on
that connection to notice. So a watcher thread waits on the connection's socket (the server's
goodbye makes it readable at once) and owner_id() looks at it before handing out the id; when
the session is gone, the process takes a new id under a new lock and re-stamps its open intents
with it (again a few times, for intents stamped with the old id by a request in flight), within
a fraction of a second of the database answering again. Reconciliation therefore confirms an
owner dead only after RELOCK_SECONDS (files/reconcile.py), longer just after a database restart,
so a living process is never taken for a dead one.
"""

import logging
import os
import select
import threading
import time

import psycopg
from django.db import connection

from core.database import database_connect

logger = logging.getLogger(__name__)

# Advisory locks of two int4 keys: this class id ("MNGO") and the owner id.
LOCK_CLASS_ID = 0x4D4E474F & 0x7FFFFFFF
SEQUENCE = "files_intent_owner_seq"
# The owner of an intent its process gave up on (the store was unreachable while cleaning up).
# The sequence starts at 1, so no process ever holds it: reconciliation finishes such an intent
# as soon as the store answers, without the grace window reserved for unknown (NULL) owners.
GIVEN_UP = 0
# How often the watcher looks at the lock connection (and retries while the database is down),
# and how long reconciliation waits before it takes an unlocked owner for a dead one: the time a
# living process needs to notice a lost lock, take a new one and re-stamp its intents.
WATCH_SECONDS = 0.25
RELOCK_SECONDS = 2.0
# After a database restart every owner lost its lock at once: reconciliation gives them this long
# from the server's start before it believes any of them dead.
RESTART_SECONDS = 10.0
# How long intents stamped with a lost id are re-stamped again (a request may have read the old
# id just before the loss and commit its intent just after the first re-stamp).
RESTAMP_SECONDS = 10.0

_lock = threading.Lock()
_state: dict = {"pid": None, "owner": None, "connection": None, "watcher": None}
# Owner ids this process lost, old -> (new, re-stamp until monotonic time).
_moved: dict[int, tuple[int, float]] = {}
# Intents this process gave up on while the database was not answering: handed to GIVEN_UP by
# the watcher once it answers (never re-stamped with a new id meanwhile).
_given_up: set[int] = set()
# Connections inherited across fork(): kept referenced and never closed here, because closing
# would end the parent's session and with it the parent's lock.
_inherited: list = []


def _connect() -> psycopg.Connection:
    return database_connect(
        application_name=connection.get_connection_params().get("application_name")
        or f"mango-intent-owner-{os.getpid()}",
        # Keepalives make a vanished host's session (and so its lock) end within about a minute.
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
    )


def _session_lost(conn) -> bool:
    """Whether the owner connection's session has ended. A socket with nothing to read is a
    session the server has not ended; a readable one (the server's termination notice, or EOF)
    is confirmed with a query, which also consumes whatever the server sent."""
    if conn is None or conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if readable:
            conn.execute("SELECT 1")
    except (psycopg.Error, OSError, ValueError):
        return True
    return conn.closed or conn.broken


def _forget_if_forked() -> None:
    if _state["pid"] != os.getpid():
        if _state["connection"] is not None:
            _inherited.append(_state["connection"])
        _state.update(pid=os.getpid(), owner=None, connection=None, watcher=None)
        _moved.clear()
        _given_up.clear()


def _take_locked() -> int:
    """Open a new owner session and lock a new id; re-stamp the lost id's open intents. Caller
    holds _lock."""
    lost = _state["owner"]
    if _state["connection"] is not None:
        try:
            _state["connection"].close()
        except psycopg.Error:
            pass
        _state["connection"] = None
    conn = _connect()
    owner = conn.execute(f"SELECT nextval('{SEQUENCE}')").fetchone()[0]
    conn.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", (LOCK_CLASS_ID, owner))
    _state.update(owner=owner, connection=conn)
    if lost is not None:
        logger.warning("intent owner lock was lost; retaken", extra={"lost_owner": lost, "owner": owner})
        for old, (_, until) in list(_moved.items()):
            _moved[old] = (owner, until)
        _moved[lost] = (owner, time.monotonic() + RESTAMP_SECONDS)
        _restamp_locked()
    if _state["watcher"] is None:
        _state["watcher"] = threading.Thread(target=_watch, name="mango-intent-owner", daemon=True)
        _state["watcher"].start()
    return owner


def _restamp_locked() -> None:
    from files.models import StorageIntent

    table, conn = StorageIntent._meta.db_table, _state["connection"]
    if _given_up:
        ids = sorted(_given_up)
        conn.execute(f"UPDATE {table} SET owner = %s WHERE id = ANY(%s) AND state = 'open'", (GIVEN_UP, ids))
        _given_up.difference_update(ids)
    now = time.monotonic()
    for old, (new, until) in list(_moved.items()):
        conn.execute(f"UPDATE {table} SET owner = %s WHERE owner = %s AND state = 'open'", (new, old))
        if now > until:
            del _moved[old]


def give_up_later(intent_id: int) -> None:
    """Hand an open intent to GIVEN_UP as soon as the database answers (the caller could not
    write it: the database is down). Until then it keeps this process's id, so nothing finishes
    it under the process's feet; if the process dies first, its death frees it all the same."""
    with _lock:
        _forget_if_forked()
        if _state["owner"] is None:
            return  # no lock held: the intent's owner is already dead to reconciliation
        _given_up.add(intent_id)


def owner_id() -> int:
    """This process's owner id, holding its advisory lock (checked now; taken on first use and
    again, under a new id, when the session holding it has ended)."""
    with _lock:
        _forget_if_forked()
        if _state["owner"] is not None and not _session_lost(_state["connection"]):
            return _state["owner"]
        return _take_locked()


def _watch() -> None:
    """Notice a lost owner session without waiting for the next intent, and retake the lock as
    soon as the database answers again."""
    pid = os.getpid()
    while True:
        with _lock:
            if _state["pid"] != pid or _state["watcher"] is not threading.current_thread():
                return
            conn, owner = _state["connection"], _state["owner"]
        if owner is None:  # released: nothing to watch until the next owner_id()
            with _lock:
                if _state["owner"] is None:
                    _state["watcher"] = None
                    return
            continue
        try:
            fileno = conn.fileno() if conn is not None and not conn.closed else None
            if fileno is not None:
                select.select([fileno], [], [], WATCH_SECONDS)
            else:
                time.sleep(WATCH_SECONDS)
        except (OSError, ValueError, psycopg.Error):
            time.sleep(WATCH_SECONDS)
        with _lock:
            if _state["owner"] is None or _state["pid"] != pid:
                continue
            try:
                if _session_lost(_state["connection"]):
                    _take_locked()
                elif _moved or _given_up:
                    _restamp_locked()
            except (psycopg.Error, OSError):
                # The database is not answering yet: try again at the next tick.
                time.sleep(WATCH_SECONDS)


def release() -> None:
    """Give up ownership (end the owner session). Tests use it to play a dead process."""
    with _lock:
        conn = _state["connection"]
        _state.update(owner=None, connection=None)
        _moved.clear()
        _given_up.clear()
        if conn is not None and _state["pid"] == os.getpid():
            try:
                # Unlock first: the backend may outlive close() by a few milliseconds.
                conn.execute("SELECT pg_advisory_unlock_all()")
            except psycopg.Error:
                pass
            conn.close()


def owner_backend_pid() -> int | None:
    """The PostgreSQL backend pid of this process's owner session (tests terminate it)."""
    with _lock:
        conn = _state["connection"]
        return conn.info.backend_pid if conn is not None and _state["pid"] == os.getpid() else None


def live_owners() -> tuple[set[int], float]:
    """Owner ids whose lock is held right now, by any process, in this database, and how many
    seconds ago the database server started."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT objid::bigint, NULL FROM pg_locks
            WHERE locktype = 'advisory' AND classid = %s::oid AND objsubid = 2 AND granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            UNION ALL
            SELECT NULL, EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())::float8
            """,
            [LOCK_CLASS_ID],
        )
        rows = cursor.fetchall()
    return {row[0] for row in rows if row[0] is not None}, next(row[1] for row in rows if row[0] is None)
