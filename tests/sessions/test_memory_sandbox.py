"""Memory stores in real Docker sandboxes: mounted at /mnt/memory/<name> and read; written back at
idle as versions with a session_actor (create, modify, delete); read_only refused inside; two
sessions on one store; a conflict is a session.error naming the path with nothing lost; files
the memory rules refuse are named and not stored; the system prompt's memory section."""

import pytest

from memory.models import Memory, MemoryStore, MemoryVersion
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow]

MODEL = "claude-sonnet-4-5"


def _agent_env(sdk):
    agent = sdk.beta.agents.create(
        name="rememberer", model=MODEL, system="Be brief.", tools=[{"type": "agent_toolset_20260401"}]
    )
    env = sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})
    return agent, env


def _turn(sdk, model, session_id: str, command: str) -> tuple[str, list[dict]]:
    """One user turn that runs `command` with bash and ends; the tool's output and the model requests."""
    model.script([tool_use("bash", {"command": command}), text("Done.")])
    before = len([e for e in sdk.beta.sessions.events.list(session_id, limit=1000) if e.type == "agent.tool_result"])
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    requests = model.wait_for_requests(2, timeout=90)

    def idle_after_turn():
        events = list(sdk.beta.sessions.events.list(session_id, limit=1000))
        results = [e for e in events if e.type == "agent.tool_result"]
        return len(results) > before and events[-1].type == "session.status_idle"

    wait_for(idle_after_turn, timeout=60)
    results = [e for e in sdk.beta.sessions.events.list(session_id, limit=1000) if e.type == "agent.tool_result"]
    return "".join(block.text for block in results[-1].content), requests


def _errors(sdk, session_id: str) -> list[str]:
    return [e.error.message for e in sdk.beta.sessions.events.list(session_id, limit=1000) if e.type == "session.error"]


def _memories(store_id: str) -> dict[str, str]:
    return dict(Memory.objects.filter(store_id=store_id).values_list("path", "content"))


