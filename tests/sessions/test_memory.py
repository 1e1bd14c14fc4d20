"""Memory stores: the official SDK drives the 14 methods (strict response validation), with
preconditions, path conflicts, redaction, the list's prefixes and depth, the version filters and
actors; limits are 400s with nothing stored; another workspace sees nothing (404s)."""

import hashlib

import anthropic
import pytest

from memory.models import Memory, MemoryStore, MemoryVersion

pytestmark = pytest.mark.django_db(transaction=True)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_sdk_drives_the_store_methods(sdk, api_key):
    stores = sdk.beta.memory_stores
    store = stores.create(name="User Preferences", description="What the user likes.", metadata={"user": "u1"})
    assert store.type == "memory_store" and store.id.startswith("memstore_") and store.archived_at is None
    assert store.name == "User Preferences" and store.description == "What the user likes."
    assert store.metadata == {"user": "u1"}
    bare = stores.create(name="bare")
    assert bare.description == "" and bare.metadata == {}

    assert stores.retrieve(store.id).name == "User Preferences"
    updated = stores.update(store.id, name="Prefs", metadata={"user": None, "team": "t"})
    assert (
        updated.name == "Prefs" and updated.metadata == {"team": "t"} and updated.description == "What the user likes."
    )
    assert updated.updated_at > store.updated_at
    assert [s.id for s in stores.list()] == [bare.id, store.id]
    assert [s.id for s in stores.list(limit=1)] == [bare.id, store.id]  # auto-paginated, one per page
    first_page = stores.list(limit=1)
    assert len(first_page.data) == 1 and first_page.next_page

    archived = stores.archive(bare.id)
    assert archived.archived_at is not None
    assert stores.archive(bare.id).archived_at == archived.archived_at  # archiving again changes nothing
    assert [s.id for s in stores.list()] == [store.id]
    assert {s.id for s in stores.list(include_archived=True)} == {store.id, bare.id}
    assert [s.id for s in stores.list(created_at_gte=store.created_at, created_at_lte=store.created_at)] == [store.id]
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        stores.update(bare.id, name="x")
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        stores.memories.create(bare.id, path="/a.md", content="x")

    deleted = stores.delete(bare.id)
    assert deleted.type == "memory_store_deleted" and deleted.id == bare.id
    with pytest.raises(anthropic.NotFoundError):
        stores.retrieve(bare.id)


def test_the_sdk_drives_memories_with_preconditions_and_conflicts(sdk, api_key):
    store = sdk.beta.memory_stores.create(name="notes")
    memories = sdk.beta.memory_stores.memories
    created = memories.create(store.id, path="/projects/foo/notes.md", content="first")
    assert created.type == "memory" and created.id.startswith("mem_") and created.content is None  # basic view
    assert created.content_sha256 == sha("first") and created.content_size_bytes == 5
    assert created.memory_store_id == store.id and created.memory_version_id.startswith("memver_")
    full = memories.create(store.id, path="/top.md", content="héllo", view="full")
    assert full.content == "héllo" and full.content_size_bytes == len("héllo".encode())

    fetched = memories.retrieve(created.id, memory_store_id=store.id)
    assert fetched.content == "first" and fetched.path == "/projects/foo/notes.md"  # full by default
    assert memories.retrieve(created.id, memory_store_id=store.id, view="basic").content is None

    with pytest.raises(anthropic.ConflictError) as taken:
        memories.create(store.id, path="/top.md", content="again")
    assert taken.value.body["error"]["type"] == "memory_path_conflict_error"
    with pytest.raises(anthropic.ConflictError) as moved_onto:
        memories.update(created.id, memory_store_id=store.id, path="/top.md")
    assert moved_onto.value.body["error"]["type"] == "memory_path_conflict_error"

    stale = {"type": "content_sha256", "content_sha256": sha("not it")}
    with pytest.raises(anthropic.ConflictError) as failed:
        memories.update(created.id, memory_store_id=store.id, content="second", precondition=stale)
    assert failed.value.body["error"]["type"] == "memory_precondition_failed_error"
    assert memories.retrieve(created.id, memory_store_id=store.id).content == "first"  # nothing changed

    fresh = {"type": "content_sha256", "content_sha256": created.content_sha256}
    second = memories.update(created.id, memory_store_id=store.id, content="second", precondition=fresh)
    assert second.content_sha256 == sha("second") and second.memory_version_id != created.memory_version_id
    same = memories.update(created.id, memory_store_id=store.id, content="second")
    assert same.memory_version_id == second.memory_version_id  # no change, no version
    renamed = memories.update(created.id, memory_store_id=store.id, path="/projects/bar/notes.md", view="full")
    assert renamed.id == created.id and renamed.path == "/projects/bar/notes.md" and renamed.content == "second"

    with pytest.raises(anthropic.ConflictError) as guarded:
        memories.delete(created.id, memory_store_id=store.id, expected_content_sha256=sha("first"))
    assert guarded.value.body["error"]["type"] == "memory_precondition_failed_error"
    gone = memories.delete(created.id, memory_store_id=store.id, expected_content_sha256=sha("second"))
    assert gone.type == "memory_deleted" and gone.id == created.id
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(created.id, memory_store_id=store.id)
    # The path is free again.
    memories.create(store.id, path="/projects/bar/notes.md", content="reborn")


