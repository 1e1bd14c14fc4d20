"""What the apps tell each other of their resources' lifecycle, sent inside the transaction of
the change (Django signals run synchronously in the sender's thread): a receiver's writes commit
or roll back with the change, and the sender imports nothing of the receiver.

resource_changed(workspace_id, type, object_id, extra): `type` is the event's name as the SDK's
webhooks spell it (agent.created, environment.archived, memory_store.deleted, vault.created,
vault_credential.refresh_failed, deployment.paused, deployment_run.started, …), `object_id` the
resource's id and `extra` the type's own data fields (vault_credential.*: {"vault_id": …}).
Sent by agents, vaults, memory and deployments; webhooks' outbox listens (webhooks/receivers.py).
"""

from django.dispatch import Signal

resource_changed = Signal()


def resource_change_announce(*, workspace_id: str, type: str, object_id: str, extra: dict | None = None) -> None:
    resource_changed.send(sender=None, workspace_id=workspace_id, type=type, object_id=object_id, extra=extra or {})
