"""Skills: the official SDK drives the 9 methods (strict response validation); hostile uploads
are refused with nothing in the bucket or the database; agents resolve skills; a session pinned
to a version sees exactly that version's files read-only at /mnt/skills/<name>/ and its system
prompt lists the skill; the SDK's own self-hosted skill download works against Mango."""

import asyncio
import hashlib
import importlib
import io
import re
import zipfile

import anthropic
import pytest
from anthropic.lib import files_from_dir
from anthropic.lib.tools._skills import download_session_skills
from django.apps import apps as django_apps
from django.core.management import call_command
from django.utils import timezone

from files import storage
from files.models import OwnedObject, StorageIntent, owned_key_prefix
from skills.models import Skill, SkillVersion
from skills.services import skills_unfinished_sweep
from tests.files.server import GunicornServer, run_manage
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-5"
SKILL_MD = "---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nRun scripts/hello.sh.\n"


def make_skill(root, *, name="pdf-tools", description="Tools for PDFs. Use for any PDF task.", extra=None):
    directory = root / name
    (directory / "scripts").mkdir(parents=True)
    (directory / "SKILL.md").write_text(SKILL_MD.format(name=name, description=description))
    (directory / "scripts" / "hello.sh").write_text("echo hello from the skill\n")
    for path, content in (extra or {}).items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(content)
    return directory


def bucket_keys(workspace_id: str) -> set[str]:
    """The workspace's objects under every prefix: Files' and the skill versions' own."""
    prefixes = (storage.KEY_PREFIX, owned_key_prefix(OwnedObject.OwnerKind.SKILL_VERSION))
    return {
        item["key"]
        for prefix in prefixes
        for item in storage.list_objects(prefix=storage.workspace_prefix(workspace_id, prefix=prefix))
    }


def test_the_sdk_drives_every_skills_method(sdk, api_key, s3_bucket, tmp_path):
    directory = make_skill(tmp_path)
    skill = sdk.beta.skills.create(files=files_from_dir(directory))
    assert skill.type == "skill" and skill.display_name == "pdf-tools" and skill.source.type == "custom"
    first = skill.latest_version_id

    assert sdk.beta.skills.retrieve(skill.id).latest_version_id == first
    assert [s.id for s in sdk.beta.skills.list()] == [skill.id]
    assert [s.id for s in sdk.beta.skills.list(source="custom")] == [skill.id]
    assert [s.id for s in sdk.beta.skills.list(source="anthropic")] == ["docx", "pdf", "pptx", "xlsx"]  # built in

    (directory / "scripts" / "hello.sh").write_text("echo version two\n")
    second = sdk.beta.skills.versions.create(skill.id, files=files_from_dir(directory))
    assert second.type == "skill_version" and second.skill_id == skill.id and second.name == "pdf-tools"
    assert second.description == "Tools for PDFs. Use for any PDF task." and int(second.id) > int(first)
    assert sdk.beta.skills.retrieve(skill.id).latest_version_id == second.id
    assert [v.id for v in sdk.beta.skills.versions.list(skill.id)] == [second.id, first]
    assert sdk.beta.skills.versions.retrieve("latest", skill_id=skill.id).id == second.id
    assert sdk.beta.skills.versions.retrieve(first, skill_id=skill.id).id == first

    archive = zipfile.ZipFile(io.BytesIO(sdk.beta.skills.versions.download(first, skill_id=skill.id).read()))
    assert sorted(archive.namelist()) == ["pdf-tools/SKILL.md", "pdf-tools/scripts/hello.sh"]
    assert archive.read("pdf-tools/scripts/hello.sh") == b"echo hello from the skill\n"
    assert archive.read("pdf-tools/SKILL.md") == (directory / "SKILL.md").read_bytes()

    deleted = sdk.beta.skills.versions.delete(first, skill_id=skill.id)
    assert deleted.type == "skill_version_deleted" and deleted.id == first
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.skills.versions.retrieve(first, skill_id=skill.id)
    with pytest.raises(anthropic.BadRequestError, match="only version"):
        sdk.beta.skills.versions.delete(second.id, skill_id=skill.id)

    keys = bucket_keys(api_key.workspace.id)
    assert len(keys) == 2  # the remaining version's two files; the deleted version's are gone
    gone = sdk.beta.skills.delete(skill.id)
    assert gone.type == "skill_deleted" and gone.id == skill.id
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.skills.retrieve(skill.id)
    assert bucket_keys(api_key.workspace.id) == set()
    assert not Skill.objects.exists() and not SkillVersion.objects.exists()


