"""A multiagent session's child threads: spawned by the coordinator's model (a tool of its
turn), messaged by it, reporting back at their idle, archived by the client. A child thread is a
session row of its own (Session.primary): its own log, lease, turn loop and usage, run by any
worker like a session; it shares its primary's sandbox (sessions.runtime.turn).

Messages between threads are events: agent.thread_message_sent on the sender's log, and
agent.thread_message_received on the receiver's, as input its runner takes (it wakes the
receiver like a client's message). The receiver's event is committed first (under its row lock,
never with the sender's held: the two rows are locked one at a time), so a thread that is seen
idle has already delivered its report."""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.ids import new_id
from sessions import events as ev
from sessions import thread_events as tev
from sessions.dispatch import session_run_enqueue_on_commit
from sessions.events import EventType, thread_id_of
from sessions.models import Session, SessionEvent
from sessions.services.events import events_append
from sessions.services.termination import session_archive_locked
from sessions.services.user_events import session_runner_wake_on_commit
from sessions.thread_events import crosspost_tool_use, thread_copy_id


class ThreadRefused(Exception):
    """The thread cannot be spawned or messaged (the message says why, for the model)."""


def thread_received_item(*, sender: Session, content: list[dict]) -> dict:
    from_thread, from_name = thread_id_of(sender.id), sender.thread_agent_name or None
    payload = tev.thread_message_received(content=content, from_thread_id=from_thread, from_agent_name=from_name)
    model_content = tev.thread_message_model_content(
        content=content, from_thread_id=from_thread, from_agent_name=from_name
    )
    return ev.item(EventType.AGENT_THREAD_MESSAGE_RECEIVED, payload, private={"model_content": model_content})


def thread_spawn(*, primary: Session, definition: dict, content: list[dict]) -> Session:
    """A child thread of `primary` running the roster agent `definition` (its SessionThreadAgent,
    or an InlineAgent the coordinator defined),
    given `content` as its first input and queued to run. On the primary's log:
    session.thread_created and agent.thread_message_sent. At most MANGO_SESSION_THREADS_MAX
    threads per session, the primary counted (only the primary's runner spawns: one writer)."""
    if Session.objects.filter(primary=primary).count() + 1 >= settings.MANGO_SESSION_THREADS_MAX:
        raise ThreadRefused(f"The session already has {settings.MANGO_SESSION_THREADS_MAX} threads, its limit.")
    now = timezone.now()
    with transaction.atomic():
        child = Session.objects.create(
            id=new_id("sesn"),
            workspace_id=primary.workspace_id,
            # An inline agent (no Agent resource) is kept under the coordinator's.
            agent_id=definition.get("id") or primary.agent_id,
            agent_version=definition.get("version") or primary.agent_version,
            agent_snapshot=definition,
            environment_id=primary.environment_id,
            environment_config=primary.environment_config,
            metadata={},
            vault_ids=primary.vault_ids,
            primary=primary,
            thread_agent_name=definition["name"],
            created_at=now,
            updated_at=now,
        )
        events_append(session_id=child.id, items=[thread_received_item(sender=primary, content=content)], pending=True)
        session_run_enqueue_on_commit(session_id=child.id)
    thread_id = thread_id_of(child.id)
    created = {"session_thread_id": thread_id, "agent_name": child.thread_agent_name, "workflow_run_id": None}
    sent = tev.thread_message_sent(content=content, to_thread_id=thread_id, to_agent_name=child.thread_agent_name)
    events_append(
        session_id=primary.id,
        items=[ev.item(EventType.SESSION_THREAD_CREATED, created), ev.item(EventType.AGENT_THREAD_MESSAGE_SENT, sent)],
    )
    return child


def thread_message_send(*, sender: Session, target_id: str, content: list[dict]) -> Session:
    """`content` from thread `sender` to the session row `target_id` (a child of the same
    primary, or the primary itself): received (and its runner woken) first, then sent."""
    with transaction.atomic():
        target = Session.objects.select_for_update().filter(id=target_id).first()
        family = sender.primary_id or sender.id
        if target is None or (target.primary_id or target.id) != family or target.deleted_at is not None:
            raise ThreadRefused(f"No thread {thread_id_of(target_id)!r} in this session.")
        if target.archived_at is not None:
            raise ThreadRefused(f"Thread {thread_id_of(target_id)!r} is archived and accepts no more messages.")
        if target.status == Session.Status.TERMINATED:
            raise ThreadRefused(f"Thread {thread_id_of(target_id)!r} is terminated and accepts no more messages.")
        if target.workflow_run_id is not None:  # its report is its run's (services.workflows)
            raise ThreadRefused(
                f"Thread {thread_id_of(target_id)!r} runs a task of workflow run {target.workflow_run_id}: it takes"
                " no messages; its report goes to the run, whose result you receive."
            )
        events_append(session_id=target.id, items=[thread_received_item(sender=sender, content=content)], pending=True)
        session_runner_wake_on_commit(session=target)
    sent = tev.thread_message_sent(
        content=content, to_thread_id=thread_id_of(target.id), to_agent_name=target.thread_agent_name or None
    )
    events_append(session_id=sender.id, items=[ev.item(EventType.AGENT_THREAD_MESSAGE_SENT, sent)])
    return target


