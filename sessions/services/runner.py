"""The runner's writes: the lease, a turn's start, events marked processed, the session's status
and last error, the sandbox's state. The runtime (sessions.runtime) says what happened through
these; it makes no query of its own (tests/sessions/test_runtime_roles.py)."""

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.lookups import joined_row
from sessions import events as ev
from sessions import notify
from sessions import thread_events as tev
from sessions.events import CLIENT_ANSWER_TYPES, RUNNER_INPUT_TYPES, EventType, tool_use_id_of
from sessions.models import Session, SessionEvent, SessionResource
from sessions.selectors.runner import (
    session_answered_tool_use_ids,
    session_denied_tool_use_ids,
    session_pending_input,
    session_required_action_ids,
)
from sessions.services.announce import announce_change, session_owner_remember
from sessions.services.events import events_append, events_append_locked
from sessions.services.termination import session_terminate_locked
from sessions.thread_events import thread_copy_id

ACTIVE = (Session.Status.RUNNING, Session.Status.RESCHEDULING)


# --- the lease ---------------------------------------------------------------------------------


def session_lease_take(*, session_id: str, token: str) -> bool:
    """Take the session's lease if it is free or stale."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.MANGO_SESSION_LEASE_SECONDS)
    return (
        Session.objects.filter(id=session_id)
        .filter(Q(runner_token__isnull=True) | Q(runner_heartbeat_at__lt=stale))
        .update(runner_token=token, runner_heartbeat_at=now)
        == 1
    )


def session_lease_release(*, session_id: str, token: str) -> None:
    Session.objects.filter(id=session_id, runner_token=token).update(runner_token=None, runner_heartbeat_at=None)


def session_leases_renew(*, tokens: list[str]) -> set[str]:
    """Renew the leases of `tokens`; returns the tokens still held (the others were taken over)."""
    Session.objects.filter(runner_token__in=tokens).update(runner_heartbeat_at=timezone.now())
    return set(Session.objects.filter(runner_token__in=tokens).values_list("runner_token", flat=True))


# --- a turn's start ----------------------------------------------------------------------------


def session_events_mark_processed(*, event_ids: list[str], only_unprocessed: bool = False) -> None:
    """The runner has acted on these client events (they count in the conversation from now)."""
    if not event_ids:
        return
    rows = SessionEvent.objects.filter(id__in=event_ids)
    if only_unprocessed:
        rows = rows.filter(processed_at__isnull=True)
    rows.update(processed_at=timezone.now())


def session_events_refused(*, event_ids: list[str], reason: str) -> None:
    """The upstream refused these client events' content: it is left out of later model
    requests (processors/conversation.py reads private["model_refused"]); the public event and
    the log stay as they were."""
    for event in SessionEvent.objects.filter(id__in=event_ids).only("id", "private"):
        event.private = {**event.private, "model_refused": reason}
        event.save(update_fields=["private"])


@dataclass
class ClientWait:
    """The tool uses a runner handed to its client at its last idle (requires_action), and those
    answered since: what _starts_turn otherwise reads back from the log. Valid only while the
    same runner has held the lease since that idle (only it marks input processed meanwhile)."""

    needed: frozenset[str]
    answered: set[str] = field(default_factory=set)
    confirmed: bool = False  # a user.tool_confirmation came since


@dataclass
class TurnStart:
    """What the runner found under the session's lock (session_turn_begin)."""

    session: Session
    resume: bool = False  # the session was running: a worker died mid-turn, resume it
    interrupted: bool = False  # a running turn was interrupted: it must go idle
    released: bool = False  # nothing to do: the lease was released (no turn started)
    # The turn may find confirmed or denied tool uses to act on (false only when the runner's
    # ClientWait saw no user.tool_confirmation since it handed tools out: none can be pending).
    confirmations: bool = True


