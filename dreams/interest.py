"""Whether a workspace may have a pending or running dream, known without a database read per
session status change (the gate of dreams' session_changed listener; sessions.signals).

One Redis key per workspace, as webhooks.interest does it: "1" (it may have one), "0" (it has
none), or nothing (not known: the next change reads the database and stores the answer with
SET NX). A dream's create sets "1" inside its transaction before it commits, and a change
stores "0" only with NX, so the key is never wrongly "0" for a dream whose session exists (the
session is created after the dream commits). Values expire after KEY_SECONDS; Redis unreachable
means "maybe" (the listener then reads the database)."""

import redis
from django.conf import settings

from dreams.models import Dream

KEY_PREFIX = "mango:dreams:active:"
KEY_SECONDS = 3600

_clients: dict[str, redis.Redis] = {}


def _client() -> redis.Redis:
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    return client


def workspace_dreaming(workspace_id: str) -> bool:
    key = f"{KEY_PREFIX}{workspace_id}"
    try:
        value = _client().get(key)
    except (redis.RedisError, OSError):
        return True
    if value is not None:
        return value == b"1"
    found = Dream.objects.filter(workspace_id=workspace_id, status__in=["pending", "running"]).exists()
    try:
        _client().set(key, b"1" if found else b"0", nx=True, ex=KEY_SECONDS)
    except (redis.RedisError, OSError):
        pass
    return found


def workspace_dreaming_mark(workspace_id: str) -> None:
    """In the transaction that creates a dream, before it commits (a failure refuses the create:
    a "0" left standing would hide the dream's session from its listener)."""
    _client().set(f"{KEY_PREFIX}{workspace_id}", b"1", ex=KEY_SECONDS)