@pytest.mark.timeout(240)
def test_mount_read_write_back_read_only_and_the_prompt(sdk, live_server, api_key, model, celery_worker):
    notes = sdk.beta.memory_stores.create(name="Project Notes", description="What we learned about the project.")
    facts = sdk.beta.memory_stores.create(name="facts", description="Reference facts.")
    ms = sdk.beta.memory_stores.memories
    kept = ms.create(notes.id, path="/kept.md", content="unchanged")
    edited = ms.create(notes.id, path="/dir/edit.md", content="before")
    doomed = ms.create(notes.id, path="/dir/doomed.md", content="delete me")
    ms.create(facts.id, path="/fact.md", content="water is wet")
    agent, env = _agent_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "memory_store", "memory_store_id": notes.id, "instructions": "Keep notes current."},
            {"type": "memory_store", "memory_store_id": facts.id, "access": "read_only"},
        ],
    )
    rw, ro = "/mnt/memory/project-notes", "/mnt/memory/facts"
    probe = (
        f"cat {rw}/kept.md; echo; cat {rw}/dir/edit.md; echo; cat {ro}/fact.md; echo;"
        f" printf after > {rw}/dir/edit.md; mkdir -p {rw}/new/deep && printf fresh > {rw}/new/deep/file.md;"
        f" rm {rw}/dir/doomed.md;"
        f" head -c 200000 /dev/zero | tr '\\0' x > {rw}/toobig.md; printf '\\377\\376' > {rw}/binary.md;"
        f" ln -s kept.md {rw}/link.md;"
        f" (echo changed > {ro}/fact.md) 2>/dev/null && echo RO-WROTE || echo RO-REFUSED;"
        f" (touch {ro}/new.md) 2>/dev/null && echo RO-CREATED || echo RO-NOCREATE;"
        f" (rm -f {ro}/fact.md) 2>/dev/null; test -f {ro}/fact.md && echo RO-KEPT"
    )
    output, requests = _turn(sdk, model, session.id, probe)

    assert "unchanged" in output and "before" in output and "water is wet" in output
    assert "RO-REFUSED" in output and "RO-WROTE" not in output
    assert "RO-NOCREATE" in output and "RO-KEPT" in output

    # Written back before idle: created, modified, deleted, each a version by the session.
    assert _memories(notes.id) == {"/kept.md": "unchanged", "/dir/edit.md": "after", "/new/deep/file.md": "fresh"}
    by_session = list(sdk.beta.memory_stores.memory_versions.list(notes.id, session_id=session.id))
    assert sorted((v.operation, v.path) for v in by_session) == [
        ("created", "/new/deep/file.md"),
        ("deleted", "/dir/doomed.md"),
        ("modified", "/dir/edit.md"),
    ]
    assert all(v.created_by.type == "session_actor" and v.created_by.session_id == session.id for v in by_session)
    assert ms.retrieve(edited.id, memory_store_id=notes.id).content == "after"
    assert ms.retrieve(kept.id, memory_store_id=notes.id).memory_version_id == kept.memory_version_id  # no version
    assert [v.operation for v in sdk.beta.memory_stores.memory_versions.list(notes.id, memory_id=doomed.id)] == [
        "deleted",
        "created",
    ]
    # The read-only store is untouched.
    assert _memories(facts.id) == {"/fact.md": "water is wet"}
    assert MemoryVersion.objects.filter(store_id=facts.id).count() == 1

    # What the memory rules refuse is named in one session.error, and nothing of it is stored.
    (error,) = _errors(sdk, session.id)
    assert f"{rw}/toobig.md" in error and "at most 102,400 bytes" in error
    assert f"{rw}/binary.md" in error and "not UTF-8" in error
    assert f"{rw}/link.md" in error and "regular files" in error

    system = requests[0]["body"]["system"]
    system_text = system if isinstance(system, str) else "".join(block["text"] for block in system)
    assert system_text.startswith("Be brief.")
    assert f'<memory_store name="Project Notes" path="{rw}" access="read_write">' in system_text
    assert "<description>What we learned about the project.</description>" in system_text
    assert "<instructions>Keep notes current.</instructions>" in system_text
    assert f'<memory_store name="facts" path="{ro}" access="read_only">' in system_text

    # A second turn that only removes the refused files writes no version and reports nothing.
    count = MemoryVersion.objects.filter(store_id=notes.id).count()
    output, _ = _turn(sdk, model, session.id, f"rm {rw}/toobig.md {rw}/binary.md {rw}/link.md; ls -R {rw}")
    assert "file.md" in output
    assert MemoryVersion.objects.filter(store_id=notes.id).count() == count
    assert len(_errors(sdk, session.id)) == 1


@pytest.mark.timeout(300)
def test_two_sessions_on_one_store_and_a_conflict(sdk, live_server, api_key, model, celery_worker):
    store = sdk.beta.memory_stores.create(name="shared")
    ms = sdk.beta.memory_stores.memories
    shared = ms.create(store.id, path="/shared.md", content="v0")
    agent, env = _agent_env(sdk)
    resources = [{"type": "memory_store", "memory_store_id": store.id}]
    first = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=resources)
    second = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=resources)
    root = "/mnt/memory/shared"

    # Both sandboxes are filled with v0.
    assert "v0" in _turn(sdk, model, second.id, f"cat {root}/shared.md")[0]
    assert "v0" in _turn(sdk, model, first.id, f"cat {root}/shared.md; printf one > {root}/shared.md")[0]
    assert ms.retrieve(shared.id, memory_store_id=store.id).content == "one"

    # The second session edits what it read as v0: the precondition fails, the store keeps the
    # first session's version, the path is named, and its file stays in its sandbox.
    output, _ = _turn(
        sdk, model, second.id, f"printf two > {root}/shared.md; printf mine > {root}/second.md; cat {root}/shared.md"
    )
    assert "two" in output
    assert ms.retrieve(shared.id, memory_store_id=store.id).content == "one"
    (error,) = _errors(sdk, second.id)
    assert f"{root}/shared.md" in error and "precondition" in error
    assert _memories(store.id) == {"/shared.md": "one", "/second.md": "mine"}  # the other path was saved
    assert _errors(sdk, first.id) == []
    writers = {
        (v.operation, v.path, v.created_by.session_id)
        for v in sdk.beta.memory_stores.memory_versions.list(store.id)
        if v.created_by.type == "session_actor"
    }
    assert writers == {("modified", "/shared.md", first.id), ("created", "/second.md", second.id)}

    # A session filled after the first one's write sees it; deleting there propagates.
    third = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=resources)
    output, _ = _turn(sdk, model, third.id, f"cat {root}/shared.md; rm {root}/second.md")
    assert "one" in output
    assert _memories(store.id) == {"/shared.md": "one"}