def test_list_with_prefix_depth_view_and_pages(sdk, api_key):
    store = sdk.beta.memory_stores.create(name="tree")
    memories = sdk.beta.memory_stores.memories
    for path in ("/a.md", "/notes/todo.md", "/notes/deep/x.md", "/notes/deep/y.md", "/notes-archive/old.md", "/z.md"):
        memories.create(store.id, path=path, content=f"content of {path}")

    everything = list(memories.list(store.id))
    assert [item.path for item in everything] == sorted(
        ["/a.md", "/notes/todo.md", "/notes/deep/x.md", "/notes/deep/y.md", "/notes-archive/old.md", "/z.md"]
    )
    assert all(item.type == "memory" and item.content is None for item in everything)
    assert [item.path for item in memories.list(store.id, path_prefix="/notes/")] == [
        "/notes/deep/x.md",
        "/notes/deep/y.md",
        "/notes/todo.md",
    ]  # whole segments: /notes-archive/ is not under /notes/
    top = list(memories.list(store.id, depth=1))
    assert [(item.type, item.path) for item in top] == [
        ("memory", "/a.md"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/z.md"),
    ]
    inside = list(memories.list(store.id, path_prefix="/notes/", depth=1))
    assert [(item.type, item.path) for item in inside] == [
        ("memory_prefix", "/notes/deep/"),
        ("memory", "/notes/todo.md"),
    ]

    paged = memories.list(store.id, limit=2, view="full")
    assert len(paged.data) == 2 and paged.next_page and paged.data[0].content == "content of /a.md"
    assert [item.path for item in memories.list(store.id, limit=2)] == [item.path for item in everything]
    prefixes = memories.list(store.id, depth=1, limit=2)
    assert [item.path for item in prefixes.data] == ["/a.md", "/notes-archive/"]
    assert [item.path for item in prefixes.get_next_page().data] == ["/notes/", "/z.md"]

    with pytest.raises(anthropic.BadRequestError, match="path_prefix"):
        memories.list(store.id, path_prefix="/notes")
    with pytest.raises(anthropic.BadRequestError, match="view"):
        memories.list(store.id, view="everything")


def test_versions_with_filters_actors_and_redaction(sdk, live_server, api_key, db):
    store = sdk.beta.memory_stores.create(name="log")
    memories, versions = sdk.beta.memory_stores.memories, sdk.beta.memory_stores.memory_versions
    memory = memories.create(store.id, path="/secret.md", content="password=hunter2")
    other = memories.create(store.id, path="/other.md", content="x")
    memories.update(memory.id, memory_store_id=store.id, content="nothing secret")
    memories.delete(other.id, memory_store_id=store.id)

    listed = list(versions.list(store.id))
    assert [(v.operation, v.memory_id) for v in listed] == [
        ("deleted", other.id),
        ("modified", memory.id),
        ("created", other.id),
        ("created", memory.id),
    ]  # newest first
    assert all(v.content is None for v in listed)  # basic by default
    assert listed[0].content_sha256 is None and listed[0].path == "/other.md"  # a deleted version
    actor = listed[1].created_by
    assert actor.type == "api_actor" and actor.api_key_id == api_key.row.id

    assert [v.operation for v in versions.list(store.id, memory_id=memory.id)] == ["modified", "created"]
    assert [v.memory_id for v in versions.list(store.id, operation="deleted")] == [other.id]
    assert len(list(versions.list(store.id, api_key_id=api_key.row.id))) == 4
    assert list(versions.list(store.id, api_key_id="apikey_someone_else")) == []
    assert list(versions.list(store.id, session_id="sesn_none")) == []
    assert list(versions.list(store.id, service_account_id="svac_none")) == []
    since = listed[1].created_at
    assert [v.operation for v in versions.list(store.id, created_at_gte=since)] == ["deleted", "modified"]
    assert [v.id for v in versions.list(store.id, created_at_lte=listed[3].created_at)] == [listed[3].id]
    full = list(versions.list(store.id, view="full", memory_id=memory.id))
    assert full[1].content == "password=hunter2"

    first = listed[3]
    assert versions.retrieve(first.id, memory_store_id=store.id).content == "password=hunter2"
    current = memories.retrieve(memory.id, memory_store_id=store.id).memory_version_id
    with pytest.raises(anthropic.BadRequestError, match="current content"):
        versions.redact(current, memory_store_id=store.id)
    redacted = versions.redact(first.id, memory_store_id=store.id)
    assert redacted.redacted_at is not None and redacted.redacted_by.type == "api_actor"
    assert redacted.redacted_by.api_key_id == api_key.row.id
    assert redacted.content is None and redacted.path is None and redacted.content_sha256 is None
    assert redacted.content_size_bytes is None and redacted.created_by.type == "api_actor"
    again = versions.retrieve(first.id, memory_store_id=store.id)
    assert again.redacted_at == redacted.redacted_at and again.content is None
    assert versions.redact(first.id, memory_store_id=store.id).redacted_at == redacted.redacted_at
    assert not MemoryVersion.objects.filter(content__contains="hunter2").exists()
    # The memory itself is untouched.
    assert memories.retrieve(memory.id, memory_store_id=store.id).content == "nothing secret"


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("relative.md", "must start with '/'"),
        ("/a//b.md", "segment ''"),
        ("/a/../b.md", "segment '..'"),
        ("/a/./b.md", "segment '.'"),
        ("/dir/", "segment ''"),
        ("/bad\x01name", "U+0001"),
        ("/zero\u200bwidth", "U+200B"),
        ("/line\u2028sep", "U+2028"),
        ("/cafe\u0301.md", "Normalization Form C"),
        ("/" + "/".join(["s"] * 21), "at most 20"),
        ("/" + "é" * 600, "at most 1024 bytes"),
    ],
    ids=["relative", "empty-segment", "dotdot", "dot", "trailing-slash", "control", "format", "separator", "nfd",
         "segments", "bytes"],
)  # fmt: skip
def test_bad_paths_are_400_with_nothing_stored(sdk, api_key, path, fragment):
    store = sdk.beta.memory_stores.create(name="paths")
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.memory_stores.memories.create(store.id, path=path, content="x")
    assert fragment in refused.value.message
    assert not Memory.objects.exists() and not MemoryVersion.objects.exists()


