"""Whether a workspace has an enabled webhook endpoint, known without a database read per event.

One Redis key per workspace holds "1" (it may have one), "0" (it has none) or nothing (not
known: the next event reads the database and stores the answer with SET NX). The key is an
over-approximation that is never wrongly "0":
- an endpoint created or enabled sets "1" inside its transaction, before it commits (a
  failure refuses the write), so no event that begins after the commit reads "0";
- an event stores "0" only with NX, so it never overwrites the "1" of a creation that raced its
  read;
- a deletion or disable removes the key after commit (not known: the next event reads again);
- Redis unreachable on an event's read: not known, the outbox reads the database as before.
An endpoint receives the events of changes that begin after its creation commits. Every value
expires after KEY_SECONDS (then read again), so a forgotten workspace's key goes on its own."""

import redis
from django.conf import settings
from django.db import transaction

from core.errors import ServiceUnavailable
from webhooks.models import WebhookEndpoint

KEY_PREFIX = "mango:webhooks:subscribed:"
KEY_SECONDS = 3600

_clients: dict[str, redis.Redis] = {}


def _client() -> redis.Redis:
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    return client


def _key(workspace_id: str) -> str:
    return f"{KEY_PREFIX}{workspace_id}"


def workspace_subscribed(*, workspace_id: str) -> bool:
    """Whether an event of the workspace may have an endpoint to go to (False: surely none)."""
    try:
        value = _client().get(_key(workspace_id))
    except (redis.RedisError, OSError):
        return True
    if value is not None:
        return value == b"1"
    found = WebhookEndpoint.objects.filter(workspace_id=workspace_id, disabled_at__isnull=True).exists()
    try:
        _client().set(_key(workspace_id), b"1" if found else b"0", nx=True, ex=KEY_SECONDS)
    except (redis.RedisError, OSError):
        pass
    return found


def workspace_subscribed_mark(*, workspace_id: str) -> None:
    """In the transaction that creates or enables an endpoint, before it commits."""
    try:
        _client().set(_key(workspace_id), b"1", ex=KEY_SECONDS)
    except (redis.RedisError, OSError) as exc:
        raise ServiceUnavailable("Webhook endpoints cannot be enabled while Redis is unreachable.") from exc


def workspace_subscribed_forget(*, workspace_id: str) -> None:
    """After the commit of a deletion or a disable: not known until the next event reads."""

    def forget() -> None:
        try:
            _client().delete(_key(workspace_id))
        except (redis.RedisError, OSError):
            pass  # a stale "1" only costs the next events a read

    transaction.on_commit(forget)
