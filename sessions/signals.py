"""What sessions tell other apps, sent inside the transaction of the change (Django signals run
synchronously in the sender's thread): a receiver's writes commit or roll back with the change.

session_changed(workspace_id, session_id, change, payload): `change` is a status event's type
(sessions.events.EventType: session.status_running, session.status_idle, …, session.updated,
session.deleted, span.outcome_evaluation_end) with its payload, or session.created /
session.archived. Sent for primary sessions only (a child thread's status reaches its primary's
log as session.thread_*, which is announced there).
Webhooks' outbox listens (webhooks/receivers.py); sessions imports nothing of it."""

from django.dispatch import Signal

session_changed = Signal()
