"""What a session's appended events tell other apps (sessions.signals.session_changed), in the
transaction of the append: which items are announced, for which workspace, and whether any
listener wants that workspace's changes at all (when none does, the append pays no transaction
and no read for them)."""

from sessions.events import EventType
from sessions.models import Session
from sessions.signals import session_changed, session_changed_wanted

# The event types other apps hear of (sessions.signals.session_changed).
ANNOUNCED_TYPES = frozenset(
    t.value
    for t in (
        EventType.SESSION_STATUS_RUNNING,
        EventType.SESSION_STATUS_IDLE,
        EventType.SESSION_STATUS_RESCHEDULED,
        EventType.SESSION_STATUS_TERMINATED,
        EventType.SESSION_UPDATED,
        EventType.SESSION_DELETED,
        EventType.SESSION_THREAD_CREATED,
        EventType.SESSION_THREAD_STATUS_IDLE,
        EventType.SESSION_THREAD_STATUS_TERMINATED,
        EventType.SPAN_OUTCOME_EVALUATION_END,
    )
)


def announced_items(items: list[dict], *, workspace_id: str) -> list[dict]:
    """The items other apps hear of: none when no listener wants the workspace's changes
    (sessions.signals.session_changed_wanted, asked only when an item is of an announced type)."""
    announced = [item for item in items if str(item["type"]) in ANNOUNCED_TYPES]
    if not announced or not session_changed_wanted(workspace_id=workspace_id):
        return []
    return announced


_owners: dict[str, tuple[str, str | None]] = {}  # session id -> (workspace id, primary id), per process


def session_owner_remember(session: Session) -> None:
    """A session's workspace and primary never change: the runner's read of its session (at a
    turn's start) spares its appends the read (events_append's announced changes)."""
    if len(_owners) > 10_000:
        _owners.clear()
    _owners[session.id] = (session.workspace_id, session.primary_id)


def _owner(session_id: str) -> tuple[str, str | None] | None:
    owner = _owners.get(session_id)
    if owner is None:
        owner = Session.objects.filter(id=session_id).values_list("workspace_id", "primary_id").first()
        if owner is not None:
            if len(_owners) > 10_000:
                _owners.clear()
            _owners[session_id] = owner
    return owner


def announce(*, workspace_id: str, session_id: str, items: list[dict]) -> None:
    """session_changed for each of `items` (announced ones), in the caller's transaction."""
    for item in items:
        session_changed.send(
            sender=Session,
            workspace_id=workspace_id,
            session_id=session_id,
            change=str(item["type"]),
            payload=item.get("payload") or {},
        )


def announced_by_id(*, session_id: str, items: list[dict]) -> tuple[list[dict], str | None]:
    """announced_items for an append by session id: (the items, the session's workspace). A
    child thread's changes are not announced (they reach its primary's log as session.thread_*)."""
    if not session_changed.has_listeners() or not any(str(item["type"]) in ANNOUNCED_TYPES for item in items):
        return [], None
    owner = _owner(session_id)
    if owner is None or owner[1] is not None:
        return [], None
    return announced_items(items, workspace_id=owner[0]), owner[0]


def announce_change(*, workspace_id: str, session_id: str, change: str) -> None:
    """A change that is no appended event (session.created, session.archived), announced in the
    caller's transaction when a listener wants the workspace's changes."""
    if session_changed_wanted(workspace_id=workspace_id):
        session_changed.send(
            sender=Session, workspace_id=workspace_id, session_id=session_id, change=change, payload={}
        )