@pytest.mark.timeout(180)
def test_a_memory_that_cannot_be_placed_is_never_deleted(sdk, live_server, api_key, model, celery_worker):
    """Issue 44, finding 7: a store written before the API refused the clash holds `/x` and
    `/x/y`; the sandbox can hold only one of them. The other is not placed, and the write-back
    after a turn that only lists the store deletes neither."""
    from django.utils import timezone

    from memory.services import memory_version_row, session_actor

    store = sdk.beta.memory_stores.create(name="clash")
    now = timezone.now()
    for path in ("/x", "/x/y"):  # as the previous build let the API write them
        memory = Memory(store_id=store.id, created_at=now)
        version = memory_version_row(
            store=MemoryStore.objects.get(pk=store.id),
            memory_id=memory.id,
            operation="created",
            path=path,
            content=f"content of {path}",
            actor=session_actor("sesn_before"),
            now=now,
        )
        version.save(force_insert=True)
        memory.path, memory.content, memory.content_sha256 = path, version.content, version.content_sha256
        memory.content_size_bytes, memory.version_id, memory.updated_at = version.content_size_bytes, version.id, now
        memory.save(force_insert=True)
    agent, env = _agent_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=env.id, resources=[{"type": "memory_store", "memory_store_id": store.id}]
    )
    output, _ = _turn(sdk, model, session.id, "ls -la /mnt/memory/clash; cat /mnt/memory/clash/x")
    assert "content of /x" in output
    assert _memories(store.id) == {"/x": "content of /x", "/x/y": "content of /x/y"}
    assert not MemoryVersion.objects.filter(store_id=store.id, operation="deleted").exists()


@pytest.mark.timeout(180)
def test_an_error_event_names_a_bounded_number_of_paths(sdk, live_server, api_key, model, celery_worker):
    """Issue 44, finding 8: a sandbox holding many files the memory rules refuse (100,000
    symlinks made a 10 MB session.error) gets one error that names at most 20 of them and says
    how many more there are."""
    from sessions.events import ERROR_MAX_NAMES

    store = sdk.beta.memory_stores.create(name="links")
    sdk.beta.memory_stores.memories.create(store.id, path="/kept.md", content="kept")
    agent, env = _agent_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=env.id, resources=[{"type": "memory_store", "memory_store_id": store.id}]
    )
    long = "l" * 200
    _turn(sdk, model, session.id, f"cd /mnt/memory/links && for i in $(seq 1 500); do ln -s kept.md {long}$i; done")
    (error,) = _errors(sdk, session.id)
    assert error.startswith("500 changes under /mnt/memory were not saved")
    assert error.count(long) == ERROR_MAX_NAMES and f"and {500 - ERROR_MAX_NAMES} more" in error
    assert len(error) < (ERROR_MAX_NAMES + 2) * 300
    assert _memories(store.id) == {"/kept.md": "kept"}