def test_the_orphan_scan_keeps_every_skill_object(sdk, api_key, s3_bucket, tmp_path):
    """Issue 41: the documented orphan scan deleted every skill's objects (they had neither a File
    row nor an open intent) and the download then answered 500."""
    directory = make_skill(tmp_path)
    skill = sdk.beta.skills.create(files=files_from_dir(directory))
    keys = bucket_keys(api_key.workspace.id)
    assert len(keys) == 2

    out = io.StringIO()
    call_command("reconcile_files", "--scan-orphans", "--grace-seconds", "0", stdout=out)
    # (The bucket is shared with earlier tests' workspaces: only this one's objects are the test's.)
    assert [line for line in out.getvalue().splitlines() if api_key.workspace.id in line] == []
    assert bucket_keys(api_key.workspace.id) == keys

    download = sdk.beta.skills.versions.download("latest", skill_id=skill.id).read()
    archive = zipfile.ZipFile(io.BytesIO(download))
    assert archive.read("pdf-tools/scripts/hello.sh") == b"echo hello from the skill\n"
    assert archive.read("pdf-tools/SKILL.md") == (directory / "SKILL.md").read_bytes()


def test_a_skill_object_lost_from_the_store_is_a_clear_404(sdk, api_key, s3_bucket, tmp_path):
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path)))
    for key in bucket_keys(api_key.workspace.id):
        storage.delete_object(key=key)
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.beta.skills.versions.download("latest", skill_id=skill.id)
    assert missing.value.status_code == 404
    assert missing.value.body["error"]["type"] == "not_found_error"
    assert missing.value.body["error"]["details"]["error_code"] == "object_missing"
    assert "missing from the object store" in missing.value.message


def test_display_name_and_a_second_upload_must_keep_the_name(sdk, s3_bucket, tmp_path):
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path)), display_name="PDF tools")
    assert skill.display_name == "PDF tools"
    other = make_skill(tmp_path / "other", name="csv-tools")
    with pytest.raises(anthropic.BadRequestError, match="must stay 'pdf-tools'"):
        sdk.beta.skills.versions.create(skill.id, files=files_from_dir(other))


SKILL_OK = SKILL_MD.format(name="ok-skill", description="Fine.").encode()


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ([("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/../../etc/passwd", b"x")], "'..' component"),
        ([("/ok-skill/SKILL.md", SKILL_OK)], "absolute"),
        ([("ok-skill/SKILL.md", SKILL_OK), ("other/README", b"x")], "one top-level directory"),
        ([("ok-skill/README.md", b"no skill file")], "SKILL.md is missing"),
        ([("SKILL.md", SKILL_OK)], "not inside a directory"),
        ([("ok-skill/SKILL.md", b"# no frontmatter\n")], "must begin with YAML frontmatter"),
        ([("ok-skill/SKILL.md", b"---\nname: [unclosed\n---\n")], "not valid YAML"),
        ([("ok-skill/SKILL.md", b"---\nname: Bad_Name\ndescription: d\n---\n")], "lowercase letters"),
        ([("ok-skill/SKILL.md", b"---\nname: claude-helper\ndescription: d\n---\n")], "reserved word"),
        ([("ok-skill/SKILL.md", b"---\nname: fine\n---\n")], "description is required"),
        ([("ok-skill/SKILL.md", b"---\nname: fine\ndescription: <b>x</b>\n---\n")], "XML tags"),
        ([("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/a\\b", b"x")], "backslash"),
        ([("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/SKILL.md", SKILL_OK)], "appears twice"),
        ([("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/x", b"file"), ("ok-skill/x/y", b"under")], "both a file"),
        ([("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/x/y", b"under"), ("ok-skill/x", b"file")], "both a file"),
    ],
    ids=[
        "traversal",
        "absolute",
        "two-tops",
        "no-skill-md",
        "no-directory",
        "no-frontmatter",
        "bad-yaml",
        "bad-name",
        "reserved-name",
        "no-description",
        "xml-description",
        "backslash",
        "duplicate",
        "file-then-directory",
        "directory-then-file",
    ],
)
def test_hostile_uploads_are_refused_with_nothing_stored(sdk, api_key, s3_bucket, files, fragment):
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.skills.create(files=files)
    assert fragment in refused.value.message
    assert not Skill.objects.exists() and not SkillVersion.objects.exists()
    assert bucket_keys(api_key.workspace.id) == set()


