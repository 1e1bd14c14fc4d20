"""What sessions and the other apps tell webhooks. sessions.signals.session_changed and
core.signals.resource_changed are sent inside the transaction that makes the change
(synchronously, Django signals run in the sender's thread), so the outbox rows written here
commit or roll back with it; the senders import nothing of webhooks."""

from core.signals import resource_changed
from sessions.signals import session_changed_listen
from webhooks.events import RESOURCE_EXTRA_FIELDS, RESOURCE_TYPES, SESSION_CHANGES, THREAD_TYPES, webhook_types_for
from webhooks.interest import workspace_subscribed
from webhooks.services import webhook_event_emit


def _on_session_changed(sender, *, workspace_id: str, session_id: str, change: str, payload: dict, **kwargs) -> None:
    if change not in SESSION_CHANGES:
        return
    for type in webhook_types_for(change, payload):
        extra = {"session_thread_id": payload.get("session_thread_id")} if type in THREAD_TYPES else None
        webhook_event_emit(workspace_id=workspace_id, type=type, object_id=session_id, extra=extra)


def _on_resource_changed(sender, *, workspace_id: str, type: str, object_id: str, extra: dict, **kwargs) -> None:
    """agents, vaults, memory and deployments: the outbox row in the change's transaction (a
    workspace known to have no endpoint costs no read, webhooks.interest)."""
    if type not in RESOURCE_TYPES or not workspace_subscribed(workspace_id=workspace_id):
        return
    fields = RESOURCE_EXTRA_FIELDS.get(type.split(".")[0], ())
    data = {key: extra[key] for key in fields if key in extra} or None
    webhook_event_emit(workspace_id=workspace_id, type=type, object_id=object_id, extra=data)


def connect() -> None:
    resource_changed.connect(_on_resource_changed, dispatch_uid="webhooks.resource_changed")
    session_changed_listen(
        _on_session_changed,
        dispatch_uid="webhooks.session_changed",
        wants=lambda workspace_id: workspace_subscribed(workspace_id=workspace_id),
    )
