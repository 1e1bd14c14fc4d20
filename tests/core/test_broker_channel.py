"""The broker channel of config/celery.py against the real Redis: one client per connection pool
for kombu's short commands (publish, the unacked index, acks) instead of a redis.Redis built per
call, and messages still go through it, from several threads at once."""

import threading
import uuid

from django.conf import settings
from kombu import Connection

from config.celery import RedisChannel


def _connection() -> Connection:
    return Connection(settings.CELERY_BROKER_URL, transport="config.celery:RedisTransport")


def test_one_client_per_pool_shared_by_the_channel():
    with _connection() as first, _connection() as second:
        channel = first.default_channel
        assert isinstance(channel, RedisChannel)
        client = channel._create_client()
        assert channel._create_client() is client
        assert client.connection_pool is channel.pool
        # Another connection (a reconnect makes one) has a pool, and so a client, of its own.
        assert second.default_channel._create_client() is not client
        # The asynchronous clients (BRPOP, pub/sub) stay kombu's own, one per call.
        assert channel._create_client(asynchronous=True) is not channel._create_client(asynchronous=True)


def test_messages_published_from_threads_through_one_channel_all_arrive():
    name = f"broker-channel-test-{uuid.uuid4().hex[:12]}"
    with _connection() as connection:
        queue = connection.SimpleQueue(name)
        sent = [f"message-{n}" for n in range(40)]
        lock = threading.Lock()

        def publish(part):
            for body in part:
                with lock:  # a kombu producer is one thread's at a time; the client underneath is shared
                    queue.put(body)

        threads = [threading.Thread(target=publish, args=(sent[n::4],)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        received = []
        for _ in sent:
            message = queue.get(timeout=5)
            received.append(message.payload)
            message.ack()
        assert sorted(received) == sorted(sent)
        queue.clear()
        queue.close()
