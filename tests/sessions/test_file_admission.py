"""Files inside sessions: user.message documents and outcome rubrics (spec "Message content",
"Outcome rubrics"). The official SDK is the client, a real worker runs the turns, and the
scripted model records exactly what the runner sent upstream."""

import json

import anthropic
import pytest

from files import storage
from files.models import File
from files.services import file_upload_stream
from sessions.models import Session, SessionEvent
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL = "claude-sonnet-4-5"
MAX_CHARS = 262_144


@pytest.fixture
def agent_env(sdk):
    agent = sdk.beta.agents.create(name="reader", model=MODEL, system="Read carefully.")
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return agent, environment


@pytest.fixture
def new_session(sdk, agent_env):
    agent, environment = agent_env

    def create(**kwargs):
        return sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, **kwargs)

    return create


def upload(sdk, name: str, data: bytes, mime: str | None = "text/plain"):
    return sdk.beta.files.upload(file=(name, data, mime) if mime else (name, data))


def doc(file_id: str) -> dict:
    return {"type": "document", "source": {"type": "file", "file_id": file_id}}


def message(*blocks: dict) -> dict:
    return {"type": "user.message", "content": list(blocks)}


def wait_idle(sdk, session_id: str, after: int = 0, timeout: float = 20.0) -> list:
    def idle():
        events = list(sdk.beta.sessions.events.list(session_id))
        done = [e for e in events if e.type == "session.status_idle"]
        return events if len(done) > after else None

    return wait_for(idle, timeout)


def model_text(request: dict) -> str:
    return json.dumps(request["body"]["messages"], ensure_ascii=False)


def state_counts() -> tuple[int, int]:
    return Session.objects.count(), SessionEvent.objects.count()


# --- message documents ------------------------------------------------------------------------


def test_text_document_reaches_the_model_as_a_text_block(sdk, model, celery_worker, new_session):
    notes = upload(sdk, "notes.md", b'# Plan\nShip <it> & "test" it.\n', "text/markdown")
    session = new_session()
    model.script([text("Read it.")])

    sent = sdk.beta.sessions.events.send(
        session.id, events=[message({"type": "text", "text": "Summarise:"}, doc(notes.id))]
    )

    # The public event keeps the File reference only.
    public = sent.data[0]
    assert public.content[1].source.type == "file"
    assert public.content[1].source.file_id == notes.id
    wait_idle(sdk, session.id)
    (request,) = model.requests
    blocks = request["body"]["messages"][0]["content"]
    assert blocks[0] == {"type": "text", "text": "Summarise:"}
    assert blocks[1]["type"] == "text"
    assert 'filename="notes.md"' in blocks[1]["text"]
    assert 'media_type="text/markdown"' in blocks[1]["text"]
    assert '# Plan\nShip <it> & "test" it.\n' in blocks[1]["text"]
    assert notes.id not in json.dumps(request["body"])
    listed = [e for e in sdk.beta.sessions.events.list(session.id) if e.type == "user.message"]
    assert listed[0].content[1].source.file_id == notes.id
    # Admission is an internal read: the upload is still not downloadable.
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.files.download(notes.id)


def test_deleting_the_source_changes_neither_replay_nor_later_turns(sdk, model, celery_worker, new_session):
    source = upload(sdk, "facts.txt", b"The answer is 42.")
    session = new_session()
    model.script([text("Noted.")])
    sdk.beta.sessions.events.send(session.id, events=[message(doc(source.id))])
    wait_idle(sdk, session.id)
    sdk.beta.files.delete(source.id)

    model.script([text("Still 42.")])
    sdk.beta.sessions.events.send(session.id, events=[message({"type": "text", "text": "And again?"})])
    wait_idle(sdk, session.id, after=1)
    (request,) = model.requests
    assert "The answer is 42." in model_text(request)
    replayed = next(e for e in sdk.beta.sessions.events.list(session.id) if e.type == "user.message")
    assert replayed.content[0].source.file_id == source.id


def test_octet_stream_utf8_is_accepted_and_nul_is_not(sdk, model, celery_worker, new_session):
    plain = upload(sdk, "data", "naïve text".encode(), "application/octet-stream")
    binary = upload(sdk, "blob", b"abc\x00def", "application/octet-stream")
    session = new_session()
    model.script([text("ok")])
    sdk.beta.sessions.events.send(session.id, events=[message(doc(plain.id))])
    wait_idle(sdk, session.id)
    assert "naïve text" in model_text(model.requests[0])

    before = state_counts()
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.events.send(session.id, events=[message(doc(binary.id))])
    assert binary.id in raised.value.message
    assert state_counts() == before


@pytest.mark.parametrize(
    "data,mime",
    [
        ('{"a": 1}', "application/json"),
        ("<a/>", "application/atom+xml"),
        ("a: 1", "application/yaml"),
        ("select 1;", "application/sql"),
        ("x,y\n1,2", "text/csv"),
    ],
)
def test_textual_formats_are_accepted(sdk, model, celery_worker, new_session, data, mime):
    file = upload(sdk, "f", data.encode(), mime)
    session = new_session()
    model.script([text("ok")])
    sdk.beta.sessions.events.send(session.id, events=[message(doc(file.id))])
    wait_idle(sdk, session.id)
    assert data in json.loads(model_text(model.requests[0]))[0]["content"][0]["text"]