def test_limits_are_400_with_nothing_stored(sdk, api_key, settings):
    memories = sdk.beta.memory_stores.memories
    store = sdk.beta.memory_stores.create(name="limits")
    with pytest.raises(anthropic.BadRequestError, match="at most 102400 bytes"):
        memories.create(store.id, path="/big.md", content="é" * 51_201)  # 102,402 bytes
    memories.create(store.id, path="/fits.md", content="x" * 102_400)
    kept = memories.create(store.id, path="/small.md", content="x")
    with pytest.raises(anthropic.BadRequestError, match="at most 102400"):
        memories.update(kept.id, memory_store_id=store.id, content="y" * 102_401)
    assert memories.retrieve(kept.id, memory_store_id=store.id).content == "x"

    settings.MANGO_MEMORY_STORE_MAX_MEMORIES = 2
    with pytest.raises(anthropic.BadRequestError, match="limit of 2 memories"):
        memories.create(store.id, path="/third.md", content="x")
    assert Memory.objects.count() == 2 and MemoryVersion.objects.count() == 2

    settings.MANGO_WORKSPACE_MAX_MEMORY_STORES = 1
    with pytest.raises(anthropic.BadRequestError, match="limit of 1 memory stores"):
        sdk.beta.memory_stores.create(name="second")
    with pytest.raises(anthropic.BadRequestError, match="name"):
        sdk.beta.memory_stores.update(store.id, name="x" * 256)
    with pytest.raises(anthropic.BadRequestError, match="metadata"):
        sdk.beta.memory_stores.update(store.id, metadata={f"k{i}": "v" for i in range(17)})
    assert MemoryStore.objects.count() == 1


