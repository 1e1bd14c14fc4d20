"""What a session's runner does between and around its model calls (the mixin RunnerWaits of
sessions.runtime.turn's Runner): wait for its client after handing it tools (linger), wait in a
coordinator's turn for its threads, go idle (a child thread's report to its primary first), and
record a failed turn; the spend a turn counts against the session's budget (Spend)."""

import logging
import threading
import time

from django.conf import settings

from agents.multiagent import workflows_enabled
from sessions import events as ev
from sessions import notify, pricing
from sessions import thread_events as tev
from sessions.events import EventType
from sessions.models import Session
from sessions.queue.services import session_work_ensure
from sessions.runtime.control import WAKE_SECONDS, db_release, draining, watch
from sessions.runtime.fairness import turn_slot_lent
from sessions.selectors.runner import (
    session_by_id,
    session_family_list_cost,
    session_interrupt_pending,
    session_thread_messages_pending,
    session_threads_busy,
    session_threads_handed,
    session_turn_reply,
)
from sessions.services.events import SessionGone, events_append, session_event_append
from sessions.services.memory_mounts import memory_writeback_at_idle
from sessions.services.outputs import outputs_publish_at_idle
from sessions.services.runner import ClientWait, session_last_error_set
from sessions.services.termination import session_terminate, session_terminate_if_archived
from sessions.services.threads import ThreadRefused, thread_copies_ensure, thread_message_send
from sessions.services.workflows import workflow_run_advance, workflow_runs_advance, workflow_thread_report

logger = logging.getLogger("sessions.runtime.turn")

# A coordinator waiting for its threads looks at them at least this often (their messages wake it
# at once through the input flag).
THREAD_WAIT_SECONDS = 1.0


