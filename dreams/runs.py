"""A dream's start: run once, whatever kills it and runs it again (acks_late redelivery, the
sweep's re-send of a pending dream).

1. create_new: under the dream's row lock, one transaction creates the output store, copies the
   input store's memories into it (versions attributed to the API key that created the dream)
   and records `output_store_id`: a kill before the commit leaves nothing, after it the store
   is recorded and not copied again.
2. Under the dream's row lock again, one transaction creates the dream's internal agent and
   environment (agents' `internal` flag: never listed, never announced) and the session (the
   output store attached read_write, the transcripts as its first user message), records
   `session_id` and moves the dream to running: the same all-or-nothing.
From then on the session runtime owns the work (its own recovery resumes a killed turn), and
dreams/receivers.py moves the dream when the session's status changes."""

import logging

from django.db import transaction
from django.utils import timezone

from agents.serializers import parse_agent_fields, parse_environment_create
from agents.services import agent_create, environment_create
from core.crashpoints import crash_point
from core.errors import ApiError
from dreams.models import Dream
from dreams.services import dream_end_locked
from dreams.transcript import dream_prompt
from memory.selectors import memory_store_contents, memory_store_for_session
from memory.services import memory_create_locked, memory_store_create
from processors.memory import STORE_NAME_MAX_CHARS, mount_path
from sessions.serializers.sessions import parse_session_create
from sessions.services.sessions import session_create

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are dreaming: you reorganize a memory store, a directory of text files that agents \
read at the start of their sessions, using what past sessions show.

The memory store is mounted read-write at {path}. The user message holds the transcripts of the \
sessions to learn from. Read every file of the store first. Then rewrite the directory so that it is \
accurate and concise:
- merge duplicate or overlapping memories into one file;
- fix facts that the transcripts show are stale or wrong, and add what the sessions learned that is \
worth remembering;
- delete what is obsolete; keep the files short, well named and organized by topic.
Only the files under {path} are kept. When the directory is in order, end your turn with a short \
summary of what you changed."""

TOOLS = [
    {
        "type": "agent_toolset_20260401",
        "configs": [{"name": "web_fetch", "enabled": False}, {"name": "web_search", "enabled": False}],
    }
]


def _locked(dream_id: str) -> Dream | None:
    return Dream.objects.select_for_update().select_related("workspace").filter(id=dream_id).first()


def _fail(dream_id: str, exc: ApiError) -> None:
    with transaction.atomic():
        dream = _locked(dream_id)
        if dream is not None:
            message = str(getattr(exc, "message", "") or exc)[:1000]
            kind = "invalid_request_error" if exc.status == 400 else "internal_error"
            dream_end_locked(dream, Dream.Status.FAILED, {"type": kind, "message": message})


def _output_store_copy(dream: Dream) -> None:
    """create_new: the output store as a copy of the input's memories, recorded on the dream."""
    source = memory_store_for_session(workspace_id=dream.workspace_id, memory_store_id=dream.memory_store_id)
    if source is None:
        raise ApiError(f"inputs: memory store {dream.memory_store_id!r} no longer exists.")
    name = f"{source.name} (dream {dream.id})"[:STORE_NAME_MAX_CHARS]
    store = memory_store_create(
        workspace=dream.workspace, name=name, description=source.description, metadata={"dream_id": dream.id}
    )
    actor = {"type": "api_actor", "api_key_id": dream.api_key_id}
    store = type(store).objects.select_for_update().get(pk=store.pk)
    for _, path, _, content in memory_store_contents(store=source):
        memory_create_locked(store=store, path=path, content=content, actor=actor)
    crash_point("dreams.start.store_copied")
    dream.output_store_id = store.id
    dream.save(update_fields=["output_store_id"])


def _session_start(dream: Dream) -> None:
    store = memory_store_for_session(workspace_id=dream.workspace_id, memory_store_id=dream.output_store_id)
    if store is None:
        raise ApiError(f"outputs: memory store {dream.output_store_id!r} no longer exists.")
    mount = mount_path(store.name)
    system = SYSTEM_PROMPT.format(path=mount)
    if dream.instructions:
        system += f"\n\nInstructions for this dream:\n{dream.instructions}"
    fields, _ = parse_agent_fields(
        {"name": f"Dream {dream.id}", "model": dream.model_id, "system": system, "tools": TOOLS}, partial=False
    )
    agent, _ = agent_create(workspace=dream.workspace, fields=fields, internal=True)
    environment = environment_create(
        workspace=dream.workspace,
        **parse_environment_create(
            {"name": f"Dream {dream.id}", "config": {"type": "cloud", "networking": {"type": "limited"}}}
        ),
        internal=True,
    )
    prompt = dream_prompt(session_ids=list(dream.session_ids), mount=mount)
    params = parse_session_create(
        {
            "agent": agent.id,
            "environment_id": environment.id,
            "title": f"Dream {dream.id}",
            "metadata": {"dream_id": dream.id},
            "resources": [{"type": "memory_store", "memory_store_id": store.id, "access": "read_write"}],
            "initial_events": [{"type": "user.message", "content": [{"type": "text", "text": prompt}]}],
            **_budget(dream),
        }
    )
    session = session_create(workspace=dream.workspace, **params)
    crash_point("dreams.start.session_created")
    dream.session_id, dream.agent_id = session.id, agent.id
    dream.status, dream.started_at = Dream.Status.RUNNING, timezone.now()
    dream.save(update_fields=["session_id", "agent_id", "status", "started_at"])


def _budget(dream: Dream) -> dict:
    """The session's budget: the dream's cap as the session's `max_list_cost` (at the cap the
    session makes no more model requests and goes idle with budget_reached: the dream fails)."""
    if dream.max_list_cost_cents is None:
        return {}
    amount = {"amount": str(dream.max_list_cost_cents), "currency": "USD"}
    return {"budget": {"type": "limit", "max_list_cost": amount}}


def dream_start(*, dream_id: str) -> None:
    """Each step once (see the module's docstring); a step the inputs refuse fails the dream."""
    try:
        with transaction.atomic():
            dream = _locked(dream_id)
            if dream is None or dream.status != Dream.Status.PENDING:
                return
            if dream.output_store_id is None:
                _output_store_copy(dream)
        crash_point("dreams.start.store_committed")
        with transaction.atomic():
            dream = _locked(dream_id)
            if dream is None or dream.status != Dream.Status.PENDING or dream.session_id:
                return
            _session_start(dream)
        crash_point("dreams.start.committed")
    except ApiError as exc:
        logger.info("a dream could not start", extra={"dream_id": dream_id})
        _fail(dream_id, exc)
