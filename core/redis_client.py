"""One Redis client per process (per REDIS_URL) for the short commands of request and task code:
flags and markers that must not wait long on a Redis that is down (2 s to connect or answer)."""

import redis
from django.conf import settings

_clients: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    return client
