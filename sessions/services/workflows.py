"""A multiagent session's workflow runs (docs/multiagent.md): started by the coordinator's
start_workflow_run tool with a plan (sessions.workflow_plan), their phases run in order, each
phase's tasks as child threads side by side (Session.workflow_run_id), a phase ended once each of
its threads reported.

A run's state is its row (WorkflowRun). It moves one step at a time, each step one transaction
under the row's lock that reads the row and does what it says is next (open the next phase with
its threads, end the open phase once all reported, end the run): workflow_run_advance is
idempotent, so whoever calls it — the thread whose report ends a phase, the coordinator waiting
for its threads, the reaper — moves a run a crash left between two steps, and never does a step
twice. Locks: the run's row, then the primary's (its log), then a thread's; nothing locks a run
while it holds a session's row."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.crashpoints import crash_point
from core.ids import new_id
from sessions import events as ev
from sessions import workflow_plan as wp
from sessions.dispatch import session_run_enqueue_on_commit
from sessions.events import RUNNER_INPUT_TYPES, EventType, thread_id_of
from sessions.models import Session, SessionEvent, WorkflowRun
from sessions.services.events import events_append
from sessions.services.threads import ThreadRefused, thread_archive, thread_message_send, thread_received_item

E = EventType


def workflow_run_start(
    *, primary: Session, tool_use_id: str, plan: dict, agents: list[dict], inline: dict | None, coordinator: dict
) -> tuple[str, bool]:
    """The coordinator's start_workflow_run call `tool_use_id`: the run it creates (once: a call
    resumed after a crash finds its run), opened and advanced as far as it goes now. Returns the
    tool's (result text, is_error). A refused plan (program_error) or one run too many
    (max_workflow_runs_error) creates no run: a workflow_run.error without a run id."""
    run = WorkflowRun.objects.filter(tool_use_id=tool_use_id).first()
    if run is None:
        try:
            parsed = wp.plan_parse(plan, agents=agents, inline=inline, coordinator=coordinator)
        except wp.PlanRefused as refused:
            return _refused(primary, wp.PROGRAM, f"The plan was refused: {refused}")
        with transaction.atomic():
            Session.objects.select_for_update().filter(id=primary.id).values_list("id").first()
            open_runs = WorkflowRun.objects.filter(session_id=primary.id, status=WorkflowRun.Status.RUNNING).count()
            if open_runs >= settings.MANGO_SESSION_MAX_WORKFLOW_RUNS:
                message = f"The session has {open_runs} open runs (its limit)."
                return _refused(primary, wp.MAX_WORKFLOW_RUNS, message)
            run = _create(primary, tool_use_id, parsed)
        crash_point("workflow_run_created")
    run = workflow_run_advance(run_id=run.id)
    if run.status == WorkflowRun.Status.ENDED:
        return wp.result_message(run=run, result=run.result, reports=_reports(run)), run.result["type"] != "completed"
    return (
        f"Started workflow run {run.id} ({run.name!r}, {len(run.phases)} phases). Its result will arrive as a message"
        " when it ends.",
        False,
    )


def _refused(primary: Session, kind: str, message: str) -> tuple[str, bool]:
    events_append(session_id=primary.id, items=[ev.item(E.WORKFLOW_RUN_ERROR, wp.error_payload(kind, message, None))])
    return f"{kind}: {message}", True


def _create(primary: Session, tool_use_id: str, parsed: dict) -> WorkflowRun:
    now = timezone.now()
    seconds = settings.MANGO_WORKFLOW_RUN_TIMEOUT_SECONDS
    if parsed["timeout_seconds"] is not None:
        seconds = min(seconds, parsed["timeout_seconds"])
    run = WorkflowRun.objects.create(
        id=new_id("wfr"),
        session_id=primary.id,
        tool_use_id=tool_use_id,
        name=parsed["name"],
        description=parsed["description"],
        phases=parsed["phases"],
        deadline=now + timedelta(seconds=seconds),
        created_at=now,
        updated_at=now,
    )
    items = [ev.item(E.WORKFLOW_RUN_CREATED, wp.created_payload(run))]
    items.append(ev.item(E.WORKFLOW_RUN_STATUS_RUNNING, {"workflow_run_id": run.id}))
    events_append(session_id=primary.id, items=items)
    return run


def workflow_run_advance(*, run_id: str) -> WorkflowRun:
    """Take every step the run's row says is due, one transaction each (idempotent)."""
    while True:
        with transaction.atomic():
            run = WorkflowRun.objects.select_for_update().get(id=run_id)
            step = None if run.status == WorkflowRun.Status.ENDED else _step(run)
        if step is None:
            return run
        crash_point(f"workflow_run_{step}")


