"""Bytes of the session event logs: what an event stores as the per-workspace event-log quota
(MANGO_WORKSPACE_EVENTS_MAX_BYTES) counts it, and the quota's check on client events."""

import json
import time

from django.conf import settings
from django.db.models import Sum

from files.quotas import StorageQuotaExceeded
from sessions.models import Session


def _json_bytes(value: dict) -> int:
    """What a JSON column stores of `value`, as the event-bytes quota counts it (an empty object
    counts as its two braces, like the backfill in migration 0005). json.dumps escapes to ASCII:
    its length is its size in bytes."""
    return len(json.dumps(value)) if value else 2


def json_sizes(items: list[dict]) -> tuple[int, int]:
    """(bytes of the items' payloads, bytes of their private parts), each item dumped once."""
    payloads = sum(_json_bytes(item.get("payload", {})) for item in items)
    return payloads, sum(_json_bytes(item.get("private", {})) for item in items)


_USAGE_TTL_SECONDS = 5.0
_usage: dict[str, tuple[float, int]] = {}  # workspace id -> (read at, event bytes), per process


def _workspace_event_bytes(workspace_id: str, *, fresh: bool) -> int:
    """The workspace's event bytes: summed over its sessions when `fresh` or when this process's
    figure is over _USAGE_TTL_SECONDS old, else that figure (plus what it accepted since)."""
    cached = _usage.get(workspace_id)
    if not fresh and cached is not None and time.monotonic() - cached[0] < _USAGE_TTL_SECONDS:
        return cached[1]
    total = Session.objects.filter(workspace_id=workspace_id).aggregate(total=Sum("event_bytes"))["total"] or 0
    if len(_usage) > 10_000:
        _usage.clear()
    _usage[workspace_id] = (time.monotonic(), total)
    return total


def events_quota_check(*, session: Session, incoming: int) -> None:
    """Refuse client events that would take the workspace's event logs (all its sessions) over
    MANGO_WORKSPACE_EVENTS_MAX_BYTES. A soft quota, cheap per event: the sum over the sessions is
    read at most every few seconds per process and always before refusing; the runner's own
    events are not refused mid-turn (a turn that starts under the quota may end over it, and the
    next client event is refused until the tenant deletes sessions, which purges their logs)."""
    limit = settings.MANGO_WORKSPACE_EVENTS_MAX_BYTES
    if not limit:
        return
    used = _workspace_event_bytes(session.workspace_id, fresh=False)
    if used + incoming > limit:
        used = _workspace_event_bytes(session.workspace_id, fresh=True)
        if used + incoming > limit:
            raise StorageQuotaExceeded(
                f"The workspace's session event storage ({limit} bytes) is used up: {used} bytes stored,"
                f" {incoming} more sent. Delete sessions to free it."
            )
    read_at, _ = _usage[session.workspace_id]
    _usage[session.workspace_id] = (read_at, used + incoming)
