"""Database connections outside Django's request pool, and a live one for work that must not
fail on a connection the server ended (after a database restart, a pool holds dead connections
until each is used once)."""

import psycopg
from django import db
from django.conf import settings
from psycopg_pool.base import AttemptWithBackoff

# psycopg_pool retries a lost server with exponential backoff (1, 2, 4, 8 … s): after a 20 s
# outage the pool would try again only ~10 s after the database is back, and every request
# would wait for that. A constant ~1 s retry (the jitter stays) brings it back within a second.
# Set once, for every pool of the process; tests/faults/test_outages.py pins the attribute.
POOL_RETRY_SECONDS = 1.0


def pool_retry_constant() -> None:
    AttemptWithBackoff.INITIAL_DELAY = POOL_RETRY_SECONDS
    AttemptWithBackoff.DELAY_BACKOFF = 1.0


# Keys of Django's connection parameters that psycopg.connect does not take, or that only make
# sense for Django's own connections.
_DJANGO_ONLY_PARAMS = {"cursor_factory", "context", "prepare_threshold", "pool", "server_side_binding"}


def database_connect(**overrides) -> psycopg.Connection:
    """A psycopg connection of its own (autocommit, never from Django's pool) to the default
    database: for what must not share Django's connections (files/liveness.py's lock session,
    readiness probes)."""
    params = {k: v for k, v in db.connection.get_connection_params().items() if k not in _DJANGO_ONLY_PARAMS}
    params.setdefault("connect_timeout", 3)
    params.update(overrides)
    return psycopg.connect(**params, autocommit=True)


def database_answers(*, timeout: float = 1.0) -> bool:
    """Whether the database accepts a new connection (outside any pool) within `timeout`."""
    try:
        database_connect(connect_timeout=max(1, round(timeout))).close()
    except psycopg.Error:
        return False
    return True


def connection_live() -> None:
    """Make this thread's Django connection a live one, outside any transaction: a pooled
    connection the server ended is given back (the pool drops it) and another taken, up to the
    pool's size. Costs one round trip. Raises the database's error when none is live (it is
    down). For the commit at the end of a long upload, whose body would otherwise be lost to a
    connection that died while it streamed."""
    connection = db.connection
    if connection.in_atomic_block:
        return
    attempts = settings.MANGO_DB_POOL_MAX_SIZE + 1 if settings.MANGO_DB_POOL else 2
    for _ in range(attempts):
        connection.ensure_connection()
        if connection.is_usable():
            return
        connection.close()
    connection.ensure_connection()
