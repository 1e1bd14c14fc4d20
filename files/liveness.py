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

If the owner connection breaks while the process lives (database restart, network cut), the
lock is gone and reconciliation may finish that process's open intents; that is safe — a
claimed intent refuses to publish its File (services._create_visible_file) — it only costs
the interrupted uploads a retry. The next intent takes a fresh owner id.
"""

import os
import threading

import psycopg
from django.db import connection

# Advisory locks of two int4 keys: this class id ("MNGO") and the owner id.
LOCK_CLASS_ID = 0x4D4E474F & 0x7FFFFFFF
SEQUENCE = "files_intent_owner_seq"
# Keys of Django's connection parameters that psycopg.connect does not take, or that only
# make sense for Django's own connections.
_DJANGO_ONLY_PARAMS = {"cursor_factory", "context", "prepare_threshold", "pool", "server_side_binding"}

_lock = threading.Lock()
_state: dict = {"pid": None, "owner": None, "connection": None}
# Connections inherited across fork(): kept referenced and never closed here, because closing
# would end the parent's session and with it the parent's lock.
_inherited: list = []


def _connect() -> psycopg.Connection:
    params = {k: v for k, v in connection.get_connection_params().items() if k not in _DJANGO_ONLY_PARAMS}
    params.setdefault("application_name", f"mango-intent-owner-{os.getpid()}")
    # Keepalives make a vanished host's session (and so its lock) end within about a minute.
    params.update(keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
    return psycopg.connect(**params, autocommit=True)


def _alive(conn) -> bool:
    return conn is not None and not conn.closed and not conn.broken


def owner_id() -> int:
    """This process's owner id, holding its advisory lock (taken on first use)."""
    with _lock:
        if _state["pid"] != os.getpid():
            if _state["connection"] is not None:
                _inherited.append(_state["connection"])
            _state.update(pid=os.getpid(), owner=None, connection=None)
        if _state["owner"] is not None and _alive(_state["connection"]):
            return _state["owner"]
        if _state["connection"] is not None:
            try:
                _state["connection"].close()
            except psycopg.Error:
                pass
        conn = _connect()
        owner = conn.execute(f"SELECT nextval('{SEQUENCE}')").fetchone()[0]
        conn.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", (LOCK_CLASS_ID, owner))
        _state.update(owner=owner, connection=conn)
        return owner


def release() -> None:
    """Give up ownership (end the owner session). Tests use it to play a dead process."""
    with _lock:
        conn = _state["connection"]
        _state.update(owner=None, connection=None)
        if conn is not None and _state["pid"] == os.getpid():
            try:
                # Unlock first: the backend may outlive close() by a few milliseconds.
                conn.execute("SELECT pg_advisory_unlock_all()")
            except psycopg.Error:
                pass
            conn.close()


def live_owners() -> set[int]:
    """Owner ids whose lock is held right now, by any process, in this database."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT objid::bigint FROM pg_locks
            WHERE locktype = 'advisory' AND classid = %s::oid AND objsubid = 2 AND granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """,
            [LOCK_CLASS_ID],
        )
        return {row[0] for row in cursor.fetchall()}
