"""The turn state machine and the worker's entry point (sessions.tasks.session_run); the runner's
waits and idles are sessions.runtime.waits.

A turn: mark the client's pending events processed, emit session.status_running, then repeat —
build the conversation from the stored events, call the model (span.model_request_start/_end),
append agent.message / agent.tool_use / agent.custom_tool_use, run built-in tools in the sandbox
(agent.tool_result) — until the model ends its turn; then session.status_idle. Client-executed
tools (custom tools, self_hosted environments, always_ask confirmations) end the turn idle with
stop_reason requires_action; the client's result events start the next turn. Upstream failures
become session.error (retrying, then exhausted) and the session returns to idle. user.interrupt
stops the turn within a fraction of a second (the Redis flag is polled; sandbox commands are
killed) and the session goes idle.
"""

import logging
import time
import uuid
from dataclasses import dataclass

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import close_old_connections

import sandboxes as sandbox
from core.database import database_answers
from core.errors import DATABASE_DOWN_ERRORS
from core.ids import new_id
from sessions import events as ev
from sessions import thread_events as tev
from sessions.dispatch import sandbox_sleep_enqueue, session_run_enqueue, session_run_enqueue_soon
from sessions.events import ErrorType, EventType, ToolMode
from sessions.models import Session
from sessions.runtime.control import Handback, Stop, TurnControl, db_release, draining
from sessions.runtime.fairness import turn_slot
from sessions.runtime.grader import outcome_evaluate
from sessions.runtime.judge import Judgement, permission_judge, usage_sum
from sessions.runtime.lease import keeper, lease_acquire, lease_release
from sessions.runtime.mcp import SessionMcp
from sessions.runtime.model import (
    Conversation,
    ModelReply,
    compaction_threshold,
    context_compact,
    context_tokens,
    model_call,
    model_error_record,
    span_end_item,
    system_prompt,
)
from sessions.runtime.responses import refused_result, response_items
from sessions.runtime.threads import thread_roster
from sessions.runtime.tools import (
    ToolSpec,
    mcp_failure_item,
    session_tools,
    tool_run,
    tools_answer_dangling,
    tools_run_confirmed,
)
from sessions.runtime.upstream import ModelError
from sessions.runtime.waits import RunnerWaits, Spend, idle_hooks_apply
from sessions.selectors.runner import (
    session_by_id,
    session_is_deleted,
    session_last_model_usage,
)
from sessions.selectors.sandboxes import session_sandbox_awake
from sessions.services.events import LeaseLost, SessionGone, events_append, runner_fence
from sessions.services.runner import (
    ClientWait,
    session_interrupts_flush,
    session_turn_begin,
)

logger = logging.getLogger(__name__)

# A runaway tool loop ends the turn with tool_use_limit_reached_error.
MAX_MODEL_CALLS_PER_TURN = 200


@dataclass
class _Work:
    resume: bool
    session: Session  # as next_work locked and updated it (the turn reads its snapshots)
    confirmations: bool = True  # confirmed or denied tool uses may await the turn


def session_run(*, session_id: str) -> None:
    """Run turns for the session while there is work; return when it is idle with nothing pending
    or another runner owns it. A draining worker hands the session back instead."""
    close_old_connections()
    if draining.is_set():
        session_run_enqueue(session_id=session_id)  # taken after the drain began: for another worker
        return
    with turn_slot(session_id=session_id) as admitted:
        if admitted:  # else its workspace is at its running-turns cap: one of its runners wakes it
            _run_leased(session_id=session_id)