def session_turn_begin(*, session_id: str, token: str, wait: ClientWait | None = None) -> TurnStart | None:
    """Under the session's row lock: flush what was sent before the last interrupt, then either
    start a turn (session.status_running, the pending input marked processed) or release the
    lease (so a later append enqueues a runner; `released`). None when the lease is gone or
    the session deleted. `wait`: what the calling runner handed its client (read from the log
    when None)."""
    with transaction.atomic():
        session = joined_row(Session, where="t.id = %s", params=[session_id], for_update=True)
        if session is None:
            raise Session.DoesNotExist(session_id)
        session_owner_remember(session)
        if session.runner_token != token:
            return None
        if session.deleted_at is not None:
            session.runner_token = None
            session.save(update_fields=["runner_token"])
            return None
        pending = session_pending_input(session_id=session_id)
        self_hosted = session.tool_host.client_runs_tools
        if wait is not None:  # every answer counts, those flushed by an interrupt too (as in the log)
            wait.answered.update(filter(None, (_answer_id(e, self_hosted=self_hosted) for e in pending)))
            wait.confirmed |= any(e.type == EventType.USER_TOOL_CONFIRMATION for e in pending)
        last = max((i for i, e in enumerate(pending) if e.type == EventType.USER_INTERRUPT), default=None)
        interrupted = False
        if last is not None:  # everything up to the last interrupt was sent before the stop
            session_events_mark_processed(event_ids=[e.id for e in pending[: last + 1]])
            transaction.on_commit(lambda: notify.clear_interrupt(session_id))
            pending, interrupted = pending[last + 1 :], session.status in ACTIVE
        if interrupted:
            return TurnStart(session=session, interrupted=True)
        resume = session.status in ACTIVE
        # An archived session starts no turn (input sent before the archive is left): one that went
        # idle since its archive is terminated now (sessions.services.termination). Nor does a
        # terminated one (a child thread whose turn failed for good).
        ended = session.archived_at is not None or session.status == Session.Status.TERMINATED
        archived = ended and not resume
        if archived and session.status != Session.Status.TERMINATED:
            session_terminate_locked(locked=session)
        child = session.primary_id is not None
        if archived or (
            not resume and not _starts_turn(session_id, pending, self_hosted=self_hosted, wait=wait, child=child)
        ):
            session.runner_token = None
            session.runner_heartbeat_at = None
            session.save(update_fields=["runner_token", "runner_heartbeat_at"])
            return TurnStart(session=session, released=True)
        _turn_start(session, pending, resume=resume)
    confirmations = resume or wait is None or wait.confirmed
    return TurnStart(session=session, resume=resume, confirmations=confirmations)


def _starts_turn(
    session_id: str,
    pending: list[SessionEvent],
    *,
    self_hosted: bool = False,
    wait: ClientWait | None = None,
    child: bool = False,
) -> bool:
    """Whether idle-session input starts a turn. Partial answers to requires_action are marked
    processed and the session keeps waiting for the rest. On self_hosted, allowing a confirmed
    tool is no answer: the client runs it, and its user.tool_result is (a denial answers). A
    thread's message to a coordinator that waits on its client is taken the same way (it joins
    the conversation when the answers start the turn)."""
    if not pending:
        return False
    if any(e.type not in CLIENT_ANSWER_TYPES and e.type != EventType.AGENT_THREAD_MESSAGE_RECEIVED for e in pending):
        return True
    if wait is not None:  # the runner knows what it handed out and what was answered since
        needed, answered = wait.needed, wait.answered
    else:
        needed = set(session_required_action_ids(session_id=session_id, child=child))
        if self_hosted:
            answered = session_answered_tool_use_ids(
                session_id=session_id, types=(EventType.USER_TOOL_RESULT, EventType.USER_CUSTOM_TOOL_RESULT)
            ) | set(session_denied_tool_use_ids(session_id=session_id))
        else:
            answered = session_answered_tool_use_ids(session_id=session_id, types=CLIENT_ANSWER_TYPES)
        # A coordinator's requires_action lists its threads' tool uses by their copies' ids; the
        # client may have answered one by the thread's own id (sessions.thread_events.thread_copy_id).
        answered |= {thread_copy_id(event_id) for event_id in answered}
    if needed - answered:
        session_events_mark_processed(event_ids=[e.id for e in pending])
        return False
    return True