def test_another_workspace_sees_nothing(sdk, live_server, api_key, other_api_key):
    store = sdk.beta.memory_stores.create(name="private")
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="mine")
    version = memory.memory_version_id
    other = anthropic.Anthropic(
        base_url=live_server.url, api_key=str(other_api_key), max_retries=0, _strict_response_validation=True
    )
    ms = other.beta.memory_stores
    for call in (
        lambda: ms.retrieve(store.id),
        lambda: ms.update(store.id, name="stolen"),
        lambda: ms.archive(store.id),
        lambda: ms.delete(store.id),
        lambda: ms.memories.create(store.id, path="/b.md", content="x"),
        lambda: ms.memories.list(store.id),
        lambda: ms.memories.retrieve(memory.id, memory_store_id=store.id),
        lambda: ms.memories.update(memory.id, memory_store_id=store.id, content="x"),
        lambda: ms.memories.delete(memory.id, memory_store_id=store.id),
        lambda: ms.memory_versions.list(store.id),
        lambda: ms.memory_versions.retrieve(version, memory_store_id=store.id),
        lambda: ms.memory_versions.redact(version, memory_store_id=store.id),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert list(ms.list(include_archived=True)) == []
    # And a memory of one store is not reachable through another store of the same workspace.
    mine = sdk.beta.memory_stores.create(name="second")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=mine.id)
    assert sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id).content == "mine"


MODEL = "claude-sonnet-4-5"


def _agent_and_env(sdk, *, config=None):
    agent = sdk.beta.agents.create(name="a", model=MODEL, system="Be brief.")
    env = sdk.beta.environments.create(name="e", config=config or {"type": "cloud"})
    return agent, env


def test_sessions_attach_stores_snapshot_them_and_filter_by_them(sdk, api_key):
    prefs = sdk.beta.memory_stores.create(name="User Preferences!", description="Likes and dislikes.")
    facts = sdk.beta.memory_stores.create(name="facts")
    agent, env = _agent_and_env(sdk)
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "memory_store", "memory_store_id": prefs.id, "instructions": "Update after each task."},
            {"type": "memory_store", "memory_store_id": facts.id, "access": "read_only"},
        ],
    )
    first, second = session.resources
    assert first.type == "memory_store" and first.memory_store_id == prefs.id and first.access == "read_write"
    assert first.mount_path == "/mnt/memory/user-preferences" and first.name == "User Preferences!"
    assert first.description == "Likes and dislikes." and first.instructions == "Update after each task."
    assert second.access == "read_only" and second.mount_path == "/mnt/memory/facts" and second.instructions is None

    # Snapshotted: renaming the store later does not change the session's record.
    sdk.beta.memory_stores.update(prefs.id, name="renamed", description="other")
    again = sdk.beta.sessions.retrieve(session.id).resources[0]
    assert again.name == "User Preferences!" and again.mount_path == "/mnt/memory/user-preferences"

    listed = list(sdk.beta.sessions.resources.list(session.id))
    assert [(r.type, r.memory_store_id) for r in listed] == [("memory_store", prefs.id), ("memory_store", facts.id)]
    assert listed[1].mount_path == "/mnt/memory/facts" and listed[1].access == "read_only"

    other = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert [s.id for s in sdk.beta.sessions.list(memory_store_id=facts.id)] == [session.id]
    assert {s.id for s in sdk.beta.sessions.list()} == {session.id, other.id}
    assert list(sdk.beta.sessions.list(memory_store_id="memstore_unknown")) == []

    from sessions.runtime.model import system_prompt
    from sessions.selectors import session_get

    prompt = system_prompt(session_get(workspace=api_key.workspace, session_id=session.id))
    assert prompt.startswith("Be brief.\n\n<memory>")
    assert '<memory_store name="User Preferences!" path="/mnt/memory/user-preferences" access="read_write">' in prompt
    assert "<description>Likes and dislikes.</description>" in prompt
    assert "<instructions>Update after each task.</instructions>" in prompt
    assert '<memory_store name="facts" path="/mnt/memory/facts" access="read_only">' in prompt