def test_limits_are_refused_with_nothing_stored(sdk, api_key, s3_bucket, settings):
    settings.MANGO_SKILL_FILE_MAX_BYTES = 1000
    settings.MANGO_SKILL_MAX_FILES = 20
    big = [("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/big.bin", b"x" * 1001)]
    with pytest.raises(anthropic.APIStatusError) as too_big:
        sdk.beta.skills.create(files=big)
    assert too_big.value.status_code == 413 and "ok-skill/big.bin" in too_big.value.message
    many = [("ok-skill/SKILL.md", SKILL_OK)] + [(f"ok-skill/f{i}.txt", b"x") for i in range(10_000)]
    with pytest.raises(anthropic.BadRequestError, match="at most 20 files"):
        sdk.beta.skills.create(files=many)
    assert not Skill.objects.exists() and bucket_keys(api_key.workspace.id) == set()


def test_another_workspace_sees_no_skill(sdk, live_server, other_api_key, s3_bucket, tmp_path):
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path)))
    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    for call in (
        lambda: other.beta.skills.retrieve(skill.id),
        lambda: other.beta.skills.versions.retrieve("latest", skill_id=skill.id),
        lambda: other.beta.skills.versions.download(skill.latest_version_id, skill_id=skill.id),
        lambda: other.beta.skills.delete(skill.id),
    ):
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert list(other.beta.skills.list()) == []
    with pytest.raises(anthropic.BadRequestError, match="not found"):
        other.beta.agents.create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill.id}])