def _run_leased(*, session_id: str) -> None:
    token = uuid.uuid4().hex
    if not lease_acquire(session_id=session_id, token=token):
        return
    lease = keeper.hold(session_id=session_id, token=token)
    runner = Runner(session_id=session_id, token=token, lease=lease)
    try:
        with runner_fence(session_id=session_id, token=token):  # no write once the lease is taken over
            while (work := runner.next_work()) is not None:
                runner.run_turn(work)
                runner.control.check_handback()
                runner.linger()
    except LeaseLost:
        # Presumed dead (silent longer than the lease) and taken over: the successor resumes.
        logger.warning("lease taken over by another runner; leaving the turn", extra={"session_id": session_id})
    except (SoftTimeLimitExceeded, Handback):
        # Leave the session running; the next runner resumes the turn where it stopped.
        logger.warning("handing the session to another runner", extra={"session_id": session_id})
        keeper.drop(lease)
        lease_release(session_id=session_id, token=token)
        session_run_enqueue(session_id=session_id)
    except DATABASE_DOWN_ERRORS:
        # Not the turn's fault: once the database answers again, hand the session to a new
        # runner, which resumes the turn (as after a soft time limit), instead of failing it or
        # leaving the lease to go stale (a lease time without a turn).
        logger.warning("database unavailable mid-turn; resuming once it answers", extra={"session_id": session_id})
        if _database_back(timeout=settings.MANGO_SESSION_LEASE_SECONDS / 2):
            keeper.drop(lease)
            lease_release(session_id=session_id, token=token)
            session_run_enqueue_soon(session_id=session_id)
            runner.released = True
    except Exception as exc:
        logger.exception("turn failed", extra={"session_id": session_id})
        runner.fail(exc)
    finally:
        runner.control.close()
        keeper.drop(lease)
        # A runner that released the lease itself, finding nothing to do, left a session that was
        # not deleted then, and ran no tool since: nothing to release or remove.
        if not runner.released:
            _release_and_clean(session_id=session_id, token=token)
        _sleep_later(session_id=session_id)


def _sleep_later(*, session_id: str) -> None:
    """The runner let the session go: its sandbox sleeps once idle for MANGO_SANDBOX_SLEEP_SECONDS
    (the task checks it still is then; a later runner sends another)."""
    seconds = settings.MANGO_SANDBOX_SLEEP_SECONDS
    try:
        if seconds > 0 and session_sandbox_awake(session_id=session_id):
            sandbox_sleep_enqueue(session_id=session_id, countdown=seconds + 0.5)
    except Exception:
        logger.exception("sandbox sleep not scheduled; the sweep finds it", extra={"session_id": session_id})


