"""PDFs and images from Files reach the model as base64 (issue 24): from messages and tool
results, the same bytes after the source File is deleted, a private snapshot no client can see
(deleted with the session); inline base64/url sources are checked with nothing stored."""

import base64

import anthropic
import pytest

from files.models import File
from sessions.models import SessionEvent
from tests.scripted_model import error, text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

MODEL = "claude-sonnet-4-5"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


@pytest.fixture
def session(sdk):
    agent = sdk.beta.agents.create(
        name="viewer",
        model=MODEL,
        tools=[
            {"type": "custom", "name": "screenshot", "description": "Take one.", "input_schema": {"type": "object"}}
        ],
    )
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)


def file_block(kind: str, file_id: str) -> dict:
    return {"type": kind, "source": {"type": "file", "file_id": file_id}}


def idle_count(sdk, session_id: str) -> int:
    return sum(1 for e in sdk.beta.sessions.events.list(session_id) if e.type == "session.status_idle")


def test_pdf_and_image_files_reach_the_model_as_base64_even_after_the_source_is_deleted(
    sdk, model, celery_worker, session
):
    pdf = sdk.beta.files.upload(file=("paper.pdf", PDF, "application/pdf"))
    png = sdk.beta.files.upload(file=("shot.png", PNG, "image/png"))
    model.script([text("Seen."), text("Still seen.")])
    content = [{"type": "text", "text": "Look:"}, file_block("document", pdf.id), file_block("image", png.id)]
    sent = sdk.beta.sessions.events.send(session.id, events=[{"type": "user.message", "content": content}])
    assert sent.data[0].content[1].source.file_id == pdf.id  # the public event keeps the reference
    wait_for(lambda: idle_count(sdk, session.id) == 1, timeout=30)

    # The private copies are the server's: not listed, not addressable.
    listed = {f.id for f in sdk.beta.files.list()}
    assert listed == {pdf.id, png.id}
    snapshots = File.objects.filter(origin=File.Origin.EVENT_SNAPSHOT, scope_session_id=session.id)
    assert snapshots.count() == 2
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.files.retrieve_metadata(snapshots.first().id)

    sdk.beta.files.delete(pdf.id)
    sdk.beta.files.delete(png.id)
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Again?"}]}]
    )
    wait_for(lambda: idle_count(sdk, session.id) == 2, timeout=30)
    for request in model.requests:
        blocks = request["body"]["messages"][0]["content"]
        assert blocks[1]["type"] == "document" and blocks[1]["source"]["media_type"] == "application/pdf"
        assert base64.b64decode(blocks[1]["source"]["data"]) == PDF
        assert blocks[2]["type"] == "image" and blocks[2]["source"]["media_type"] == "image/png"
        assert base64.b64decode(blocks[2]["source"]["data"]) == PNG
        assert pdf.id not in str(request["body"])

    sdk.beta.sessions.delete(session.id)
    wait_for(lambda: not File.objects.filter(origin=File.Origin.EVENT_SNAPSHOT).exists(), timeout=20)


def test_an_image_file_in_a_tool_result_reaches_the_model(sdk, model, celery_worker, session):
    png = sdk.beta.files.upload(file=("shot.png", PNG, "image/png"))
    model.script(
        [
            tool_use("screenshot", {}),
            text("A fine screenshot."),
        ]
    )
    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Screenshot?"}]}]
    )
    wait_for(lambda: idle_count(sdk, session.id) == 1, timeout=30)
    use = next(e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.custom_tool_use")
    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {"type": "user.custom_tool_result", "custom_tool_use_id": use.id, "content": [file_block("image", png.id)]}
        ],
    )
    wait_for(lambda: idle_count(sdk, session.id) == 2, timeout=30)
    result = model.requests[1]["body"]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][0]["type"] == "image"
    assert base64.b64decode(result["content"][0]["source"]["data"]) == PNG


@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "%%%"}}, "base64"),
        (
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "JVBERi0xLjcK"}},
            "not a image/png",
        ),
        ({"type": "document", "source": {"type": "url", "url": "ftp://example.com/a.pdf"}}, "http(s)"),
        ({"type": "image", "source": {"type": "file", "file_id": ""}}, "file_id"),
    ],
)
def test_malformed_sources_are_refused_with_nothing_stored(sdk, session, block, fragment):
    before = (SessionEvent.objects.count(), File.objects.count())
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.message", "content": [block]}])
    assert fragment in refused.value.message
    assert (SessionEvent.objects.count(), File.objects.count()) == before


def test_a_file_that_is_not_what_it_claims_is_refused_with_nothing_stored(sdk, session):
    fake = sdk.beta.files.upload(file=("fake.png", b"GIF89a not a png", "image/png"))
    before = (SessionEvent.objects.count(), File.objects.count())
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [file_block("image", fake.id)]}]
        )
    assert fake.id in refused.value.message and "image/png" in refused.value.message
    assert (SessionEvent.objects.count(), File.objects.count()) == before


def test_an_event_the_upstream_refuses_does_not_poison_the_session(sdk, model, celery_worker, session):
    """A 400 caused by one event: a session.error names it, it is left out of later requests
    (a note instead of its content), and the next message gets an answer."""
    bad = {"type": "image", "source": {"type": "url", "url": "https://example.com/not-an-image"}}
    model.script([error(400, "invalid_request_error", "Could not process image"), text("Recovered.")])
    first = sdk.beta.sessions.events.send(session.id, events=[{"type": "user.message", "content": [bad]}])
    wait_for(lambda: idle_count(sdk, session.id) == 1, timeout=30)
    errors = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
    assert first.data[0].id in errors[-1].error.message

    sdk.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Try this instead."}]}]
    )
    wait_for(lambda: idle_count(sdk, session.id) == 2, timeout=30)
    retried = model.requests[-1]["body"]["messages"]
    flat = str(retried)
    assert "example.com/not-an-image" not in flat and "Content left out" in flat and "Try this instead." in flat
    answers = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "agent.message"]
    assert answers[-1].content[0].text == "Recovered."
    # The public log keeps the event as it was sent.
    assert sdk.beta.sessions.events.list(session.id).data[0].content[0].source.url == bad["source"]["url"]


def test_what_a_turn_holds_of_pdfs_and_images_is_bounded(sdk, model, celery_worker, session):
    """A hostile conversation of many large images cannot make a worker hold them all: past
    MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES the newest input is left out, named, nothing is sent,
    and the session recovers."""
    celery_worker.current.stop()
    # One image fits the worker's bound, two do not.
    celery_worker.start_new(MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES=str(len(PNG) + 10))
    try:
        png = sdk.beta.files.upload(file=("shot.png", PNG, "image/png"))
        other = sdk.beta.files.upload(file=("other.png", PNG + b"x", "image/png"))
        model.script([text("One image."), text("Recovered.")])
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [file_block("image", png.id)]}]
        )
        wait_for(lambda: idle_count(sdk, session.id) == 1, timeout=30)
        second = sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [file_block("image", other.id)]}]
        )
        wait_for(lambda: idle_count(sdk, session.id) == 2, timeout=30)
        assert len(model.requests) == 1  # nothing was sent for the turn over the bound
        errors = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "session.error"]
        assert second.data[0].id in errors[-1].error.message
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "again"}]}]
        )
        wait_for(lambda: idle_count(sdk, session.id) == 3, timeout=30)
        assert len(model.requests) == 2 and "Content left out" in str(model.requests[1]["body"]["messages"])
    finally:
        celery_worker.current.stop()
        celery_worker.start_new()