def test_bad_memory_store_resources_are_400_with_no_session(sdk, api_key, other_api_key, live_server):
    agent, env = _agent_and_env(sdk)
    store = sdk.beta.memory_stores.create(name="notes")
    same_slug = sdk.beta.memory_stores.create(name="NOTES")
    archived = sdk.beta.memory_stores.create(name="old")
    sdk.beta.memory_stores.archive(archived.id)
    foreign = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    theirs = foreign.beta.memory_stores.create(name="theirs")
    cases = [
        ([{"type": "memory_store", "memory_store_id": "memstore_missing"}], "not found"),
        ([{"type": "memory_store", "memory_store_id": theirs.id}], "not found"),
        ([{"type": "memory_store", "memory_store_id": archived.id}], "archived"),
        ([{"type": "memory_store", "memory_store_id": store.id}] * 2, "attached twice"),
        (
            [
                {"type": "memory_store", "memory_store_id": store.id},
                {"type": "memory_store", "memory_store_id": same_slug.id},
            ],
            "/mnt/memory/notes",
        ),
        ([{"type": "memory_store", "memory_store_id": store.id, "access": "write_only"}], "access"),
        ([{"type": "memory_store", "memory_store_id": store.id, "instructions": "x" * 4097}], "instructions"),
        ([{"type": "memory_store", "memory_store_id": store.id, "mount_path": "/mnt/x"}], "output-only"),
    ]
    for resources, fragment in cases:
        with pytest.raises(anthropic.BadRequestError) as refused:
            sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=resources)
        assert fragment in refused.value.message, (resources, refused.value.message)
    assert list(sdk.beta.sessions.list()) == []


def test_the_sdk_self_hosted_memory_sync_works_against_mango(sdk, live_server, api_key, tmp_path):
    """The SDK's own EnvironmentWorker memory sync (lib/tools/_memories.py): download every
    memory to the store's mount_path, then push local edits, creations and deletions back."""
    import asyncio
    import uuid
    from pathlib import Path

    from anthropic.lib.tools._memories import SessionMemoryStores

    store = sdk.beta.memory_stores.create(name=f"sync test {uuid.uuid4().hex[:12]}")
    ms = sdk.beta.memory_stores.memories
    ms.create(store.id, path="/notes/a.md", content="remote")
    ms.create(store.id, path="/gone.md", content="bye")
    agent, env = _agent_and_env(sdk, config={"type": "self_hosted"})
    session = sdk.beta.sessions.create(
        agent=agent.id, environment_id=env.id, resources=[{"type": "memory_store", "memory_store_id": store.id}]
    )
    root = Path(session.resources[0].mount_path)
    assert not root.exists()

    async def run():
        client = anthropic.AsyncAnthropic(base_url=live_server.url, api_key=str(api_key), max_retries=0)
        async with client:
            stores = SessionMemoryStores(client, workdir=tmp_path)
            await stores.download(session)
            try:
                pulled = (root / "notes" / "a.md").read_text(), (root / "gone.md").read_text()
                (root / "notes" / "a.md").write_text("local edit")
                (root / "new.md").write_text("created locally")
                (root / "gone.md").unlink()
                await stores.finish()
            finally:
                await stores.dispose()
            return pulled

    assert asyncio.run(run()) == ("remote", "bye")
    assert not root.exists()  # the SDK removes the folder it made
    current = {item.path: item.content for item in ms.list(store.id, view="full")}
    assert current == {"/notes/a.md": "local edit", "/new.md": "created locally"}


