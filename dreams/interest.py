"""Whether a workspace may have a pending or running dream, known without a database read per
session status change (the gate of dreams' session_changed listener; sessions.signals), by
core.interest.WorkspaceFlag: never wrongly "no". A dream's create marks it inside its
transaction before it commits (the dream's session is created after that commit)."""

from core.interest import WorkspaceFlag
from dreams.models import Dream

KEY_PREFIX = "mango:dreams:active:"

_dreaming = WorkspaceFlag(
    KEY_PREFIX,
    lambda workspace_id: Dream.objects.filter(workspace_id=workspace_id, status__in=["pending", "running"]).exists(),
)


def workspace_dreaming(workspace_id: str) -> bool:
    return _dreaming.get(workspace_id)


def workspace_dreaming_mark(workspace_id: str) -> None:
    """In the transaction that creates a dream, before it commits (a failure refuses the create:
    a "0" left standing would hide the dream's session from its listener)."""
    _dreaming.mark(workspace_id)
