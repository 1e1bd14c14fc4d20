"""The built-in document skills (skills/builtin: xlsx, docx, pptx, pdf), served as the `anthropic`
skills of those ids to every workspace, read-only; an agent that names one gets it at
/mnt/skills/<id> in the real sandbox image, whose Python has the libraries its scripts use.
Through the official SDK, a real worker, dockerd and the offline model."""

import asyncio
import io
import json
import os
import uuid
import zipfile

import anthropic
import openpyxl
import pytest
import redis
from anthropic.lib.tools._skills import download_session_skills
from django.conf import settings as django_settings

from skills.builtin import IDS
from tests.scripted_model import offline
from tests.sessions.conftest import worker_env
from tests.worker import CeleryWorker

MODEL = "claude-sonnet-4-5"
XLSX = {"type": "anthropic", "skill_id": "xlsx"}


def test_every_workspace_reads_the_builtin_skills_and_changes_none(sdk, other_api_key, live_server, s3_bucket):
    listed = list(sdk.beta.skills.list(source="anthropic"))
    assert [skill.id for skill in listed] == list(IDS) and {skill.source.type for skill in listed} == {"anthropic"}
    assert list(sdk.beta.skills.list()) == []  # without `source`: the workspace's own
    skill = sdk.beta.skills.retrieve("xlsx")
    (version,) = list(sdk.beta.skills.versions.list("xlsx"))
    assert version.id == skill.latest_version_id and version.name == "xlsx" and "Excel" in version.description
    assert sdk.beta.skills.versions.retrieve("latest", skill_id="xlsx").id == version.id
    archive = zipfile.ZipFile(io.BytesIO(sdk.beta.skills.versions.download(version.id, skill_id="xlsx").read()))
    assert {"xlsx/SKILL.md", "xlsx/scripts/make_workbook.py", "xlsx/scripts/read_workbook.py"} <= set(
        archive.namelist()
    )
    other = anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)
    assert other.beta.skills.retrieve("pdf").latest_version_id == sdk.beta.skills.retrieve("pdf").latest_version_id
    for change in (
        lambda: sdk.beta.skills.delete("xlsx"),
        lambda: sdk.beta.skills.versions.delete(version.id, skill_id="xlsx"),
        lambda: sdk.beta.skills.versions.create("xlsx", files=[("xlsx/SKILL.md", b"---\nname: xlsx\n---\n")]),
    ):
        with pytest.raises(anthropic.BadRequestError, match="built-in skill"):
            change()
    assert sdk.beta.skills.retrieve("xlsx").latest_version_id == version.id


def test_agents_name_builtin_skills_as_anthropic_ones(sdk, s3_bucket):
    agent = sdk.beta.agents.create(name="a", model=MODEL, skills=[XLSX, {"type": "anthropic", "skill_id": "pdf"}])
    assert [(s.type, s.skill_id, s.version) for s in agent.skills] == [
        ("anthropic", "xlsx", "latest"),
        ("anthropic", "pdf", "latest"),
    ]
    with pytest.raises(anthropic.BadRequestError, match=r"skills: .*'csv'.*docx, pdf, pptx, xlsx"):
        sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "anthropic", "skill_id": "csv"}])
    with pytest.raises(anthropic.BadRequestError, match="name it with type 'anthropic'"):
        sdk.beta.agents.create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": "xlsx"}])
    with pytest.raises(anthropic.BadRequestError, match="not found"):
        sdk.beta.agents.create(name="a", model=MODEL, skills=[{**XLSX, "version": "0000"}])