def _database_back(*, timeout: float) -> bool:
    """Wait (this runner's thread only) until the database accepts connections again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if database_answers():
            close_old_connections()
            return True
        time.sleep(0.5)
    return False


def _release_and_clean(*, session_id: str, token: str) -> None:
    lease_release(session_id=session_id, token=token)
    if session_is_deleted(session_id=session_id):
        try:
            sandbox.remove(session_id=session_id)
        except Exception:
            logger.exception("sandbox removal after delete failed", extra={"session_id": session_id})


class Runner(RunnerWaits):
    def __init__(self, *, session_id: str, token: str, lease):
        self.session_id = session_id
        self.token = token
        self.control = TurnControl(session_id=session_id, lease=lease)
        self.released = False
        self.awaiting_client = False  # the last turn ended with requires_action
        # What that idle handed the client, answered since (next_work need not read it back).
        self.wait: ClientWait | None = None
        self.turn_session: Session | None = None  # the running turn's, as next_work read it
        self.sandbox_session: Session | None = None  # whose sandbox the turn's tools use

    def next_work(self) -> _Work | None:
        """Start the next turn under the session's lock (services.runner.session_turn_begin), or
        release the lease when there is nothing to do (a later append re-enqueues a runner)."""
        begun = session_turn_begin(session_id=self.session_id, token=self.token, wait=self.wait)
        if begun is None or begun.released:
            self.released = begun is not None
            return None
        self.wait = None  # a turn starts (or an interrupt ends the wait): nothing handed out any more
        if begun.interrupted:
            self.turn_session = begun.session
            self.go_idle(ev.stop_end_turn(), interrupted=True)
            return self.next_work()
        return _Work(resume=begun.resume, session=begun.session, confirmations=begun.confirmations)

    # --- the turn ------------------------------------------------------------------------------

    def run_turn(self, work: _Work) -> None:
        session = self.turn_session = work.session
        # A child thread of a multiagent session runs its tools in its primary's sandbox.
        self.sandbox_session = session if session.primary_id is None else session_by_id(session_id=session.primary_id)
        # The turn's MCP connections (none unless a toolset references one of the agent's
        # servers), closed when the turn ends whatever way it ends.
        mcp = SessionMcp(
            session_id=self.session_id,
            workspace_id=session.workspace_id,
            agent_snapshot=session.agent_snapshot,
            vault_ids=session.vault_ids,
        )
        try:
            if work.resume and not session.tool_host.client_runs_tools:
                tools_answer_dangling(session_id=self.session_id)
            if work.confirmations:
                tools_run_confirmed(control=self.control, session=session, mcp=mcp, sandbox=self.sandbox_session)
            self._loop(session, mcp)
        except Stop:
            if self.control.lease_lost or session_is_deleted(session_id=self.session_id):
                return
            session_interrupts_flush(session_id=self.session_id)
            self.go_idle(ev.stop_end_turn(), interrupted=True)
        finally:
            mcp.close()

    def _mcp_open(self, mcp: SessionMcp) -> None:
        """Connect to the MCP servers not connected yet; each failure is a session.error naming
        its server, and the turn goes on with the other tools."""
        if not mcp:
            return
        db_release()  # no database connection held while the servers answer
        failures = mcp.open()
        if failures:
            events_append(session_id=self.session_id, items=[mcp_failure_item(failure) for failure in failures])

    def _loop(self, session: Session, mcp: SessionMcp) -> None:
        self._mcp_open(mcp)
        roster = thread_roster(session)
        definitions, specs = session_tools(session.agent_snapshot, mcp, roster)
        self_hosted = session.tool_host.client_runs_tools
        model_calls = 0
        conversation = Conversation(self.session_id)
        system = system_prompt(session)
        spend = Spend(session, primary=self.sandbox_session)
        threshold = compaction_threshold(session.agent_snapshot["model"]["id"])
        # Decided at every call, the turn's first included: from the last call's usage (a turn
        # that ended past the threshold has the next one start with a compaction).
        compact_next = context_tokens(session_last_model_usage(session_id=self.session_id)) > threshold
        just_compacted = False
        while True:
            self.control.check_handback()  # a safe point: every tool use so far is answered
            self.control.check_stop()
            if spend.reached():  # the cap: no more model requests
                return self.go_idle(ev.stop_budget_reached())
            if mcp.stale():  # a server's tools changed (tools/list_changed): offer the new list
                definitions, specs = session_tools(session.agent_snapshot, mcp, roster)
            if compact_next:
                # A call right after a compaction that is still over the threshold: nothing left to compact.
                if just_compacted or not self._compact(session, definitions, conversation, system):
                    self._compaction_failed()
                    return self.go_idle(ev.stop_retries_exhausted())
                just_compacted = True
            else:
                just_compacted = False
            reply = model_call(
                control=self.control, session=session, definitions=definitions, conversation=conversation, system=system
            )
            if reply is None:
                return self.go_idle(ev.stop_retries_exhausted())
            # Tool uses that all go to the client end the turn in the response's own statement
            # (no idle hook to run first, and neither a refusal nor the call cap to report).
            may_idle = (
                not idle_hooks_apply(session)
                and reply.response.get("stop_reason") != "refusal"
                and model_calls + 1 < MAX_MODEL_CALLS_PER_TURN
            )
            tool_uses, idled = self._append_response(reply, specs, self_hosted, spend, may_idle=may_idle)
            if idled:
                return None
            # Past the threshold, the conversation is compacted before the next call (every tool
            # use is answered by then), in this turn or the next.
            compact_next = context_tokens(reply.response.get("usage") or {}) > threshold
            if reply.response.get("stop_reason") == "refusal":
                return self.go_idle(ev.stop_refusal(), stop_details=ev.refusal_details(reply.response))
            if not tool_uses:
                # Under an active outcome the grader judges the work; the agent revises while it
                # needs revision (its verdict joins the conversation).
                if outcome_evaluate(session=session, call=self.control.interruptible):
                    continue
                if roster and self._await_threads():  # a thread's reply came: the model reads it
                    continue
                handed = self.threads_handed() if roster else []
                if handed:  # no thread at work, and one waits on the client: so does the session
                    return self.go_idle(ev.stop_requires_action(handed), for_threads=True)
                return self.go_idle(ev.stop_end_turn())
            model_calls += 1
            if model_calls >= MAX_MODEL_CALLS_PER_TURN:
                message = f"The turn made {model_calls} model calls with tool use; stopping."
                limit = ModelError(message, error_type=ErrorType.TOOL_USE_LIMIT_REACHED, retryable=False)
                model_error_record(session_id=self.session_id, exc=limit, retrying=False, terminal=self.is_child)
                return self.go_idle(ev.stop_retries_exhausted())
            waiting = []
            for event, mode in tool_uses:
                if mode is ToolMode.CLIENT:
                    waiting.append(event.id)
                elif mode is ToolMode.RUN:
                    tool_run(control=self.control, session=self.sandbox_session, event=event, mcp=mcp)
            if waiting:
                return self.go_idle(ev.stop_requires_action(waiting))

    def _compact(self, session: Session, definitions, conversation, system) -> bool:
        return context_compact(
            control=self.control, session=session, definitions=definitions, conversation=conversation, system=system
        )

    def _compaction_failed(self) -> None:
        message = "The conversation outgrew the context window and could not be compacted further."
        limit = ModelError(message, error_type=ErrorType.COMPACTION_LIMIT_REACHED, retryable=False)
        model_error_record(session_id=self.session_id, exc=limit, retrying=False, terminal=self.is_child)

    # --- the model's answer → events ---------------------------------------------------------

    def _append_response(
        self, reply: ModelReply, specs: dict[str, ToolSpec], self_hosted: bool, spend: Spend, *, may_idle: bool
    ) -> tuple[list, bool]:
        """span.model_request_end and session.usage, then the model content as agent events, in
        order, in one statement (with the usage totals). With `may_idle`, when the tool uses go to
        the client and none runs here, the session.status_idle handing them over joins that
        statement (go_idle's append, for a turn with no idle hook). Returns ([(tool-use event,
        ToolMode)], whether the turn ended so)."""
        judged: list[dict] = []  # the auto policy's judge calls' usage (runtime.judge)

        def judge(name: str, tool_input) -> Judgement:
            model_id = self.turn_session.agent_snapshot["model"]["id"]
            judgement = permission_judge(
                call=self.control.interruptible, model_id=model_id, tool_name=name, tool_input=tool_input
            )
            judged.append(judgement.usage or {})
            return judgement

        items, modes = response_items(reply, specs, self_hosted, judge)
        span_end, model_usage = span_end_item(
            start_id=reply.span_start_id, usage=reply.response.get("usage") or {}, price=spend.price
        )
        model_usage = usage_sum(model_usage, *judged)
        usage_event = spend.add(model_usage)
        results = []
        for item, mode in zip(items, modes, strict=True):
            if mode in (ToolMode.UNKNOWN, ToolMode.DENIED):
                item["id"] = item.get("id") or new_id("sevt")
                results.append(refused_result(item, denied=mode is ToolMode.DENIED))
        handed = [item for item, mode in zip(items, modes, strict=True) if mode is ToolMode.CLIENT]
        for item in handed:
            item["id"] = item.get("id") or new_id("sevt")
            if self.turn_session.primary_id:  # a thread's: on the primary's log too, for the client
                tev.crosspost_tool_use(item, self.turn_session)
        idle = None
        if may_idle and handed and ToolMode.RUN not in modes:
            stop_reason = ev.stop_requires_action([item["id"] for item in handed])
            idle = tev.status_item(EventType.SESSION_STATUS_IDLE, self.turn_session, ev.status_idle(stop_reason))
        try:
            rows = events_append(
                session_id=self.session_id,
                items=[span_end, usage_event, *items, *results, *([idle] if idle else [])],
                usage=model_usage,
                end_turn=idle is not None,
                unless_deleted=idle is not None,
            )
        except SessionGone:
            return [], True
        if idle is not None:
            self._idled(idle["payload"]["stop_reason"], interrupted=False)
        rows = rows[2 : 2 + len(items)]
        return [(row, mode) for row, mode in zip(rows, modes, strict=True) if mode is not None], idle is not None
