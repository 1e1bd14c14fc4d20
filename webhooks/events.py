"""The webhook event vocabulary Mango sends (the SDK's BetaWebhook*EventData types), and one
builder for the envelope `{id, created_at, type: "event", data}`."""

import json
from datetime import datetime
from enum import StrEnum

from core.api import rfc3339
from core.ids import new_id


class WebhookEventType(StrEnum):
    SESSION_CREATED = "session.created"
    SESSION_PENDING = "session.pending"
    SESSION_STATUS_RUN_STARTED = "session.status_run_started"
    SESSION_RUNNING = "session.running"
    SESSION_IDLED = "session.idled"
    SESSION_STATUS_IDLED = "session.status_idled"
    SESSION_REQUIRES_ACTION = "session.requires_action"
    SESSION_STATUS_RESCHEDULED = "session.status_rescheduled"
    SESSION_STATUS_TERMINATED = "session.status_terminated"
    SESSION_UPDATED = "session.updated"
    SESSION_ARCHIVED = "session.archived"
    SESSION_DELETED = "session.deleted"
    SESSION_BUDGET_REACHED = "session.budget_reached"
    SESSION_OUTCOME_EVALUATION_ENDED = "session.outcome_evaluation_ended"
    SESSION_THREAD_CREATED = "session.thread_created"
    SESSION_THREAD_IDLED = "session.thread_idled"
    SESSION_THREAD_TERMINATED = "session.thread_terminated"


# The other resources' events, sent by their apps through core.signals.resource_changed with the
# SDK's type names (BetaWebhook<Resource><Change>EventData); vault_credential.* carry vault_id.
RESOURCE_TYPES = frozenset(
    {
        "agent.created", "agent.updated", "agent.archived", "agent.deleted",
        "environment.created", "environment.updated", "environment.archived", "environment.deleted",
        "memory_store.created", "memory_store.archived", "memory_store.deleted",
        "vault.created", "vault.archived", "vault.deleted",
        "vault_credential.created", "vault_credential.archived", "vault_credential.deleted",
        "vault_credential.refresh_failed",
        "deployment.created", "deployment.updated", "deployment.archived", "deployment.paused",
        "deployment.unpaused", "deployment.deleted",
        "deployment_run.started", "deployment_run.succeeded", "deployment_run.failed",
    }
)  # fmt: skip
# The extra data fields each resource type may carry (anything else a sender passes is dropped).
RESOURCE_EXTRA_FIELDS = {"vault_credential": ("vault_id",)}

TYPES = frozenset(t.value for t in WebhookEventType) | RESOURCE_TYPES

# A session's status event (sessions.events.EventType values, by their wire names) and the
# webhook types it is sent as. session.status_idle: session.status_idled always, and
# session.requires_action when the turn stopped for the client, session.budget_reached when the
# budget stopped it, else session.idled.
_FROM_SESSION_EVENT = {
    "session.status_running": (WebhookEventType.SESSION_RUNNING,),
    # Announced without an event of the log (sessions.services.announce.announce_change): input
    # reached an idle session (a run is asked for), and a worker began a run (a turn) of it.
    "session.pending": (WebhookEventType.SESSION_PENDING,),
    "session.status_run_started": (WebhookEventType.SESSION_STATUS_RUN_STARTED,),
    "session.status_rescheduled": (WebhookEventType.SESSION_STATUS_RESCHEDULED,),
    "session.status_terminated": (WebhookEventType.SESSION_STATUS_TERMINATED,),
    "session.updated": (WebhookEventType.SESSION_UPDATED,),
    "session.deleted": (WebhookEventType.SESSION_DELETED,),
    "session.created": (WebhookEventType.SESSION_CREATED,),
    "session.archived": (WebhookEventType.SESSION_ARCHIVED,),
    "span.outcome_evaluation_end": (WebhookEventType.SESSION_OUTCOME_EVALUATION_ENDED,),
    # A child thread's, as cross-posted to its primary's log (data.session_thread_id names it).
    "session.thread_created": (WebhookEventType.SESSION_THREAD_CREATED,),
    "session.thread_status_idle": (WebhookEventType.SESSION_THREAD_IDLED,),
    "session.thread_status_terminated": (WebhookEventType.SESSION_THREAD_TERMINATED,),
}
# The webhook types whose data names the thread (the SDK's session_thread_id).
THREAD_TYPES = frozenset(
    {
        WebhookEventType.SESSION_THREAD_CREATED,
        WebhookEventType.SESSION_THREAD_IDLED,
        WebhookEventType.SESSION_THREAD_TERMINATED,
    }
)
SESSION_CHANGES = frozenset([*_FROM_SESSION_EVENT, "session.status_idle"])


def webhook_types_for(change: str, payload: dict) -> tuple[WebhookEventType, ...]:
    if change == "session.status_idle":
        stop = (payload.get("stop_reason") or {}).get("type")
        second = {
            "requires_action": WebhookEventType.SESSION_REQUIRES_ACTION,
            "budget_reached": WebhookEventType.SESSION_BUDGET_REACHED,
        }.get(stop, WebhookEventType.SESSION_IDLED)
        return (WebhookEventType.SESSION_STATUS_IDLED, second)
    return _FROM_SESSION_EVENT.get(change, ())


def event_body(
    *, event_id: str, type: str, created_at: datetime, object_id: str, workspace_id: str, extra: dict | None = None
) -> str:
    """The body of one webhook event, as sent (and signed) on every attempt. Mango has no
    organizations: organization_id is the workspace's id. `extra`: the type's own data fields."""
    data = {"id": object_id, "organization_id": workspace_id, "type": type, "workspace_id": workspace_id}
    envelope = {"id": event_id, "created_at": rfc3339(created_at), "type": "event", "data": {**data, **(extra or {})}}
    return json.dumps(envelope, separators=(",", ":"))


def new_event_id() -> str:
    return new_id("wevt")