def test_the_sdks_self_hosted_skill_download_gets_a_builtin_skill(sdk, live_server, api_key, s3_bucket, tmp_path):
    agent = sdk.beta.agents.create(name="a", model=MODEL, skills=[XLSX])
    environment = sdk.beta.environments.create(name="self", config={"type": "self_hosted"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    assert session.agent.skills[0].version == sdk.beta.skills.retrieve("xlsx").latest_version_id  # pinned

    async def download():
        client = anthropic.AsyncAnthropic(base_url=live_server.url, api_key=str(api_key), max_retries=0)
        async with client:
            return await download_session_skills(client, workdir=tmp_path / "work", session=session)

    (placed,) = asyncio.run(download())
    assert placed.name == "xlsx" and (placed / "scripts" / "make_workbook.py").is_file()
    assert (placed / "SKILL.md").read_text().startswith("---\nname: xlsx")


@pytest.fixture(scope="module")
def image_worker(django_db_setup, django_db_blocker, scripted_model):
    """A worker whose sandboxes run the real image (python3 with the document libraries)."""
    queue = f"mango-builtin-skills-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    env = {**worker_env(scripted_model), "MANGO_SESSIONS_QUEUE": queue, "MANGO_SANDBOX_IMAGE": "mango-sandbox:bookworm"}
    with django_db_blocker.unblock():
        worker = CeleryWorker(env=env, queues=queue, name="skills").start(timeout=60)
    worker.queue = queue
    yield worker
    worker.stop()
    redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_an_agent_with_the_xlsx_skill_writes_a_workbook_that_openpyxl_reads(
    sdk, model, image_worker, s3_bucket, settings
):
    settings.MANGO_SESSIONS_QUEUE = image_worker.queue
    model.default = offline
    agent = sdk.beta.agents.create(
        name="analyst", model=MODEL, tools=[{"type": "agent_toolset_20260401"}], skills=[XLSX]
    )
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    spec = {
        "sheets": [
            {"name": "Sales", "header": True, "rows": [["Region", "Q1", "Q2", "Total"], ["EU", 10, 12, "=B2+C2"]]}
        ]
    }
    script = "/mnt/skills/xlsx/scripts"
    command = (
        f"echo '{json.dumps(spec)}' | python3 {script}/make_workbook.py - /mnt/session/outputs/sales.xlsx"
        f" && python3 {script}/read_workbook.py /mnt/session/outputs/sales.xlsx"
    )
    with sdk.beta.sessions.events.stream(session.id) as stream:
        message = {"type": "user.message", "content": [{"type": "text", "text": f"bash: {command}"}]}
        sdk.beta.sessions.events.send(session.id, events=[message])
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                break
    (result,) = [e for e in seen if e.type == "agent.tool_result"]
    output = "".join(block.text for block in result.content)
    assert not result.is_error and "wrote /mnt/session/outputs/sales.xlsx" in output, output
    assert "Region,Q1,Q2,Total" in output and "EU,10,12,=B2+C2" in output, output
    (published,) = list(sdk.beta.files.list(scope_id=session.id))
    assert published.filename == "sales.xlsx" and published.downloadable
    book = openpyxl.load_workbook(io.BytesIO(sdk.beta.files.download(published.id).read()))
    sheet = book["Sales"]
    assert [[cell.value for cell in row] for row in sheet.iter_rows()] == [
        ["Region", "Q1", "Q2", "Total"],
        ["EU", 10, 12, "=B2+C2"],
    ]
    assert sheet["A1"].font.bold and sheet.freeze_panes == "A2"


ROUND_TRIPS = r"""
set -e
cd /tmp
S=/mnt/skills
printf '# Report\n\nSome **bold** words.\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n' > in.md
python3 $S/docx/scripts/make_document.py in.md out.docx
python3 $S/docx/scripts/read_document.py out.docx
echo '{"title": "Deck", "slides": [{"title": "Points", "bullets": ["alpha", ["beta"]], "notes": "n1"},
  {"title": "Table", "table": [["k", "v"], ["x", "1"]]}]}' | python3 $S/pptx/scripts/make_deck.py - out.pptx
python3 $S/pptx/scripts/read_deck.py out.pptx
python3 $S/pdf/scripts/make_pdf.py in.md one.pdf
python3 $S/pdf/scripts/merge_pdfs.py two.pdf one.pdf one.pdf:1
python3 $S/pdf/scripts/read_pdf.py two.pdf --pages 2
"""


@pytest.mark.docker
def test_the_docx_pptx_and_pdf_scripts_round_trip_in_the_sandbox_image(docker_client):
    """Each skill's scripts, run in the real image as the skills direct: what one writes, the
    reader prints back."""
    from skills.builtin import ROOT

    output = docker_client.containers.run(
        "mango-sandbox:bookworm", ["bash", "-c", ROUND_TRIPS], remove=True, user="10001",
        volumes={str(ROOT): {"bind": "/mnt/skills", "mode": "ro"}}, network_mode="none",
    ).decode()  # fmt: skip
    assert "# Report" in output and "Some bold words." in output and "- one" in output and "| 1 | 2 |" in output
    assert "## Slide 2: Points" in output and "  - beta" in output and "Notes: n1" in output and "| x | 1 |" in output
    assert (
        "wrote two.pdf: 2 pages" in output
        and "--- page 2 of 2 ---" in output
        and "Report" in output.split("page 2")[-1]
    )