class _Lingering:
    """How many of the process's threads wait for their client (Runner.linger) or, in a
    coordinator's turn, for its threads (Runner._await_threads): half of them at most, so turns
    that can run always find threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def acquire(self) -> bool:
        with self._lock:
            if self.count >= max(1, settings.CELERY_WORKER_CONCURRENCY // 2):
                return False
            self.count += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.count -= 1


_lingering = _Lingering()


class RunnerWaits:
    """Runner's waits and idles (sessions.runtime.turn.Runner: session_id, token, control,
    awaiting_client, wait, turn_session)."""

    def linger(self) -> None:
        """After a turn that handed tool uses to the client: keep the lease (no database
        connection, no polling of our own: the process's watcher reads the input flag with the
        interrupt flags) until the client's input is flagged, an interrupt, a drain or
        MANGO_RUNNER_LINGER_SECONDS; next_work then takes the input, or lets the session go. The
        API sends no task for input while the lease is held (services.user_events)."""
        if not self.awaiting_client:
            return
        self.awaiting_client = False
        seconds = settings.MANGO_RUNNER_LINGER_SECONDS
        if seconds <= 0 or threading.current_thread() is threading.main_thread() or not _lingering.acquire():
            return  # a runner in a process's main thread (prefork, solo) would hold the whole process
        db_release()
        woken = threading.Event()
        watch.wake_on_flag(self.session_id, woken)
        watch.wake_on_input(self.session_id, woken)
        try:
            deadline = time.monotonic() + seconds
            while not woken.is_set() and not draining.is_set() and not self.control.lease_lost:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                woken.wait(min(left, WAKE_SECONDS))
        finally:
            watch.unwake(self.session_id, woken)
            watch.unwake_input(self.session_id)
            _lingering.release()
        notify.clear_input(self.session_id)

    # --- work selection ----------------------------------------------------------------------

    def _await_threads(self) -> bool:
        """A coordinator's turn ends only once its threads are done: while one is at work, wait
        (no database connection held; woken by the input flag a thread's message raises, or an
        interrupt) for a message. True when one arrived (the next model call reads it), False
        when no thread works and none wrote. Busy is read before pending: a thread seen done had
        committed its report before its idle."""
        self._runs_advance()
        busy = session_threads_busy(session_id=self.session_id)
        if session_thread_messages_pending(session_id=self.session_id):
            return True
        if not busy:
            return False
        # Waiting keeps this worker thread: as many as linger at most (half the pool, never a
        # prefork or solo worker's main thread), and MANGO_COORDINATOR_WAIT_SECONDS at most. Past
        # either the turn ends here (idle), and a thread's report starts the coordinator's next.
        if threading.current_thread() is threading.main_thread() or not _lingering.acquire():
            return False
        try:
            with turn_slot_lent():  # its threads may need the workspace's turn slot it holds
                return self._threads_wait(time.monotonic() + settings.MANGO_COORDINATOR_WAIT_SECONDS)
        finally:
            _lingering.release()

    def _runs_advance(self) -> None:
        """Move the coordinator's open workflow runs (a step a crash left, a timeout due)."""
        if workflows_enabled((self.turn_session.agent_snapshot or {}).get("multiagent")):
            workflow_runs_advance(primary_id=self.session_id)

    def _threads_wait(self, deadline: float) -> bool:
        while True:
            self._runs_advance()
            busy = session_threads_busy(session_id=self.session_id)
            if session_thread_messages_pending(session_id=self.session_id):
                return True
            if not busy or time.monotonic() >= deadline:
                return False
            db_release()
            woken = threading.Event()
            watch.wake_on_input(self.session_id, woken)
            watch.wake_on_flag(self.session_id, woken)
            try:
                woken.wait(max(0.0, min(THREAD_WAIT_SECONDS, deadline - time.monotonic())))
            finally:
                watch.unwake(self.session_id, woken)
                watch.unwake_input(self.session_id)
            notify.clear_input(self.session_id)
            self.control.check_handback()
            self.control.check_stop()

    @property
    def is_child(self) -> bool:
        """Whether the running turn is a child thread's (a failure for good terminates it)."""
        return self.turn_session is not None and self.turn_session.primary_id is not None

    def go_idle(
        self,
        stop_reason: dict,
        *,
        interrupted: bool = False,
        for_threads: bool = False,
        stop_details: dict | None = None,
    ) -> None:
        """Publish outputs (unless interrupted), write memory back, then commit session.status_idle (with the
        session's status and active time, in one statement). Nothing is appended to a deleted session.
        `for_threads`: a coordinator's requires_action lists its threads' tool uses (their copies):
        the answers go to the threads, so this runner does not wait for them (no ClientWait)."""
        if self.turn_session is None or idle_hooks_apply(self.turn_session):
            session = session_by_id(session_id=self.session_id)  # the hooks read its sandbox as it is now
            if session.deleted_at is not None:
                return
            outputs_publish_at_idle(session=session, interrupted=interrupted)
            memory_writeback_at_idle(session=session)
        thread = self.turn_session if self.turn_session is not None and self.turn_session.primary_id else None
        # An interrupt this thread's flag has not shown yet (a sibling's interrupt may end this
        # thread's command first: one sandbox) is one all the same: no report wakes the primary.
        # A thread waiting on the client (requires_action) reports once it has its answers and ends a turn.
        waits = stop_reason.get("type") == "requires_action"
        if (
            thread is not None
            and not interrupted
            and not waits
            and not session_interrupt_pending(session_id=self.session_id)
        ):
            self._report(thread, stop_reason)
        idle = tev.status_item(
            EventType.SESSION_STATUS_IDLE, self.turn_session, ev.status_idle(stop_reason, stop_details)
        )
        try:
            events_append(session_id=self.session_id, items=[idle], end_turn=True, unless_deleted=True)
        except SessionGone:
            return
        if interrupted:  # archived while its turn ran (the archive interrupts): terminated now
            session_terminate_if_archived(session_id=self.session_id)
            if thread is not None and thread.workflow_run_id:  # stopped before it reported: its run ends
                workflow_run_advance(run_id=thread.workflow_run_id)
        elif thread is not None and stop_reason.get("type") == "retries_exhausted":
            # A child thread whose turn failed for good terminates (the SDK's; its session.error
            # said `terminal`): the coordinator has its report, and sends it nothing more.
            session_terminate(session_id=self.session_id)
        self._idled(stop_reason, interrupted=interrupted or for_threads)

    def threads_handed(self) -> list[str]:
        """The tool uses this coordinator's idle threads handed their client and still wait for
        (their copies' ids on this log, a copy a crash lost appended again): the session waits
        on its client for them."""
        handed = session_threads_handed(session_id=self.session_id)
        if handed:
            thread_copies_ensure(primary_id=self.session_id, event_ids=handed)
        return [tev.thread_copy_id(event_id) for event_id in handed]

    def _report(self, thread: Session, stop_reason: dict) -> None:
        """A child thread's idle wakes its primary: the text of its turn's messages (or why it
        stopped without one) as a message to the primary, committed before the idle."""
        text = session_turn_reply(session_id=self.session_id)
        if not text:
            text = f"(The thread ended its turn without a reply: {stop_reason.get('type')}.)"
        if thread.workflow_run_id:  # a workflow run's thread reports to its run
            return workflow_thread_report(thread=thread, text=text)
        try:
            thread_message_send(sender=thread, target_id=thread.primary_id, content=[{"type": "text", "text": text}])
        except ThreadRefused:
            logger.info("a thread's report found its primary gone", extra={"session_id": self.session_id})

    def _idled(self, stop_reason: dict, *, interrupted: bool) -> None:
        """The session went idle: what it handed its client, if anything, for linger and next_work.
        A self_hosted session's thread handing its client tools needs a worker on the session's
        (its primary's) work item: one is queued unless open."""
        self.awaiting_client = stop_reason.get("type") == "requires_action" and not interrupted
        primary = self.sandbox_session
        if self.awaiting_client and primary is not None and primary.id != self.session_id:
            session_work_ensure(session=primary)
        if self.awaiting_client:
            self.wait = ClientWait(needed=frozenset(ev.required_action_ids({"stop_reason": stop_reason})))

    def fail(self, exc: Exception) -> None:
        """An unexpected error: report it and never leave the session running."""
        try:
            session = session_by_id(session_id=self.session_id)
            if session.deleted_at is not None or session.runner_token != self.token:
                return
            ends = self.is_child and session.status != Session.Status.IDLE  # go_idle below terminates it
            payload = ev.session_error(message=f"The turn failed: {type(exc).__name__}", terminal=ends)
            session_event_append(session_id=self.session_id, type=EventType.SESSION_ERROR, payload=payload)
            session_last_error_set(session_id=self.session_id, text=f"{type(exc).__name__}: {exc}")
            if session.status != Session.Status.IDLE:
                self.go_idle(ev.stop_retries_exhausted())
        except Exception:
            logger.exception("could not record a failed turn", extra={"session_id": self.session_id})


