"""Whether a workspace has an enabled webhook endpoint, known without a database read per event
(core.interest.WorkspaceFlag: never wrongly "no"). An endpoint created or enabled marks it
before its commit; a deletion, a disable or an endpoint disabled for failing forgets it after
commit. An endpoint receives the events of changes that begin after its creation commits."""

import redis

from core.errors import ServiceUnavailable
from core.interest import WorkspaceFlag
from webhooks.models import WebhookEndpoint

KEY_PREFIX = "mango:webhooks:subscribed:"

_subscribed = WorkspaceFlag(
    KEY_PREFIX,
    lambda workspace_id: WebhookEndpoint.objects.filter(workspace_id=workspace_id, disabled_at__isnull=True).exists(),
)


def workspace_subscribed(*, workspace_id: str) -> bool:
    """Whether an event of the workspace may have an endpoint to go to (False: surely none)."""
    return _subscribed.get(workspace_id)


def workspace_subscribed_mark(*, workspace_id: str) -> None:
    """In the transaction that creates or enables an endpoint, before it commits."""
    try:
        _subscribed.mark(workspace_id)
    except (redis.RedisError, OSError) as exc:
        raise ServiceUnavailable("Webhook endpoints cannot be enabled while Redis is unreachable.") from exc


def workspace_subscribed_forget(*, workspace_id: str) -> None:
    """After the commit of a deletion or a disable: not known until the next event reads."""
    _subscribed.forget_on_commit(workspace_id)