def _corrupt(file_id: str) -> None:
    row = File.objects.get(pk=file_id)
    original = storage.read_bounded(key=row.object_key, max_bytes=row.size_bytes)
    storage.put_object(key=row.object_key, body=original[::-1], content_type=row.mime_type)


def _session_scoped(api_key) -> str:
    file = file_upload_stream(
        workspace=api_key.workspace,
        chunks=[b"scoped"],
        filename="out.txt",
        mime_type="text/plain",
        scope_session_id="sesn_x",
        downloadable=True,
        origin=File.Origin.RESOURCE_COPY,
    )
    return file.id


def _deleting(sdk) -> str:
    file = upload(sdk, "going.txt", b"bye")
    File.objects.filter(pk=file.id).update(state=File.State.DELETING)
    return file.id


REJECTIONS = {
    "empty": lambda sdk, api_key, other: upload(sdk, "empty.txt", b"").id,
    "oversized": lambda sdk, api_key, other: upload(sdk, "big.txt", b"a" * (MAX_CHARS + 1)).id,
    "corrupt": lambda sdk, api_key, other: (lambda f: (_corrupt(f.id), f.id)[1])(upload(sdk, "c.txt", b"abcdef")),
    "not_utf8": lambda sdk, api_key, other: upload(sdk, "latin1.txt", "café".encode("latin-1")).id,
    "non_text": lambda sdk, api_key, other: upload(sdk, "doc.zip", b"PK\x03\x04", "application/zip").id,
    "not_a_pdf": lambda sdk, api_key, other: upload(sdk, "fake.pdf", b"plain text", "application/pdf").id,
    "session_scoped": lambda sdk, api_key, other: _session_scoped(api_key),
    "missing": lambda sdk, api_key, other: "file_01m8zzzzzzzzzzzzzzzzzzzzzz",
    "deleting": lambda sdk, api_key, other: _deleting(sdk),
    "cross_workspace": lambda sdk, api_key, other: upload(other, "theirs.txt", b"secret").id,
}


@pytest.fixture
def other_sdk(live_server, other_api_key):
    return anthropic.Anthropic(base_url=live_server.url, api_key=str(other_api_key), max_retries=0)


@pytest.mark.parametrize("reason", sorted(REJECTIONS))
def test_rejected_documents_commit_nothing(sdk, other_sdk, api_key, model, new_session, reason):
    file_id = REJECTIONS[reason](sdk, api_key, other_sdk)
    session = new_session()
    before = state_counts()

    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.events.send(
            session.id, events=[message({"type": "text", "text": "hi"}), message(doc(file_id))]
        )

    assert file_id in raised.value.message
    assert state_counts() == before
    if reason == "cross_workspace":
        missing = REJECTIONS["missing"](sdk, api_key, other_sdk)
        with pytest.raises(anthropic.BadRequestError) as missing_raised:
            sdk.beta.sessions.events.send(
                session.id, events=[message({"type": "text", "text": "hi"}), message(doc(missing))]
            )
        # A foreign id is indistinguishable from a missing one.
        assert raised.value.body["error"]["message"].replace(file_id, "X") == missing_raised.value.body["error"][
            "message"
        ].replace(missing, "X")
        assert raised.value.body["error"]["details"] == missing_raised.value.body["error"]["details"]

    # initial_events: no session is created at all.
    with pytest.raises(anthropic.BadRequestError):
        new_session(initial_events=[message(doc(file_id))])
    assert state_counts() == before