def workflow_runs_advance(*, primary_id: str) -> None:
    """Advance the session's open runs (the coordinator's wait, at each look at its threads)."""
    for run_id in WorkflowRun.objects.filter(session_id=primary_id, status=WorkflowRun.Status.RUNNING).values_list(
        "id", flat=True
    ):
        workflow_run_advance(run_id=run_id)


def workflow_runs_advance_open(*, limit: int = 200) -> int:
    """The reaper's pass: advance open runs (the least recently moved first), which a crash may
    have left between two steps with nobody to move them (a timeout due included)."""
    runs = WorkflowRun.objects.filter(status=WorkflowRun.Status.RUNNING).order_by("updated_at")
    ids = list(runs.values_list("id", flat=True)[:limit])
    for run_id in ids:
        workflow_run_advance(run_id=run_id)
    return len(ids)


def workflow_thread_report(*, thread: Session, text: str) -> None:
    """A run's thread ended its turn: its report is the run's (once), then the run advances (the
    report may end its phase). Committed before the thread's idle."""
    with transaction.atomic():
        run = WorkflowRun.objects.select_for_update().get(id=thread.workflow_run_id)
        if run.status == WorkflowRun.Status.ENDED or thread.id in run.reports:
            return
        run.reports = {**run.reports, thread.id: text}
        run.updated_at = timezone.now()
        run.save(update_fields=["reports", "updated_at"])
    crash_point("workflow_run_reported")
    workflow_run_advance(run_id=run.id)


def _step(run: WorkflowRun) -> str | None:
    """One due step of the locked run's, or None when none is (its threads work)."""
    primary = Session.objects.get(id=run.session_id)
    if primary.deleted_at is not None or primary.archived_at is not None:
        run.status, run.phase_open = WorkflowRun.Status.ENDED, False  # its threads went with it: no event
        run.result = {"type": "error", "error": {"type": wp.UNKNOWN, "message": "The session ended."}}
        _save(run)
        return "ended"
    if timezone.now() >= run.deadline:
        return _end(run, primary, error=(wp.TIMEOUT, "The run reached its time limit."))
    if not run.phase_open:
        if run.phase_index >= len(run.phases):
            return _end(run, primary, error=None)
        return _phase_open(run, primary)
    reported = [thread_id for thread_id in run.phase_threads if thread_id in run.reports]
    if len(reported) == len(run.phase_threads):
        phase = run.phases[run.phase_index]
        events_append(session_id=primary.id, items=[_phase_ended(run, phase)])
        run.phase_open, run.phase_index = False, run.phase_index + 1
        _save(run)
        return "phase_ended"
    if any(_stopped(thread) for thread in Session.objects.filter(id__in=run.phase_threads).exclude(id__in=reported)):
        message = "A thread of the run stopped before it reported (interrupted, archived or deleted)."
        return _end(run, primary, error=(wp.UNKNOWN, message))
    return None


def _phase_open(run: WorkflowRun, primary: Session) -> str:
    phase = run.phases[run.phase_index]
    tasks = phase["tasks"]
    threads = Session.objects.filter(primary_id=primary.id).count() + 1
    if run.threads_created + len(tasks) > settings.MANGO_WORKFLOW_RUN_THREADS_MAX:
        limit = f"its limit of {settings.MANGO_WORKFLOW_RUN_THREADS_MAX} threads per run"
        return _end(run, primary, error=(wp.THREAD_LIMIT, f"Phase {run.phase_index + 1} would exceed {limit}."))
    if threads + len(tasks) > settings.MANGO_SESSION_THREADS_MAX:
        limit = f"the session's limit of {settings.MANGO_SESSION_THREADS_MAX} threads"
        return _end(run, primary, error=(wp.THREAD_LIMIT, f"Phase {run.phase_index + 1} would exceed {limit}."))
    started = ev.item(E.WORKFLOW_RUN_PHASE_STARTED, {"workflow_run_id": run.id, "workflow_run_phase_id": phase["id"]})
    started["id"] = new_id("sevt")
    items, children = [started], []
    earlier = _reports(run)
    for task in tasks:
        content = [{"type": "text", "text": wp.task_message(run=run, phase=phase, task=task, earlier=earlier)}]
        child = _spawn(primary, run, task["agent"], content)
        children.append(child.id)
        thread_id, name = thread_id_of(child.id), child.thread_agent_name
        created = {"session_thread_id": thread_id, "agent_name": name, "workflow_run_id": run.id}
        sent = {"content": content, "to_session_thread_id": thread_id, "to_agent_name": name}
        items += [ev.item(E.SESSION_THREAD_CREATED, created), ev.item(E.AGENT_THREAD_MESSAGE_SENT, sent)]
    events_append(session_id=primary.id, items=items)
    run.phase_open, run.phase_threads = True, children
    run.phase_started_ids = [*run.phase_started_ids, started["id"]]
    run.threads_created += len(children)
    _save(run)
    return "phase_started"