def test_the_workspace_memory_quota_is_a_400_with_nothing_stored(sdk, api_key, settings):
    # Every version counts its path and content bytes and VERSION_OVERHEAD_BYTES (256).
    settings.MANGO_WORKSPACE_MEMORY_MAX_BYTES = (256 + 5 + 6) + (256 + 5 + 4)
    memories = sdk.beta.memory_stores.memories
    first = sdk.beta.memory_stores.create(name="one")
    second = sdk.beta.memory_stores.create(name="two")
    kept = memories.create(first.id, path="/a.md", content="123456")
    with pytest.raises(anthropic.BadRequestError, match="quota of 532 bytes") as refused:
        memories.create(second.id, path="/b.md", content="12345")  # one byte over both stores
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert refused.value.body["error"]["details"]["error_code"] == "memory_quota_exceeded"
    with pytest.raises(anthropic.BadRequestError, match="quota of 532 bytes"):
        memories.update(kept.id, memory_store_id=first.id, content="1234567")  # every new version counts
    assert Memory.objects.count() == 1 and MemoryVersion.objects.count() == 1
    memories.create(second.id, path="/b.md", content="1234")  # at the quota
    memories.delete(kept.id, memory_store_id=first.id)  # deleting always works
    assert sorted(MemoryStore.objects.values_list("stored_bytes", flat=True)) == [265, 267 + 256 + 5]


def test_a_path_is_never_both_a_memory_and_a_directory_of_memories(sdk, api_key):
    """Issue 44, finding 7: mounted in a sandbox a store is one directory tree, where `/x` cannot
    be a file and hold `/x/y`; the API refuses the second of the two, in either order."""
    store = sdk.beta.memory_stores.create(name="tree")
    memories = sdk.beta.memory_stores.memories
    memories.create(store.id, path="/x", content="a file")
    below = memories.create(store.id, path="/y/z.md", content="under /y")
    for path in ("/x/y", "/x/deep/er.md", "/y", "/y/z.md/w"):
        with pytest.raises(anthropic.ConflictError) as clash:
            memories.create(store.id, path=path, content="clash")
        assert clash.value.body["error"]["type"] in ("memory_path_conflict_error",), path
    with pytest.raises(anthropic.ConflictError, match="both a memory and a directory"):
        memories.update(below.id, memory_store_id=store.id, path="/x/z.md")
    assert sorted(Memory.objects.filter(store_id=store.id).values_list("path", flat=True)) == ["/x", "/y/z.md"]
    # Siblings that only share a prefix of characters are not directories of each other.
    memories.create(store.id, path="/x-y", content="a sibling")
    memories.create(store.id, path="/xy/z", content="another")
    # A memory may move under where it was (its old path is gone).
    assert memories.update(below.id, memory_store_id=store.id, path="/y/z.md/w").path == "/y/z.md/w"


def test_memory_versions_count_toward_the_workspace_quota(sdk, api_key, settings):
    """Issue 44, finding 5: 500 updates of 100 KB to one memory all succeeded (the quota counted
    current content only). Every version counts; redacting one frees its bytes."""
    settings.MANGO_WORKSPACE_MEMORY_MAX_BYTES = 10_000
    cost = 1000 + len("/a.md") + 256
    store = sdk.beta.memory_stores.create(name="history")
    memories = sdk.beta.memory_stores.memories
    memory = memories.create(store.id, path="/a.md", content="x" * 1000)
    accepted = 0
    with pytest.raises(anthropic.BadRequestError, match="every version counts") as refused:
        for turn in range(20):
            memories.update(memory.id, memory_store_id=store.id, content=("y" if turn % 2 == 0 else "x") * 1000)
            accepted += 1
    assert refused.value.body["error"]["details"]["error_code"] == "memory_quota_exceeded"
    assert accepted == 10_000 // cost - 1
    assert MemoryVersion.objects.filter(store_id=store.id).count() == 10_000 // cost
    assert MemoryStore.objects.get(pk=store.id).stored_bytes == (10_000 // cost) * cost
    oldest = list(sdk.beta.memory_stores.memory_versions.list(memory_store_id=store.id))[-1]
    sdk.beta.memory_stores.memory_versions.redact(oldest.id, memory_store_id=store.id)
    memories.update(memory.id, memory_store_id=store.id, content="z" * 1000)  # the freed bytes hold it
    with pytest.raises(anthropic.BadRequestError, match="every version counts"):
        memories.update(memory.id, memory_store_id=store.id, content="w" * 1000)