def test_agents_resolve_skills(sdk, s3_bucket, tmp_path):
    with pytest.raises(anthropic.BadRequestError, match="not one of this server's Anthropic skills"):
        sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "anthropic", "skill_id": "web-research"}])
    with pytest.raises(anthropic.BadRequestError, match="not found"):
        sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": "skill_missing"}])
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path)))
    with pytest.raises(anthropic.BadRequestError, match="not found"):
        sdk.beta.agents.create(
            name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill.id, "version": "123"}]
        )
    agent = sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill.id}])
    assert agent.skills[0].skill_id == skill.id and agent.skills[0].version == "latest"


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_session_sees_its_pinned_version_read_only_and_the_prompt_lists_it(
    sdk, live_server, api_key, model, celery_worker, s3_bucket, tmp_path
):
    directory = make_skill(tmp_path)
    skill = sdk.beta.skills.create(files=files_from_dir(directory))
    pinned = skill.latest_version_id
    agent = sdk.beta.agents.create(
        name="skilled",
        model=MODEL,
        system="Be brief.",
        tools=[{"type": "agent_toolset_20260401"}],
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    env = sdk.beta.environments.create(name="cloud", config={"type": "cloud", "networking": {"type": "limited"}})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    assert session.agent.skills[0].version == pinned  # `latest` pinned at session start
    # A new version after the session started changes nothing for it.
    (directory / "scripts" / "hello.sh").write_text("echo version two\n")
    sdk.beta.skills.versions.create(skill.id, files=files_from_dir(directory))

    probe = (
        "cat /mnt/skills/pdf-tools/scripts/hello.sh; ls -R /mnt/skills;"
        " echo changed > /mnt/skills/pdf-tools/SKILL.md && echo WROTE || echo REFUSED;"
        " touch /mnt/skills/pdf-tools/new && echo CREATED || echo NOCREATE"
    )
    model.script([tool_use("bash", {"command": probe}), text("Done.")])
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    requests = model.wait_for_requests(2, timeout=90)
    wait_for(lambda: sdk.beta.sessions.retrieve(session.id).status == "idle", timeout=30)

    system = requests[0]["body"]["system"]
    system_text = system if isinstance(system, str) else "".join(block["text"] for block in system)
    assert system_text.startswith("Be brief.")
    assert 'name="pdf-tools"' in system_text and "/mnt/skills/pdf-tools/SKILL.md" in system_text
    assert "Tools for PDFs. Use for any PDF task." in system_text
    results = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.tool_result"]
    output = "".join(block.text for block in results[0].content)
    assert "hello from the skill" in output and "version two" not in output
    assert "SKILL.md" in output and "hello.sh" in output
    assert "REFUSED" in output and "WROTE" not in output
    assert "NOCREATE" in output and "CREATED" not in output.replace("NOCREATE", "")


def test_the_sdk_self_hosted_skill_download_works_against_mango(sdk, live_server, api_key, s3_bucket, tmp_path):
    skill = sdk.beta.skills.create(files=files_from_dir(make_skill(tmp_path / "src")))
    agent = sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill.id}])
    env = sdk.beta.environments.create(name="self", config={"type": "self_hosted"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)

    async def download():
        client = anthropic.AsyncAnthropic(base_url=live_server.url, api_key=str(api_key), max_retries=0)
        async with client:
            return await download_session_skills(client, workdir=tmp_path / "work", session=session)

    placed = asyncio.run(download())
    assert [path.name for path in placed] == ["pdf-tools"]
    assert (placed[0] / "SKILL.md").read_text().startswith("---\nname: pdf-tools")
    assert (placed[0] / "scripts" / "hello.sh").read_text() == "echo hello from the skill\n"


def _zip(entries: list[tuple[str, bytes, int | None]]) -> bytes:
    """A zip of (name, data, unix mode or None) entries, as a Unix zip tool writes them."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.create_system = 3
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def test_a_zip_upload_is_the_skill_directory_and_its_symlinks_are_refused(sdk, api_key, s3_bucket):
    good = _zip([("zipped/SKILL.md", SKILL_MD.format(name="zipped", description="From a zip.").encode(), 0o100644),
                 ("zipped/run.sh", b"echo zipped\n", 0o100755)])  # fmt: skip
    skill = sdk.beta.skills.create(files=[("zipped.zip", good, "application/zip")])
    version = sdk.beta.skills.versions.retrieve("latest", skill_id=skill.id)
    assert version.name == "zipped" and version.description == "From a zip."
    download = zipfile.ZipFile(io.BytesIO(sdk.beta.skills.versions.download(version.id, skill_id=skill.id).read()))
    assert download.read("zipped/run.sh") == b"echo zipped\n"
    sdk.beta.skills.delete(skill.id)

    linked = _zip([("evil/SKILL.md", SKILL_OK, 0o100644), ("evil/passwd", b"/etc/passwd", 0o120777)])
    with pytest.raises(anthropic.BadRequestError, match="is a symlink"):
        sdk.beta.skills.create(files=[("evil.zip", linked, "application/zip")])
    climbing = _zip([("ok-skill/SKILL.md", SKILL_OK, None), ("ok-skill/../../x", b"x", None)])
    with pytest.raises(anthropic.BadRequestError, match=re.escape("'..' component")):
        sdk.beta.skills.create(files=[("climb.zip", climbing, "application/zip")])
    with pytest.raises(anthropic.BadRequestError, match="not a valid zip"):
        sdk.beta.skills.create(files=[("broken.zip", b"PK not really", "application/zip")])
    assert not Skill.objects.exists() and bucket_keys(api_key.workspace.id) == set()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["owned_object_before_commit", "owned_object_before_commit@2"])
def test_a_crash_mid_upload_leaves_nothing_once_reconciled_and_swept(api_key, s3_bucket, tmp_path, point):
    """The server is killed with the second file's object (and, at @2, the first one committed)
    in the store: the scan keeps the committed object (its version may still finish), the dead
    upload's intent is rolled back, and the sweep removes the unfinished version and its objects."""
    server = GunicornServer(log_path=tmp_path / "gunicorn.log", env={"MANGO_TEST_CRASH_POINT": point}).start()
    try:
        client = anthropic.Anthropic(base_url=server.url, api_key=str(api_key), max_retries=0, timeout=60)
        with pytest.raises(anthropic.APIConnectionError):
            client.beta.skills.create(files=files_from_dir(make_skill(tmp_path)))
    finally:
        server.stop()
    workspace_id = api_key.workspace.id
    committed = set(OwnedObject.objects.values_list("object_key", flat=True))
    assert len(committed) == (1 if point.endswith("@2") else 0)
    (open_intent,) = StorageIntent.objects.filter(state="open")
    assert bucket_keys(workspace_id) == committed | {open_intent.object_key}
    assert SkillVersion.objects.get().ready is False

    result = run_manage("reconcile_files", "--scan-orphans", "--grace-seconds", "0", env=server.env)
    assert result.returncode == 0, result.stderr
    assert StorageIntent.objects.get(pk=open_intent.pk).state == "rolled_back"
    assert bucket_keys(workspace_id) == committed

    assert skills_unfinished_sweep(older_than_seconds=0) == 1
    assert bucket_keys(workspace_id) == set()
    assert not OwnedObject.objects.exists() and not Skill.objects.exists() and not SkillVersion.objects.exists()
    assert not StorageIntent.objects.filter(state="open").exists()


def test_skills_stored_before_owned_objects_are_owned_by_the_migration(sdk, api_key, s3_bucket):
    """A skill version written by the previous build: its objects under files/, no OwnedObject."""
    workspace = api_key.workspace
    skill_md = SKILL_MD.format(name="old-skill", description="From before.").encode()
    entries = []
    for path, data in (("SKILL.md", skill_md), ("notes.txt", b"old notes")):
        key = storage.new_object_key(workspace_id=workspace.id)
        storage.put_object(key=key, body=data, content_type="application/octet-stream")
        entries.append({"path": path, "size": len(data), "key": key, "sha256": hashlib.sha256(data).hexdigest()})
    now = timezone.now()
    names = {"name": "old-skill", "created_at": now}
    skill = Skill.objects.create(
        workspace=workspace, display_name="old-skill", latest_version="1", updated_at=now, **names
    )
    SkillVersion.objects.create(skill=skill, version="1", description="Before.", files=entries, ready=True, **names)
    with pytest.raises(anthropic.NotFoundError, match="missing from the object store"):
        sdk.beta.skills.versions.download("1", skill_id=skill.id)

    importlib.import_module("skills.migrations.0002_skill_objects_owned").own_skill_objects(django_apps, None)
    call_command("reconcile_files", "--scan-orphans", "--grace-seconds", "0", stdout=io.StringIO())
    assert {entry["key"] for entry in entries} <= bucket_keys(workspace.id)
    archive = zipfile.ZipFile(io.BytesIO(sdk.beta.skills.versions.download("1", skill_id=skill.id).read()))
    assert archive.read("old-skill/notes.txt") == b"old notes"

    sdk.beta.skills.delete(skill.id)
    assert bucket_keys(workspace.id) == set() and not OwnedObject.objects.exists()


def _lying_zip() -> bytes:
    """A zip whose member's local header lies about the size of its file name: the archive
    opens (its central directory is sound) and reading the member raises zipfile.BadZipFile."""
    patched = bytearray(_zip([("liar/SKILL.md", SKILL_OK, 0o100644)]))
    local = patched.index(b"PK\x03\x04")
    patched[local + 26 : local + 28] = (200).to_bytes(2, "little")
    return bytes(patched)


def test_malformed_uploads_are_a_400_with_nothing_stored(sdk, api, api_key, s3_bucket):
    """Issue 44, finding 9: a zip whose header lies about a size, a multipart part header over
    Django's limit and a deeply nested YAML frontmatter were 500s."""
    with pytest.raises(anthropic.BadRequestError, match="not a valid zip"):
        sdk.beta.skills.create(files=[("liar.zip", _lying_zip(), "application/zip")])
    deep = b"---\nname: deep\ndescription: " + b"[" * 20_000 + b"]" * 20_000 + b"\n---\n"
    with pytest.raises(anthropic.BadRequestError, match="nested too deeply"):
        sdk.beta.skills.create(files=[("deep/SKILL.md", deep)])
    boundary = "mango-boundary"
    body = (
        (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="files"; filename="ok-skill/SKILL.md"\r\n'
            f"X-Padding: {'a' * 20_000}\r\n\r\n"
        ).encode()
        + SKILL_OK
        + f"\r\n--{boundary}--\r\n".encode()
    )
    response = api.post("/v1/skills", data=body, content_type=f"multipart/form-data; boundary={boundary}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "multipart" in response.json()["error"]["message"]
    assert not Skill.objects.exists() and not SkillVersion.objects.exists()
    assert bucket_keys(api_key.workspace.id) == set()


def test_skill_bytes_count_toward_the_workspace_quotas(sdk, api_key, s3_bucket, settings):
    """Issue 44, finding 6: three 28 MiB versions were accepted with no check (about 3.2 TB per
    workspace within the per-skill limits). A workspace's skill versions are capped by
    MANGO_WORKSPACE_SKILLS_MAX_BYTES, and their files count toward its storage quota as Files do."""
    from files.quotas import workspace_usage

    data = b"x" * 10_000
    size = len(SKILL_OK) + len(data)
    upload = [("ok-skill/SKILL.md", SKILL_OK), ("ok-skill/data.bin", data)]
    other = [("other-skill/SKILL.md", SKILL_MD.format(name="other-skill", description="d").encode())]
    settings.MANGO_WORKSPACE_SKILLS_MAX_BYTES = 2 * size
    skill = sdk.beta.skills.create(files=upload)
    sdk.beta.skills.versions.create(skill.id, files=upload)
    for refused in (
        lambda: sdk.beta.skills.versions.create(skill.id, files=upload),
        lambda: sdk.beta.skills.create(files=other),
    ):
        with pytest.raises(anthropic.BadRequestError, match="MANGO_WORKSPACE_SKILLS_MAX_BYTES") as over:
            refused()
        assert over.value.body["error"]["details"]["error_code"] == "skill_quota_exceeded"
    assert SkillVersion.objects.count() == 2 and len(bucket_keys(api_key.workspace.id)) == 4
    assert workspace_usage(api_key.workspace.id).bytes == 2 * size

    # The storage quota: skill files take room a File could have had, and the other way round.
    settings.MANGO_WORKSPACE_SKILLS_MAX_BYTES = 10**12
    settings.MANGO_WORKSPACE_FILES_MAX_BYTES = 3 * size - 1
    with pytest.raises(anthropic.BadRequestError) as full:
        sdk.beta.skills.versions.create(skill.id, files=upload)
    assert full.value.body["error"]["details"]["error_code"] == "storage_quota_exceeded"
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.files.upload(file=("f.bin", b"y" * size, "application/octet-stream"))
    assert SkillVersion.objects.count() == 2 and len(bucket_keys(api_key.workspace.id)) == 4
    # Deleting a version frees its bytes.
    (oldest,) = [v.id for v in sdk.beta.skills.versions.list(skill.id)][-1:]
    sdk.beta.skills.versions.delete(oldest, skill_id=skill.id)
    sdk.beta.skills.versions.create(skill.id, files=upload)