def _spawn(primary: Session, run: WorkflowRun, definition: dict, content: list[dict]) -> Session:
    now = timezone.now()
    child = Session.objects.create(
        id=new_id("sesn"),
        workspace_id=primary.workspace_id,
        agent_id=definition.get("id") or primary.agent_id,  # an inline agent's is the coordinator's
        agent_version=definition.get("version") or primary.agent_version,
        agent_snapshot=definition,
        environment_id=primary.environment_id,
        environment_config=primary.environment_config,
        metadata={},
        vault_ids=primary.vault_ids,
        primary=primary,
        thread_agent_name=definition["name"],
        workflow_run_id=run.id,
        created_at=now,
        updated_at=now,
    )
    events_append(session_id=child.id, items=[thread_received_item(sender=primary, content=content)], pending=True)
    session_run_enqueue_on_commit(session_id=child.id)
    return child


def _phase_ended(run: WorkflowRun, phase: dict) -> dict:
    payload = {
        "workflow_run_id": run.id,
        "workflow_run_phase_id": phase["id"],
        "phase_started_id": run.phase_started_ids[run.phase_index],
    }
    return ev.item(E.WORKFLOW_RUN_PHASE_ENDED, payload)


def _end(run: WorkflowRun, primary: Session, *, error: tuple[str, str] | None) -> str:
    """End the run: its open phase ended, its error if any, workflow_run.status_ended; the open
    phase's threads that did not report archived (the run's end closed their phase); and its
    result as a message to the coordinator from its last thread (none when a thread of it
    stopped: an interrupt, an archive or a delete is the client's, who knows)."""
    items = [_phase_ended(run, run.phases[run.phase_index])] if run.phase_open else []
    if error is None:
        result = {"type": "completed"}
    else:
        kind, message = error
        result = {"type": "error", "error": {"type": kind, "message": message}}
        items.append(ev.item(E.WORKFLOW_RUN_ERROR, wp.error_payload(kind, message, run.id)))
    items.append(ev.item(E.WORKFLOW_RUN_STATUS_ENDED, {"workflow_run_id": run.id, "result": result}))
    events_append(session_id=primary.id, items=items)
    unreported = [thread for thread in run.phase_threads if thread not in run.reports] if run.phase_open else []
    run.status, run.result, run.phase_open = WorkflowRun.Status.ENDED, result, False
    _save(run)
    for thread in Session.objects.filter(id__in=unreported, archived_at__isnull=True, deleted_at__isnull=True):
        thread_archive(thread=thread)
    sender = Session.objects.filter(workflow_run_id=run.id, deleted_at__isnull=True).order_by("-created_at").first()
    if sender is not None and (error is None or error[0] != wp.UNKNOWN):
        text = wp.result_message(run=run, result=result, reports=_reports(run))
        try:
            thread_message_send(sender=sender, target_id=primary.id, content=[{"type": "text", "text": text}])
        except ThreadRefused:
            pass  # the session was archived meanwhile
    return "ended"


def _save(run: WorkflowRun) -> None:
    run.updated_at = timezone.now()
    run.save()


def _reports(run: WorkflowRun) -> list[tuple[str, str, str]]:
    """(phase name, agent name, report) of every thread of the run that reported, by phase."""
    names = dict(Session.objects.filter(workflow_run_id=run.id).values_list("id", "thread_agent_name"))
    threads = list(
        Session.objects.filter(workflow_run_id=run.id).order_by("created_at", "id").values_list("id", flat=True)
    )
    phases, index = [], 0
    for phase in run.phases:  # a phase's threads were created together, in task order
        count = len(phase["tasks"])
        phases.extend((phase["name"], thread_id) for thread_id in threads[index : index + count])
        index += count
    return [(name, names[thread_id], run.reports[thread_id]) for name, thread_id in phases if thread_id in run.reports]


def _stopped(thread: Session) -> bool:
    """Whether a run's thread that has not reported never will: archived, deleted or terminated,
    or idle with no input to take after a turn that did not wait on its client (an interrupt)."""
    if thread.deleted_at is not None or thread.archived_at is not None or thread.status == Session.Status.TERMINATED:
        return True
    if thread.status != Session.Status.IDLE:
        return False
    pending = SessionEvent.objects.filter(session_id=thread.id, processed_at__isnull=True, type__in=RUNNER_INPUT_TYPES)
    if pending.exists():
        return False
    last = (
        SessionEvent.objects.filter(session_id=thread.id, type=E.SESSION_THREAD_STATUS_IDLE)
        .order_by("-seq")
        .values_list("payload", flat=True)
        .first()
    )
    return last is not None and (last.get("stop_reason") or {}).get("type") != "requires_action"
