"""The process's Redis clients for the short commands of request and task code (flags, markers,
wake-ups, publishes): one per REDIS_URL and read timeout, made once. Thread-safe: a client's pool
lends each command a connection, so the process holds as many as it uses at once, not one per
thread that ever used Redis; redis-py's pool starts afresh in a forked child. Connecting waits 2 s
at most, so a Redis that is down fails these commands fast."""

import os
import threading

import redis
from django.conf import settings

_clients: dict[tuple[str, float], redis.Redis] = {}
_lock = threading.Lock()


def redis_client(*, socket_timeout: float = 2) -> redis.Redis:
    key = (settings.REDIS_URL, socket_timeout)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = redis.Redis.from_url(
                    key[0], socket_connect_timeout=2, socket_timeout=socket_timeout
                )
    return client


def _new_lock() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_new_lock)
