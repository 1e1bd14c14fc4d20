"""The turn loop. Runs only in a Celery worker (sessions.tasks.session_run), never in the web process.

One runner at a time owns a session through a lease (Session.runner_token), renewed by a
heartbeat thread; a runner that dies leaves a stale lease that sessions.recover_stuck hands to
another worker, which resumes the turn from the stored events.

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

import concurrent.futures
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.ids import new_id
from sessions import model_client, notify, sandbox, tools
from sessions.models import Session, SessionEvent
from sessions.outcomes import feedback_blocks, outcome_evaluate
from sessions.services.events import RUNNER_INPUT_TYPES, events_append_locked, session_event_append
from sessions.services.resources import resources_place

logger = logging.getLogger(__name__)

_CONVERSATION_TYPES = (
    "user.message",
    "system.message",
    "user.define_outcome",
    "agent.message",
    "agent.tool_use",
    "agent.custom_tool_use",
    "agent.tool_result",
    "user.custom_tool_result",
    "user.tool_result",
    "user.tool_confirmation",
    "span.outcome_evaluation_end",
)


def before_idle(session: Session, interrupted: bool) -> None:
    """Called in the worker just before `session.status_idle` is committed at every idle
    boundary of a turn (not when the session was deleted). Publishes the sandbox's outputs, so a
    client that sees the idle event can list and download them at once; an interrupt skips it."""
    from sessions.services.outputs import outputs_publish_at_idle

    outputs_publish_at_idle(session=session, interrupted=interrupted)


# A runaway tool loop ends the turn with tool_use_limit_reached_error.
MAX_MODEL_CALLS_PER_TURN = 200


class _Stop(Exception):
    """The turn must stop now: interrupted, session deleted, or lease lost."""


@dataclass
class _Work:
    resume: bool


# --- lease -----------------------------------------------------------------------------------


def _lease_acquire(session_id: str, token: str) -> bool:
    now = timezone.now()
    stale = now - timedelta(seconds=settings.MANGO_SESSION_LEASE_SECONDS)
    return (
        Session.objects.filter(id=session_id)
        .filter(Q(runner_token__isnull=True) | Q(runner_heartbeat_at__lt=stale))
        .update(runner_token=token, runner_heartbeat_at=now)
        == 1
    )


class _Heartbeat(threading.Thread):
    def __init__(self, session_id: str, token: str):
        super().__init__(daemon=True, name=f"lease-{session_id}")
        self.session_id, self.token = session_id, token
        self.stopped = threading.Event()
        self.lost = False

    def run(self):
        interval = max(0.5, settings.MANGO_SESSION_LEASE_SECONDS / 4)
        try:
            while not self.stopped.wait(interval):
                renewed = Session.objects.filter(id=self.session_id, runner_token=self.token).update(
                    runner_heartbeat_at=timezone.now()
                )
                if not renewed:
                    self.lost = True
                    return
        except Exception:
            logger.exception("lease heartbeat failed", extra={"session_id": self.session_id})
        finally:
            connection.close()


def _lease_release(session_id: str, token: str) -> None:
    Session.objects.filter(id=session_id, runner_token=token).update(runner_token=None, runner_heartbeat_at=None)


# --- entry point -----------------------------------------------------------------------------


def session_run(*, session_id: str) -> None:
    """Run turns for the session while there is work; return when it is idle with nothing pending
    or another runner owns it."""
    close_old_connections()
    token = uuid.uuid4().hex
    if not _lease_acquire(session_id, token):
        return
    heartbeat = _Heartbeat(session_id, token)
    heartbeat.start()
    runner = _Runner(session_id, token, heartbeat)
    try:
        while True:
            work = runner.next_work()
            if work is None:
                return
            runner.run_turn(work)
    except SoftTimeLimitExceeded:
        # Leave the session running; the next runner resumes the turn where it stopped.
        logger.warning("turn hit the task time limit; handing over", extra={"session_id": session_id})
        _lease_release(session_id, token)
        from sessions.tasks import session_run as task

        task.delay(session_id)
    except Exception as exc:
        logger.exception("turn failed", extra={"session_id": session_id})
        runner.fail(exc)
    finally:
        heartbeat.stopped.set()
        _lease_release(session_id, token)
        if Session.objects.filter(id=session_id, deleted_at__isnull=False).exists():
            try:
                sandbox.remove(session_id=session_id)
            except Exception:
                logger.exception("sandbox removal after delete failed", extra={"session_id": session_id})


class _Runner:
    def __init__(self, session_id: str, token: str, heartbeat: _Heartbeat):
        self.session_id = session_id
        self.token = token
        self.heartbeat = heartbeat

    # --- work selection ----------------------------------------------------------------------

    def next_work(self) -> _Work | None:
        """Under the session lock: flush interrupts, decide whether a turn must run, and either
        start it (status_running) or release the lease (so a later append re-enqueues a runner)."""
        interrupted_running = False
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            if session.runner_token != self.token:
                return None
            if session.deleted_at is not None:
                session.runner_token = None
                session.save(update_fields=["runner_token"])
                return None
            pending = list(
                SessionEvent.objects.filter(
                    session=session, processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES
                ).order_by("seq")
            )
            now = timezone.now()
            last_interrupt = max((i for i, e in enumerate(pending) if e.type == "user.interrupt"), default=None)
            if last_interrupt is not None:
                # Everything up to the last interrupt is flushed: it was sent before the stop.
                flushed = pending[: last_interrupt + 1]
                SessionEvent.objects.filter(id__in=[e.id for e in flushed]).update(processed_at=now)
                pending = pending[last_interrupt + 1 :]
                transaction.on_commit(lambda: notify.clear_interrupt(self.session_id))
                interrupted_running = session.status in (Session.Status.RUNNING, Session.Status.RESCHEDULING)
            resume = session.status in (Session.Status.RUNNING, Session.Status.RESCHEDULING) and not interrupted_running
            if not resume and not interrupted_running:
                starts_turn = [
                    e
                    for e in pending
                    if e.type not in ("user.custom_tool_result", "user.tool_result", "user.tool_confirmation")
                ]
                if not starts_turn and pending and self._outstanding_actions(session, pending):
                    # Partial answers to requires_action: keep waiting for the rest.
                    SessionEvent.objects.filter(id__in=[e.id for e in pending]).update(processed_at=now)
                    pending = []
                if not pending:
                    session.runner_token = None
                    session.runner_heartbeat_at = None
                    session.save(update_fields=["runner_token", "runner_heartbeat_at"])
                    return None
            if not interrupted_running:
                SessionEvent.objects.filter(id__in=[e.id for e in pending]).update(processed_at=now)
                items = []
                if resume:
                    items.append(
                        {
                            "type": "session.error",
                            "payload": {
                                "error": {
                                    "type": "unknown_error",
                                    "message": "The worker running this session stopped; resuming the turn.",
                                    "retry_status": {"type": "retrying"},
                                }
                            },
                        }
                    )
                items.append({"type": "session.status_running", "payload": {}})
                events_append_locked(session=session, items=items)
                session.status = Session.Status.RUNNING
                if session.turn_started_at is None:
                    session.turn_started_at = now
                session.save(update_fields=["status", "turn_started_at"])
        if interrupted_running:
            self.go_idle({"type": "end_turn"}, interrupted=True)
            return self.next_work()
        return _Work(resume=resume)

    def _outstanding_actions(self, session: Session, pending: list[SessionEvent]) -> bool:
        """Whether tool uses handed to the client still lack an answer once `pending` counts."""
        needed = set(self._last_required_action_ids(session))
        answered = set()
        for event in SessionEvent.objects.filter(
            session=session, type__in=("user.custom_tool_result", "user.tool_result", "user.tool_confirmation")
        ):
            answered.add(event.payload.get("custom_tool_use_id") or event.payload.get("tool_use_id"))
        return bool(needed - answered)

    def _last_required_action_ids(self, session: Session) -> list[str]:
        idle = (
            SessionEvent.objects.filter(session=session, type="session.status_idle")
            .order_by("-seq")
            .only("payload")
            .first()
        )
        if idle is None:
            return []
        reason = idle.payload.get("stop_reason") or {}
        return list(reason.get("event_ids") or []) if reason.get("type") == "requires_action" else []

    # --- stop checks -------------------------------------------------------------------------

    def should_stop(self) -> bool:
        if self.heartbeat.lost:
            return True
        if not notify.interrupt_flagged(self.session_id):
            return False
        return (
            SessionEvent.objects.filter(
                session_id=self.session_id, type="user.interrupt", processed_at__isnull=True
            ).exists()
            or Session.objects.filter(id=self.session_id, deleted_at__isnull=False).exists()
        )

    def check_stop(self) -> None:
        if self.should_stop():
            raise _Stop()

    # --- the turn ------------------------------------------------------------------------------

    def run_turn(self, work: _Work) -> None:
        session = Session.objects.get(id=self.session_id)
        definitions, specs = tools.session_tools(session.agent_snapshot)
        self_hosted = session.environment_config.get("type") == "self_hosted"
        try:
            if work.resume and not self_hosted:
                self._answer_dangling_tool_uses("The worker running this tool stopped before it finished.")
            self._execute_confirmed_tools(session, specs)
            model_calls = 0
            while True:
                self.check_stop()
                self._absorb_new_messages()
                response = self._call_model(session, definitions)
                if response is None:
                    self.go_idle({"type": "retries_exhausted"})
                    return
                tool_uses = self._append_response(response, specs, self_hosted)
                if response.get("stop_reason") == "refusal":
                    self.go_idle({"type": "refusal"})
                    return
                if not tool_uses:
                    # Under an active outcome the grader judges the work; the agent revises
                    # while it needs revision (its verdict joins the conversation).
                    if outcome_evaluate(session=session, call=self._interruptible):
                        continue
                    self.go_idle({"type": "end_turn"})
                    return
                model_calls += 1
                if model_calls >= MAX_MODEL_CALLS_PER_TURN:
                    self._model_error(
                        model_client.ModelError(
                            f"The turn made {model_calls} model calls with tool use; stopping.",
                            error_type="tool_use_limit_reached_error",
                            retryable=False,
                        ),
                        retrying=False,
                    )
                    self.go_idle({"type": "retries_exhausted"})
                    return
                waiting = []
                for event, mode in tool_uses:
                    if mode == "client":
                        waiting.append(event.id)
                    elif mode == "run":
                        self._run_tool(session, event)
                if waiting:
                    self.go_idle({"type": "requires_action", "event_ids": waiting})
                    return
        except _Stop:
            if self.heartbeat.lost:
                return
            deleted = Session.objects.filter(id=self.session_id, deleted_at__isnull=False).exists()
            if not deleted:
                self._flush_interrupts()
                self.go_idle({"type": "end_turn"}, interrupted=True)

    def _flush_interrupts(self) -> None:
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            last = (
                SessionEvent.objects.filter(session=session, type="user.interrupt", processed_at__isnull=True)
                .order_by("-seq")
                .first()
            )
            if last is not None:
                SessionEvent.objects.filter(
                    session=session, processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES, seq__lte=last.seq
                ).update(processed_at=timezone.now())
        notify.clear_interrupt(self.session_id)

    def _absorb_new_messages(self) -> None:
        """Messages the client sent while the turn runs join the conversation at the next call."""
        SessionEvent.objects.filter(
            session_id=self.session_id,
            processed_at__isnull=True,
            type__in=("user.message", "system.message", "user.define_outcome"),
        ).update(processed_at=timezone.now())

    # --- model -------------------------------------------------------------------------------

    def _call_model(self, session: Session, definitions: list[dict]) -> dict | None:
        snapshot = session.agent_snapshot
        attempts = settings.MANGO_MODEL_MAX_RETRIES + 1
        for attempt in range(attempts):
            messages = build_messages(self._conversation_events())
            start = session_event_append(session_id=self.session_id, type="span.model_request_start")
            previews = _PreviewPublisher(self.session_id)
            try:
                response = self._interruptible(
                    lambda messages=messages, previews=previews: model_client.messages_create(
                        model=snapshot["model"]["id"],
                        system=snapshot.get("system"),
                        messages=messages,
                        tools=definitions,
                        max_tokens=settings.MANGO_MODEL_MAX_TOKENS,
                        on_stream_event=previews.handle,
                    ),
                    on_abandon=previews.cancel,
                )
                self._preview_ids = list(previews.message_ids)
            except model_client.ModelError as exc:
                self._span_end(start.id, None)
                retrying = exc.retryable and attempt + 1 < attempts
                self._model_error(exc, retrying=retrying)
                if not retrying:
                    return None
                self._sleep(settings.MANGO_MODEL_RETRY_BACKOFF_SECONDS * (2**attempt))
                self._set_status(Session.Status.RUNNING, "session.status_running")
                continue
            except _Stop:
                self._span_end(start.id, None)
                raise
            self._span_end(start.id, response.get("usage") or {})
            return response
        return None

    def _interruptible(self, call, on_abandon=None):
        """Run a blocking upstream call in a helper thread so an interrupt need not wait for it."""
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            future = executor.submit(call)
            while True:
                try:
                    return future.result(timeout=0.1)
                except concurrent.futures.TimeoutError:
                    try:
                        self.check_stop()
                    except _Stop:
                        if on_abandon is not None:
                            on_abandon()
                        raise
        finally:
            executor.shutdown(wait=False)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_stop()
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def _span_end(self, start_id: str, usage: dict | None) -> None:
        usage = usage or {}
        model_usage = {
            "input_tokens": int(usage.get("input_tokens") or 0),
            "output_tokens": int(usage.get("output_tokens") or 0),
            "cache_creation_input_tokens": int(usage.get("cache_creation_input_tokens") or 0),
            "cache_read_input_tokens": int(usage.get("cache_read_input_tokens") or 0),
        }
        payload = {"model_request_start_id": start_id, "model_usage": model_usage, "is_error": usage == {}}
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            totals = dict(session.usage or {})
            for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
                totals[key] = int(totals.get(key) or 0) + model_usage[key]
            session.usage = totals
            session.save(update_fields=["usage"])
            events_append_locked(session=session, items=[{"type": "span.model_request_end", "payload": payload}])

    def _model_error(self, exc: model_client.ModelError, *, retrying: bool) -> None:
        error = {
            "type": exc.error_type,
            "message": exc.message,
            "retry_status": {"type": "retrying" if retrying else "exhausted"},
        }
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            items = [{"type": "session.error", "payload": {"error": error}}]
            session.last_error = f"{exc.error_type}: {exc.message}"
            fields = ["last_error"]
            if retrying:
                items.append({"type": "session.status_rescheduled", "payload": {}})
                session.status = Session.Status.RESCHEDULING
                fields.append("status")
            session.save(update_fields=fields)
            events_append_locked(session=session, items=items)

    def _set_status(self, status: str, event_type: str) -> None:
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            if session.status == status:
                return
            session.status = status
            session.save(update_fields=["status"])
            events_append_locked(session=session, items=[{"type": event_type, "payload": {}}])

    def _conversation_events(self) -> list[SessionEvent]:
        return list(
            SessionEvent.objects.filter(session_id=self.session_id, type__in=_CONVERSATION_TYPES)
            .filter(Q(processed_at__isnull=False) | ~Q(type__startswith="user."))
            .order_by("seq")
        )

    def _append_response(self, response: dict, specs: dict, self_hosted: bool) -> list[tuple[SessionEvent, str]]:
        """Model content → agent events, in order. Returns (tool-use event, mode) with mode
        "run" (execute here), "client" (hand to the client) or "done" (answered already)."""
        items, modes, text = [], [], []
        preview_ids = list(getattr(self, "_preview_ids", []))
        self._preview_ids = []

        def flush_text():
            if text:
                # The id the streamed preview (event_start / event_delta) announced, if any.
                event_id = preview_ids.pop(0) if preview_ids else None
                items.append({"id": event_id, "type": "agent.message", "payload": {"content": list(text)}})
                modes.append(None)
                text.clear()

        for block in response.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                text.append({"type": "text", "text": block.get("text", "")})
            elif kind == "thinking" or kind == "redacted_thinking":
                flush_text()
                items.append({"type": "agent.thinking", "payload": {}})
                modes.append(None)
            elif kind == "tool_use":
                flush_text()
                name, tool_input = block.get("name"), block.get("input") or {}
                spec = specs.get(name)
                private = {"model_tool_use_id": block.get("id")}
                if spec is not None and spec.kind == "custom":
                    items.append(
                        {
                            "type": "agent.custom_tool_use",
                            "payload": {"name": name, "input": tool_input},
                            "private": private,
                        }
                    )
                    modes.append("client")
                    continue
                payload = {"name": name, "input": tool_input}
                if spec is None:
                    payload["evaluated_permission"] = "deny"
                    mode = "unknown"
                elif spec.permission == "always_ask":
                    payload["evaluated_permission"] = "ask"
                    payload["evaluation"] = {"type": "always_ask"}
                    mode = "client"
                else:
                    payload["evaluated_permission"] = "allow"
                    payload["evaluation"] = (
                        {"type": "always_allow"}
                        if spec.permission == "always_allow"
                        else {"type": "auto", "evaluated_permission": {"type": "allow"}}
                    )
                    mode = "client" if self_hosted else "run"
                items.append({"type": "agent.tool_use", "payload": payload, "private": private})
                modes.append(mode)
        flush_text()
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            rows = events_append_locked(session=session, items=items)
            unknown = [row for row, mode in zip(rows, modes, strict=True) if mode == "unknown"]
            if unknown:
                events_append_locked(
                    session=session,
                    items=[
                        {
                            "type": "agent.tool_result",
                            "payload": {
                                "tool_use_id": row.id,
                                "content": [{"type": "text", "text": f"Unknown tool {row.payload['name']!r}."}],
                                "is_error": True,
                            },
                        }
                        for row in unknown
                    ],
                )
        return [(row, mode) for row, mode in zip(rows, modes, strict=True) if mode is not None]

    # --- tools -------------------------------------------------------------------------------

    def _ensure_sandbox(self, session: Session) -> None:
        if Session.objects.filter(id=self.session_id, deleted_at__isnull=False).exists():
            raise _Stop()
        try:
            ref = sandbox.ensure(
                session_id=session.id,
                workspace_id=session.workspace_id,
                networking=session.environment_config.get("networking"),
            )
        except sandbox.SandboxError as exc:
            Session.objects.filter(id=session.id).update(
                sandbox_state=Session.SandboxState.FAILED, last_error=f"sandbox: {exc}"
            )
            raise
        if session.sandbox_ref != ref or session.sandbox_state != Session.SandboxState.RUNNING:
            session.sandbox_ref, session.sandbox_state = ref, Session.SandboxState.RUNNING
            Session.objects.filter(id=session.id).update(sandbox_ref=ref, sandbox_state=Session.SandboxState.RUNNING)
        try:
            resources_place(session=session)  # file resources not yet in this sandbox
        except Exception as exc:
            raise sandbox.SandboxError(f"file resources could not be placed: {exc}") from exc

    def _run_tool(self, session: Session, event: SessionEvent) -> None:
        name = event.payload["name"]
        try:
            if name in tools.SANDBOX_TOOLS:
                self._ensure_sandbox(session)
            outcome = tools.run_builtin(
                session_id=session.id,
                name=name,
                tool_input=event.payload.get("input") or {},
                should_cancel=self.should_stop,
            )
        except sandbox.SandboxError as exc:
            outcome = tools.ToolOutcome(f"The sandbox is unavailable: {exc}", is_error=True)
        if Session.objects.filter(id=self.session_id, deleted_at__isnull=False).exists():
            raise _Stop()  # deleted meanwhile (its sandbox went with it): nothing more is logged
        payload = {
            "tool_use_id": event.id,
            "content": [{"type": "text", "text": outcome.text}],
            "is_error": outcome.is_error,
        }
        session_event_append(session_id=self.session_id, type="agent.tool_result", payload=payload)
        if outcome.cancelled:
            raise _Stop()

    def _execute_confirmed_tools(self, session: Session, specs: dict) -> None:
        """Answer always_ask tool uses the client confirmed (run them) or denied (error result)."""
        confirmations = {
            e.payload["tool_use_id"]: e.payload
            for e in SessionEvent.objects.filter(session_id=self.session_id, type="user.tool_confirmation")
        }
        if not confirmations:
            return
        answered = self._answered_tool_use_ids()
        for tool_use in SessionEvent.objects.filter(id__in=list(confirmations), type="agent.tool_use").order_by("seq"):
            if tool_use.id in answered:
                continue
            confirmation = confirmations[tool_use.id]
            if confirmation["result"] == "allow":
                self._run_tool(session, tool_use)
            else:
                message = confirmation.get("deny_message") or "The user denied this tool call."
                session_event_append(
                    session_id=self.session_id,
                    type="agent.tool_result",
                    payload={
                        "tool_use_id": tool_use.id,
                        "content": [{"type": "text", "text": message}],
                        "is_error": True,
                    },
                )

    def _answered_tool_use_ids(self) -> set[str]:
        answered = set()
        for event in SessionEvent.objects.filter(
            session_id=self.session_id, type__in=("agent.tool_result", "user.custom_tool_result", "user.tool_result")
        ).only("payload"):
            answered.add(event.payload.get("tool_use_id") or event.payload.get("custom_tool_use_id"))
        return answered

    def _answer_dangling_tool_uses(self, message: str) -> None:
        """On resume, built-in tool uses of the interrupted turn (after the last idle) that the
        dead worker was executing, and that never got a result, are answered with an error."""
        last_idle = (
            SessionEvent.objects.filter(session_id=self.session_id, type="session.status_idle")
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        ) or 0
        answered = self._answered_tool_use_ids()
        confirmed = set(
            SessionEvent.objects.filter(session_id=self.session_id, type="user.tool_confirmation").values_list(
                "payload__tool_use_id", flat=True
            )
        )
        for tool_use in SessionEvent.objects.filter(
            session_id=self.session_id, type="agent.tool_use", seq__gt=last_idle
        ).order_by("seq"):
            if tool_use.id in answered or tool_use.id in confirmed:
                continue
            if tool_use.payload.get("evaluated_permission") != "allow":
                continue
            session_event_append(
                session_id=self.session_id,
                type="agent.tool_result",
                payload={"tool_use_id": tool_use.id, "content": [{"type": "text", "text": message}], "is_error": True},
            )

    # --- idle --------------------------------------------------------------------------------

    def go_idle(self, stop_reason: dict, *, interrupted: bool = False) -> None:
        session = Session.objects.get(id=self.session_id)
        if session.deleted_at is not None:
            return
        before_idle(session, interrupted)
        with transaction.atomic():
            session = Session.objects.select_for_update().get(id=self.session_id)
            now = timezone.now()
            if session.turn_started_at is not None:
                session.active_seconds += (now - session.turn_started_at).total_seconds()
            session.turn_started_at = None
            session.status = Session.Status.IDLE
            session.save(update_fields=["status", "turn_started_at", "active_seconds"])
            events_append_locked(
                session=session, items=[{"type": "session.status_idle", "payload": {"stop_reason": stop_reason}}]
            )

    def fail(self, exc: Exception) -> None:
        """An unexpected error: report it and never leave the session running."""
        try:
            session = Session.objects.get(id=self.session_id)
            if session.deleted_at is not None or session.runner_token != self.token:
                return
            session_event_append(
                session_id=self.session_id,
                type="session.error",
                payload={
                    "error": {
                        "type": "unknown_error",
                        "message": f"The turn failed: {type(exc).__name__}",
                        "retry_status": {"type": "exhausted"},
                    }
                },
            )
            Session.objects.filter(id=self.session_id).update(last_error=f"{type(exc).__name__}: {exc}")
            if session.status != Session.Status.IDLE:
                self.go_idle({"type": "retries_exhausted"})
        except Exception:
            logger.exception("could not record a failed turn", extra={"session_id": self.session_id})


# --- streamed previews -----------------------------------------------------------------------


class _AbortStream(Exception):
    """Raised inside the upstream stream to stop it once the turn no longer wants it."""


class _PreviewPublisher:
    """Turns the upstream's streamed text into event_start / event_delta previews of the
    agent.message events the runner will append (ids allocated here, in order; contiguous text
    blocks form one agent.message, as in _append_response). Previews are ephemeral: published
    on Redis to streams that opted in with event_deltas[], never stored."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.message_ids: list[str] = []
        self._blocks: dict[int, tuple[str, int]] = {}
        self._run: list | None = None  # [event id, content index] while text blocks are contiguous
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def handle(self, event: dict) -> None:
        if self._cancelled:
            raise _AbortStream()
        if event["type"] == "block_start":
            if event["block_type"] != "text":
                self._run = None
                return
            if self._run is None:
                event_id = new_id("sevt")
                self.message_ids.append(event_id)
                self._run = [event_id, 0]
                notify.publish_delta(
                    self.session_id, {"type": "event_start", "event": {"type": "agent.message", "id": event_id}}
                )
            else:
                self._run[1] += 1
            self._blocks[event["index"]] = (self._run[0], self._run[1])
        elif event["type"] == "text_delta" and event["index"] in self._blocks:
            event_id, content_index = self._blocks[event["index"]]
            notify.publish_delta(
                self.session_id,
                {
                    "type": "event_delta",
                    "event_id": event_id,
                    "delta": {
                        "type": "content_delta",
                        "content": {"type": "text", "text": event["text"]},
                        "index": content_index,
                    },
                },
            )


