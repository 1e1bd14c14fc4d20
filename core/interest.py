"""A per-workspace yes/no that a hot path asks without a database read (does this workspace have
an enabled webhook endpoint? a live dream?), kept in Redis as an over-approximation that is never
wrongly "no":

- one key per workspace: "1" (maybe yes), "0" (surely no) or nothing (not known: the next ask
  reads the database and stores the answer with SET NX, so it never overwrites the "1" of a
  write that raced its read);
- what makes the answer yes sets "1" inside its transaction, before it commits (`mark`: a Redis
  failure refuses the write), so nothing that begins after the commit reads "0";
- what may make it no removes the key after its commit (`forget_on_commit`);
- Redis unreachable on an ask: not known, the caller reads as if yes;
- every value expires after KEY_SECONDS, so a forgotten workspace's key goes on its own.

Used by webhooks.interest and dreams.interest."""

from collections.abc import Callable

import redis
from django.db import transaction

from core.redis_client import redis_client

KEY_SECONDS = 3600


class WorkspaceFlag:
    def __init__(self, prefix: str, lookup: Callable[[str], bool]):
        self.prefix = prefix
        self.lookup = lookup  # the database's answer for a workspace id

    def key(self, workspace_id: str) -> str:
        return f"{self.prefix}{workspace_id}"

    def get(self, workspace_id: str) -> bool:
        """False only when the workspace surely has none."""
        try:
            value = redis_client().get(self.key(workspace_id))
        except (redis.RedisError, OSError):
            return True
        if value is not None:
            return value == b"1"
        found = self.lookup(workspace_id)
        try:
            redis_client().set(self.key(workspace_id), b"1" if found else b"0", nx=True, ex=KEY_SECONDS)
        except (redis.RedisError, OSError):
            pass
        return found

    def mark(self, workspace_id: str) -> None:
        """In the transaction that makes the answer yes, before it commits; raises
        redis.RedisError or OSError when Redis is unreachable (the caller refuses the write)."""
        redis_client().set(self.key(workspace_id), b"1", ex=KEY_SECONDS)

    def forget_on_commit(self, workspace_id: str) -> None:
        """After the commit of what may make the answer no: not known until the next ask."""

        def forget() -> None:
            try:
                redis_client().delete(self.key(workspace_id))
            except (redis.RedisError, OSError):
                pass  # a stale "1" only costs the next asks a read

        transaction.on_commit(forget)