def _answer_id(event: SessionEvent, *, self_hosted: bool) -> str | None:
    """The tool use a client event answers, as _starts_turn counts answers (None: none)."""
    if event.type == EventType.USER_TOOL_CONFIRMATION and self_hosted and event.payload.get("result") == "allow":
        return None
    return tool_use_id_of(event.payload) if event.type in CLIENT_ANSWER_TYPES else None


def _turn_start(session: Session, pending: list[SessionEvent], *, resume: bool) -> None:
    """session.status_running (after a session.error when resuming), the session running and the
    pending input marked processed, in one statement (the caller holds the session's row lock);
    `session` is updated to match."""
    items = []
    if resume:
        message = "The worker running this session stopped; resuming the turn."
        items.append(ev.item(EventType.SESSION_ERROR, ev.session_error(message=message, retrying=True)))
    items.append(tev.status_item(EventType.SESSION_STATUS_RUNNING, session))
    if session.primary_id is None:  # a run begins on a worker (webhooks: session.status_run_started)
        announce_change(workspace_id=session.workspace_id, session_id=session.id, change="session.status_run_started")
    rows = events_append(session_id=session.id, items=items, start_turn=True, processed_ids=[e.id for e in pending])
    session.status = Session.Status.RUNNING
    session.turn_started_at = session.turn_started_at or rows[-1].created_at
    session.last_seq = rows[-1].seq
    session.updated_at = rows[-1].created_at
    session.__dict__.pop("event_bytes", None)  # deferred again: a later read loads the new total


def session_interrupts_flush(*, session_id: str) -> None:
    """A stopped turn: the runner input sent up to the last pending interrupt is processed."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(id=session_id)
        last = (
            SessionEvent.objects.filter(session=session, type=EventType.USER_INTERRUPT, processed_at__isnull=True)
            .order_by("-seq")
            .first()
        )
        if last is not None:
            SessionEvent.objects.filter(
                session=session, processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES, seq__lte=last.seq
            ).update(processed_at=timezone.now())
    notify.clear_interrupt(session_id)


# --- status, errors, the sandbox ---------------------------------------------------------------


def session_error_record(*, session_id: str, payload: dict, last_error: str, rescheduling: bool) -> None:
    """session.error (+ session.status_rescheduled when the call is retried), and the detail in
    the session's last_error (for operators; never in the event)."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(id=session_id)
        items = [ev.item(EventType.SESSION_ERROR, payload)]
        session.last_error = last_error
        fields = ["last_error"]
        if rescheduling:
            items.append(tev.status_item(EventType.SESSION_STATUS_RESCHEDULED, session))
            session.status = Session.Status.RESCHEDULING
            fields.append("status")
        session.save(update_fields=fields)
        events_append_locked(session=session, items=items)


def session_status_running_set(*, session_id: str) -> None:
    """Back to running after a rescheduled call (session.status_running), unless it already is."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(id=session_id)
        if session.status == Session.Status.RUNNING:
            return
        session.status = Session.Status.RUNNING
        session.save(update_fields=["status"])
        events_append_locked(session=session, items=[tev.status_item(EventType.SESSION_STATUS_RUNNING, session)])


def session_last_error_set(*, session_id: str, text: str) -> None:
    Session.objects.filter(id=session_id).update(last_error=text)


def session_sandbox_failed(*, session_id: str, error: str) -> None:
    Session.objects.filter(id=session_id).update(sandbox_state=Session.SandboxState.FAILED, last_error=error)


def session_sandbox_running(*, session: Session, ref: str) -> None:
    """Record the session's running sandbox (on `session` too); no write when nothing changed."""
    if session.sandbox_ref != ref or session.sandbox_state != Session.SandboxState.RUNNING:
        session.sandbox_ref, session.sandbox_state = ref, Session.SandboxState.RUNNING
        Session.objects.filter(id=session.id).update(sandbox_ref=ref, sandbox_state=Session.SandboxState.RUNNING)


def session_repository_tried(*, resource_id: str, ref: str, error_type: str = "") -> None:
    """A repository was cloned into sandbox `ref` (error_type empty) or failed there with that
    repository_* error; either way it is not tried again in this sandbox unless its token is
    rotated."""
    SessionResource.objects.filter(pk=resource_id).update(
        placed_ref=ref, clone_error=error_type, updated_at=timezone.now()
    )
