"""What sessions tell other apps, sent inside the transaction of the change (Django signals run
synchronously in the sender's thread): a receiver's writes commit or roll back with the change.

session_changed(workspace_id, session_id, change, payload): `change` is a status event's type
(sessions.events.EventType: session.status_running, session.status_idle, …, session.updated,
session.deleted, span.outcome_evaluation_end) with its payload, or session.created /
session.archived, session.pending (input reached an idle session), session.status_run_started
(a worker began a run). Sent for primary sessions only (a child thread's status reaches its primary's
log as session.thread_*, which is announced there).
Webhooks' outbox listens (webhooks/receivers.py); sessions imports nothing of it.

A listener connects with session_changed_listen and a `wants(workspace_id)` gate that answers
without a database read when it can (webhooks: a cached "this workspace has no endpoint"): the
change of a workspace no gate wants is not announced, and its append pays no transaction for
it (tests/sessions/test_runtime_queries.py counts this)."""

from collections.abc import Callable

from django.dispatch import Signal

session_changed = Signal()

_gates: dict[str, Callable[[str], bool]] = {}


def session_changed_listen(receiver: Callable, *, dispatch_uid: str, wants: Callable[[str], bool]) -> None:
    session_changed.connect(receiver, dispatch_uid=dispatch_uid)
    _gates[dispatch_uid] = wants


def session_changed_wanted(*, workspace_id: str) -> bool:
    """Whether a change of the workspace is to be announced: some listener's gate wants it (a
    receiver connected without a gate is always wanted)."""
    if not session_changed.has_listeners():
        return False
    if len(session_changed.receivers) > len(_gates):
        return True
    return any(wants(workspace_id) for wants in _gates.values())