# --- conversation ----------------------------------------------------------------------------


def _user_blocks(event: SessionEvent) -> list[dict]:
    """The model-facing content of a user event. A later admission step may store a rewritten
    form in event.private["model_content"] (e.g. documents resolved to text)."""
    if "model_content" in event.private:
        return list(event.private["model_content"])
    if event.type == "user.define_outcome":
        rubric = event.payload.get("rubric") or {}
        rubric_text = (
            event.private.get("rubric_text") or rubric.get("content") or f"(rubric file {rubric.get('file_id')})"
        )
        return [
            {
                "type": "text",
                "text": f"Outcome to achieve: {event.payload.get('description', '')}\n\nRubric:\n{rubric_text}",
            }
        ]
    blocks = []
    for block in event.payload.get("content") or []:
        if block.get("type") == "redacted":
            continue
        if block.get("type") == "text":
            blocks.append({"type": "text", "text": block.get("text", "")})
        else:
            blocks.append(block)
    return blocks


def _result_block(tool_use_id: str, payload: dict) -> dict:
    content = payload.get("content")
    block = {"type": "tool_result", "tool_use_id": tool_use_id}
    if content:
        block["content"] = content
    if payload.get("is_error"):
        block["is_error"] = True
    return block


def build_messages(events: list[SessionEvent]) -> list[dict]:
    """Messages API conversation from the stored events. Tool uses are identified by their event
    ids; every tool_use gets a tool_result first in the next user message (a missing one — an
    interrupted call — becomes an error result), and user text that arrived while tools were
    outstanding follows the results."""
    messages: list[dict] = []
    open_ids: list[str] = []
    deferred: list[dict] = []

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})

    def close_open() -> None:
        if open_ids:
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_id,
                        "is_error": True,
                        "content": "No result: the call was interrupted.",
                    }
                    for tool_id in open_ids
                ],
            )
            open_ids.clear()
        if deferred:
            add("user", list(deferred))
            deferred.clear()

    for event in events:
        kind = event.type
        if kind in ("user.message", "system.message", "user.define_outcome", "span.outcome_evaluation_end"):
            blocks = feedback_blocks(event) if kind == "span.outcome_evaluation_end" else _user_blocks(event)
            if open_ids:
                deferred.extend(blocks)
            else:
                add("user", blocks)
        elif kind == "agent.message":
            close_open()
            add(
                "assistant",
                [
                    {"type": "text", "text": b.get("text", "")}
                    for b in event.payload.get("content") or []
                    if b.get("type") == "text"
                ],
            )
        elif kind in ("agent.tool_use", "agent.custom_tool_use"):
            if deferred:
                close_open()
            add(
                "assistant",
                [
                    {
                        "type": "tool_use",
                        "id": event.id,
                        "name": event.payload["name"],
                        "input": event.payload.get("input") or {},
                    }
                ],
            )
            open_ids.append(event.id)
        elif kind in ("agent.tool_result", "user.tool_result", "user.custom_tool_result"):
            tool_id = event.payload.get("tool_use_id") or event.payload.get("custom_tool_use_id")
            if tool_id not in open_ids:
                continue
            open_ids.remove(tool_id)
            add("user", [_result_block(tool_id, event.payload)])
            if not open_ids and deferred:
                add("user", list(deferred))
                deferred.clear()
    if deferred and not open_ids:
        add("user", list(deferred))
        deferred.clear()
    if open_ids and deferred:
        close_open()
    # An assistant message cannot end with empty text; and the conversation must start with user.
    while messages and messages[0]["role"] != "user":
        messages.pop(0)
    return messages
