"""The webhook event vocabulary Mango sends (the SDK's BetaWebhook*EventData types), and one
builder for the envelope `{id, created_at, type: "event", data}`."""

import json
from datetime import datetime
from enum import StrEnum

from core.api import rfc3339
from core.ids import new_id


class WebhookEventType(StrEnum):
    SESSION_CREATED = "session.created"
    SESSION_RUNNING = "session.running"
    SESSION_IDLED = "session.idled"
    SESSION_STATUS_IDLED = "session.status_idled"
    SESSION_REQUIRES_ACTION = "session.requires_action"
    SESSION_STATUS_RESCHEDULED = "session.status_rescheduled"
    SESSION_STATUS_TERMINATED = "session.status_terminated"
    SESSION_UPDATED = "session.updated"
    SESSION_ARCHIVED = "session.archived"
    SESSION_DELETED = "session.deleted"


TYPES = frozenset(t.value for t in WebhookEventType)

# A session's status event (sessions.events.EventType values, by their wire names) and the
# webhook types it is sent as. session.status_idle: session.status_idled always, and
# session.requires_action when the turn stopped for the client, else session.idled.
_FROM_SESSION_EVENT = {
    "session.status_running": (WebhookEventType.SESSION_RUNNING,),
    "session.status_rescheduled": (WebhookEventType.SESSION_STATUS_RESCHEDULED,),
    "session.status_terminated": (WebhookEventType.SESSION_STATUS_TERMINATED,),
    "session.updated": (WebhookEventType.SESSION_UPDATED,),
    "session.deleted": (WebhookEventType.SESSION_DELETED,),
    "session.created": (WebhookEventType.SESSION_CREATED,),
    "session.archived": (WebhookEventType.SESSION_ARCHIVED,),
}
SESSION_CHANGES = frozenset([*_FROM_SESSION_EVENT, "session.status_idle"])


def webhook_types_for(change: str, payload: dict) -> tuple[WebhookEventType, ...]:
    if change == "session.status_idle":
        stop = (payload.get("stop_reason") or {}).get("type")
        second = (
            WebhookEventType.SESSION_REQUIRES_ACTION if stop == "requires_action" else WebhookEventType.SESSION_IDLED
        )
        return (WebhookEventType.SESSION_STATUS_IDLED, second)
    return _FROM_SESSION_EVENT.get(change, ())


def event_body(*, event_id: str, type: str, created_at: datetime, object_id: str, workspace_id: str) -> str:
    """The body of one webhook event, as sent (and signed) on every attempt. Mango has no
    organizations: organization_id is the workspace's id."""
    envelope = {
        "id": event_id,
        "created_at": rfc3339(created_at),
        "type": "event",
        "data": {"id": object_id, "organization_id": workspace_id, "type": type, "workspace_id": workspace_id},
    }
    return json.dumps(envelope, separators=(",", ":"))


def new_event_id() -> str:
    return new_id("wevt")
