"""Archiving terminates: an archived session (a primary or a child thread) accepts no more input,
is set `terminated` with its session.status_terminated (a child thread's
session.thread_status_terminated, cross-posted to its primary), and its self-hosted work item is
stopped, so that the SDK's worker and session tool runner, which stop on a terminated session,
let it go. A session with no turn running is terminated at once; a running one is given an
interrupt (as input of its own and its flag) and its runner terminates it once the turn stopped:
after an interrupted turn's idle (session_terminate_if_archived), else when it next looks for
input (sessions.services.runner.session_turn_begin, under the row lock it holds), so that a turn
that ends as usual pays no statement for it."""

from django.db import transaction

from sessions import notify
from sessions import thread_events as tev
from sessions.events import EventType
from sessions.models import Session
from sessions.queue.services import session_work_stop
from sessions.services.events import events_append, events_append_locked

TURN_RUNNING = (Session.Status.RUNNING, Session.Status.RESCHEDULING)


def session_archive_locked(*, locked: Session) -> None:
    """Archive the session whose row the caller holds locked; once only (an archived session is
    left as it is)."""
    if locked.archived_at is not None:
        return
    locked.archive()
    if locked.status in TURN_RUNNING:
        interrupt = {"type": EventType.USER_INTERRUPT, "payload": {"session_thread_id": None}}
        events_append(session_id=locked.id, items=[interrupt], pending=True)
        session_id = locked.id
        transaction.on_commit(lambda: notify.set_interrupt(session_id))
    else:
        session_terminate_locked(locked=locked)


def session_terminate_if_archived(*, session_id: str) -> None:
    """The runner's check after a session's idle: archived meanwhile, it is terminated now (once:
    under its row lock, a terminated session is left as it is)."""
    archived = Session.objects.filter(id=session_id, archived_at__isnull=False).exclude(
        status=Session.Status.TERMINATED
    )
    if not archived.exists():  # the common case: no lock taken
        return
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(id=session_id)
        if locked.archived_at is not None and locked.status != Session.Status.TERMINATED:
            session_terminate_locked(locked=locked)


def session_terminate(*, session_id: str) -> None:
    """Terminate the session (a child thread whose turn failed for good), once: under its row
    lock, a terminated or deleted one is left as it is."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().filter(id=session_id, deleted_at__isnull=True).first()
        if locked is not None and locked.status != Session.Status.TERMINATED:
            session_terminate_locked(locked=locked)


def session_terminate_locked(*, locked: Session) -> None:
    """Terminate the session whose row the caller holds locked."""
    locked.status = Session.Status.TERMINATED
    locked.save(update_fields=["status"])
    events_append_locked(session=locked, items=[tev.status_item(EventType.SESSION_STATUS_TERMINATED, locked)])
    session_work_stop(session_id=locked.id)