def test_aggregate_limit_spans_all_events_of_one_admission(sdk, new_session):
    half = upload(sdk, "half.txt", b"x" * (MAX_CHARS // 2 + 1))
    other_half = upload(sdk, "other.txt", b"y" * (MAX_CHARS // 2 + 1))
    session = new_session()
    before = state_counts()
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.events.send(session.id, events=[message(doc(half.id)), message(doc(other_half.id))])
    assert "262,144" in raised.value.message
    assert state_counts() == before


# --- outcome rubrics ------------------------------------------------------------------------------


def grade(result: str, explanation: str) -> dict:
    return tool_use("submit_evaluation", {"result": result, "explanation": explanation})


def test_file_rubric_reaches_agent_and_grader_and_survives_source_deletion(sdk, model, celery_worker, new_session):
    rubric = upload(sdk, "rubric.md", b"- mentions the number 42\n- is polite", "text/markdown")
    session = new_session()
    model.script(
        [
            text("It is 41."),
            grade("needs_revision", "Wrong number."),
            text("Sorry, it is 42."),
            grade("satisfied", "Polite and says 42."),
        ]
    )
    sent = sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.define_outcome",
                "description": "Give the answer",
                "rubric": {"type": "file", "file_id": rubric.id},
            }
        ],
    )
    assert sent.data[0].rubric.type == "file"
    assert sent.data[0].rubric.file_id == rubric.id
    outcome_id = sent.data[0].outcome_id
    events = wait_idle(sdk, session.id, timeout=30)
    sdk.beta.files.delete(rubric.id)

    agent_request, grader_request = model.requests[0], model.requests[1]
    assert "mentions the number 42" in model_text(agent_request)
    grader_body = json.dumps(grader_request["body"])
    assert "mentions the number 42" in grader_body
    assert "It is 41." in grader_body
    assert rubric.id not in grader_body and rubric.id not in json.dumps(agent_request["body"])

    spans = [e for e in events if e.type in ("span.outcome_evaluation_start", "span.outcome_evaluation_end")]
    assert [(e.type, e.iteration) for e in spans] == [
        ("span.outcome_evaluation_start", 0),
        ("span.outcome_evaluation_end", 0),
        ("span.outcome_evaluation_start", 1),
        ("span.outcome_evaluation_end", 1),
    ]
    assert [e.result for e in spans if e.type.endswith("_end")] == ["needs_revision", "satisfied"]
    assert spans[1].outcome_evaluation_start_id == spans[0].id
    assert spans[3].explanation == "Polite and says 42."
    assert all(e.outcome_id == outcome_id for e in spans)
    # The revision request told the agent what the grader found missing.
    assert "Wrong number." in model_text(model.requests[2])

    retrieved = sdk.beta.sessions.retrieve(session.id)
    (evaluation,) = retrieved.outcome_evaluations
    assert evaluation.outcome_id == outcome_id
    assert evaluation.result == "satisfied"
    assert evaluation.iteration == 1
    assert evaluation.description == "Give the answer"
    assert evaluation.completed_at is not None
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.files.retrieve_metadata(rubric.id)


def test_max_iterations_ends_the_outcome(sdk, model, celery_worker, new_session):
    session = new_session()
    model.script([text("try 1"), grade("needs_revision", "no"), text("try 2"), grade("needs_revision", "still no")])
    sdk.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.define_outcome",
                "description": "Impossible",
                "rubric": {"type": "text", "content": "Be perfect."},
                "max_iterations": 2,
            }
        ],
    )
    events = wait_idle(sdk, session.id, timeout=30)
    ends = [e for e in events if e.type == "span.outcome_evaluation_end"]
    assert [e.result for e in ends] == ["needs_revision", "max_iterations_reached"]
    (evaluation,) = sdk.beta.sessions.retrieve(session.id).outcome_evaluations
    assert evaluation.result == "max_iterations_reached"


RUBRIC_REJECTIONS = ["empty", "oversized", "not_utf8", "session_scoped", "missing", "deleting", "cross_workspace"]


@pytest.mark.parametrize("reason", RUBRIC_REJECTIONS)
def test_rejected_rubrics_commit_nothing(sdk, other_sdk, api_key, new_session, reason):
    file_id = REJECTIONS[reason](sdk, api_key, other_sdk)
    session = new_session()
    before = state_counts()
    outcome = {"type": "user.define_outcome", "description": "d", "rubric": {"type": "file", "file_id": file_id}}
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.events.send(session.id, events=[outcome])
    assert file_id in raised.value.message
    assert state_counts() == before
    with pytest.raises(anthropic.BadRequestError):
        new_session(initial_events=[outcome])
    assert state_counts() == before


def test_rubric_file_of_any_media_type_is_accepted_if_utf8_and_not_made_downloadable(sdk, new_session):
    rubric = upload(sdk, "rubric.bin", "Critère: précis".encode(), "application/octet-stream")
    session = new_session()
    sent = sdk.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.define_outcome", "description": "d", "rubric": {"type": "file", "file_id": rubric.id}}],
    )
    event = SessionEvent.objects.get(pk=sent.data[0].id)
    assert event.private["rubric_text"] == "Critère: précis"
    assert event.payload["rubric"] == {"type": "file", "file_id": rubric.id}
    assert File.objects.get(pk=rubric.id).downloadable is False


def test_a_long_evaluation_beats_between_its_start_and_end(sdk, model, celery_worker, new_session):
    """span.outcome_evaluation_ongoing while the grader's call runs (every second in the tests'
    worker, MANGO_OUTCOME_HEARTBEAT_SECONDS): evaluating, not stuck."""
    session = new_session()
    grading = grade("satisfied", "Fine.")
    grading["delay"] = 3.5
    model.script([text("Done."), grading])
    sent = sdk.beta.sessions.events.send(
        session.id,
        events=[
            {"type": "user.define_outcome", "description": "Say done", "rubric": {"type": "text", "content": "- done"}}
        ],
    )
    events = wait_idle(sdk, session.id, timeout=30)
    spans = [e for e in events if e.type.startswith("span.outcome_evaluation")]
    assert spans[0].type == "span.outcome_evaluation_start" and spans[-1].type == "span.outcome_evaluation_end"
    beats = spans[1:-1]
    assert 2 <= len(beats) <= 4 and {e.type for e in beats} == {"span.outcome_evaluation_ongoing"}, [
        e.type for e in spans
    ]
    assert all(e.outcome_id == sent.data[0].outcome_id and e.iteration == 0 for e in beats)
    assert spans[-1].result == "satisfied"