def idle_hooks_apply(session: Session) -> bool:
    """Whether outputs publication or memory write-back may have work at idle: both need a Docker
    sandbox of ours, which a self_hosted session never has."""
    return (
        session.tool_host.docker_sandbox
        and session.primary_id is None  # a child thread's files are published at its primary's idle
    )


class Spend:
    """The session's usage totals during a turn (the runner is their only writer: it holds the
    lease), its list price, and its budget: `reached()` before each model request."""

    def __init__(self, session: Session, primary: Session | None = None):
        primary = primary or session
        self.price = pricing.price_for(session.agent_snapshot["model"]["id"])
        self.totals = dict(session.usage or {})
        self.budget = primary.budget if (primary.budget or {}).get("type") == "limit" else None
        # A multiagent session's budget holds all its threads' spend together.
        self.family = primary.id if (primary.agent_snapshot or {}).get("multiagent") else None

    def add(self, delta: dict) -> dict:
        """Add one call's usage; returns the session.usage event of the new totals."""
        for key, value in (delta or {}).items():
            self.totals[key] = int(self.totals.get(key) or 0) + value
        return ev.item(EventType.SESSION_USAGE, ev.session_usage(self.totals, self.budget))

    def reached(self) -> bool:
        if not self.budget:
            return False
        cap = pricing.amount_nanousd(self.budget["max_list_cost"]["amount"])
        if self.family is not None:
            return session_family_list_cost(primary_id=self.family) >= cap
        return int(self.totals.get("list_cost_nanousd") or 0) >= cap
