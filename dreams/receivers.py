"""The dream follows its session, in the transaction of the session's own status change
(sessions.signals.session_changed, sent synchronously inside it): the idle that ends the turn
commits after the memory write-back (runtime/turn.py go_idle), so a dream is `completed` exactly
when its store holds the result, and a crash before that commit leaves it `running` for the
session's recovery to finish. The gate (dreams.interest) answers from Redis, so the changes of
a workspace with no dream cost no read."""

from dreams.interest import workspace_dreaming
from dreams.models import Dream
from dreams.selectors import dream_for_session
from dreams.services import dream_end_locked
from sessions.models import Session
from sessions.signals import session_changed_listen

WATCHED = ("session.status_idle", "session.status_terminated", "session.deleted")


def _error_of(session_id: str, stop_reason: dict) -> dict:
    last = Session.objects.filter(id=session_id).values_list("last_error", flat=True).first()
    kind = stop_reason.get("type") or "unknown"
    message = f"The dream's session stopped ({kind})" + (f": {last}" if last else ".")
    return {"type": "internal_error" if kind == "retries_exhausted" else kind, "message": message[:1000]}


def _on_session_changed(sender, *, workspace_id: str, session_id: str, change: str, payload: dict, **kwargs) -> None:
    if change not in WATCHED:
        return
    dream = dream_for_session(session_id=session_id, for_update=True)
    if dream is None or dream.status != Dream.Status.RUNNING:
        return
    if change == "session.status_idle":
        stop_reason = payload.get("stop_reason") or {}
        if stop_reason.get("type") == "end_turn":
            dream_end_locked(dream, Dream.Status.COMPLETED)
        else:
            dream_end_locked(dream, Dream.Status.FAILED, _error_of(session_id, stop_reason))
    else:
        message = "The dream's session was archived or deleted before it finished."
        dream_end_locked(dream, Dream.Status.FAILED, {"type": "session_terminated", "message": message})


def connect() -> None:
    session_changed_listen(_on_session_changed, dispatch_uid="dreams.session_changed", wants=workspace_dreaming)