def thread_archive(*, thread: Session) -> Session:
    """Archive a child thread: it accepts no more messages and is terminated
    (session.thread_status_terminated, cross-posted; sessions.services.termination)."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(id=thread.id)
        session_archive_locked(locked=locked)
    return locked


# The advisor's thread: one per session, its agent as the SDK's BetaManagedAgentsAdvisor shows it
# ({type: advisor, model}: sessions.apis.threads renders the model's id), run by the runtime like
# any thread: the advisor model, this system prompt, no tools.
ADVISOR_NAME = "anthropic.advisor"
ADVISOR_SYSTEM = (
    "You are the advisor of an agent at work. It consults you mid-task: read its question and the conversation"
    " it sends, and answer with concise, concrete advice. You have no tools and act on nothing yourself."
)


def advisor_consult(*, primary: Session, model: str, content: list[dict]) -> Session:
    """Send `content` to the session's advisor thread, spawning it on the first consultation."""
    advisor = Session.objects.filter(primary=primary, thread_agent_name=ADVISOR_NAME).only("id").first()
    if advisor is not None:
        return thread_message_send(sender=primary, target_id=advisor.id, content=content)
    definition = {
        "type": "advisor",
        "name": ADVISOR_NAME,
        "model": {"id": model, "speed": "standard"},
        "system": ADVISOR_SYSTEM,
        "description": None,
        "tools": [],
        "mcp_servers": [],
        "skills": [],
    }
    return thread_spawn(primary=primary, definition=definition, content=content)


# A copy younger than this may still be on its way: its thread's runner appends it right after
# the commit that wrote the tool use (services.events._crosspost).
COPY_REPAIR_SECONDS = 2.0


def thread_copies_ensure(*, primary_id: str, event_ids: list[str]) -> None:
    """The copies on the primary's log of its threads' tool uses `event_ids`
    (sessions.thread_events.crosspost_tool_use) that a crash lost between the thread's commit and the
    copy's append are appended now, by the primary's runner (fenced by its lease), before its
    idle lists them. One older than COPY_REPAIR_SECONDS and still missing is lost, not late."""
    present = set(
        SessionEvent.objects.filter(
            session_id=primary_id, id__in=[thread_copy_id(event_id) for event_id in event_ids]
        ).values_list("id", flat=True)
    )
    missing = [event_id for event_id in event_ids if thread_copy_id(event_id) not in present]
    if not missing:
        return
    cutoff = timezone.now() - timedelta(seconds=COPY_REPAIR_SECONDS)
    rows = SessionEvent.objects.filter(id__in=missing, created_at__lt=cutoff).select_related("session")
    items = []
    for row in rows.order_by("session_id", "seq"):
        tool_use = crosspost_tool_use({"id": row.id, "type": row.type, "payload": row.payload}, row.session)
        items.append({"type": row.type, **tool_use["crosspost_copy"]})
    if items:
        events_append(session_id=primary_id, items=items)


# How far back the reaper looks for thread status copies a crash lost (it runs every minute).
STATUS_COPY_REPAIR_WINDOW = timedelta(minutes=10)


def thread_status_copies_repair() -> int:
    """The copies on their primaries' logs of child threads' status events (sessions.thread_events
    .status_item: the copy's id is known) that a crash lost between the thread's commit and the
    copy's append are appended now (the reaper's pass; a copy younger than COPY_REPAIR_SECONDS
    may still be on its way). A repaired copy comes later in the session's log than its place.
    Returns how many were made again."""
    now = timezone.now()
    children = dict(
        Session.objects.filter(
            primary__isnull=False, deleted_at__isnull=True, updated_at__gte=now - STATUS_COPY_REPAIR_WINDOW
        ).values_list("id", "primary_id")
    )
    if not children:
        return 0
    rows = list(
        SessionEvent.objects.filter(
            session_id__in=list(children),
            type__in=list(tev.THREAD_STATUS_TYPES.values()),
            private__has_key=tev.STATUS_COPY,
            created_at__lt=now - timedelta(seconds=COPY_REPAIR_SECONDS),
            created_at__gte=now - STATUS_COPY_REPAIR_WINDOW,
        ).order_by("session_id", "seq")
    )
    wanted = {row.private[tev.STATUS_COPY]: row for row in rows}
    present = set(SessionEvent.objects.filter(id__in=list(wanted)).values_list("id", flat=True))
    missing: dict[str, list[dict]] = {}
    for copy_id, row in wanted.items():
        if copy_id not in present:
            copy = {"id": copy_id, "type": row.type, "payload": tev.status_copy_payload(row.payload)}
            missing.setdefault(children[row.session_id], []).append(copy)
    for primary_id, copies in missing.items():
        try:
            with transaction.atomic():
                events_append(session_id=primary_id, items=copies)
        except IntegrityError:  # made meanwhile by the copy's own append
            continue
    return sum(len(copies) for copies in missing.values())
