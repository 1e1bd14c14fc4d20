import copy
import hashlib
import json

import pytest

from processors import file_text as adm
from processors.admission import Admission
from processors.file_text import (
    MAX_CHARS,
    MAX_RUBRIC_BYTES,
    AdmissionError,
    FileRef,
    not_found_error,
    read_verified_text,
)
from processors.rendering import render_message_for_model
from tests.processors.store import Store

FOUR_BYTE = "\U0001f600"  # 😀, 4 bytes in UTF-8


def doc(file_id, **extra):
    return {"type": "document", "source": {"type": "file", "file_id": file_id}, **extra}


@pytest.fixture
def store():
    return Store()


def admit_message_content(content, *, lookup, read_bytes, aggregate_limit=MAX_CHARS, admission=None):
    """One user.message content list through an Admission (shared when given)."""
    if admission is None:
        admission = Admission(lookup=lookup, read_bytes=read_bytes, aggregate_limit=aggregate_limit)
    return admission.message_content(content)


def admit_rubric(rubric, *, lookup, read_bytes):
    return Admission(lookup=lookup, read_bytes=read_bytes).rubric(rubric).text


def read(store, file_id, **kw):
    return read_verified_text(store.lookup(file_id), read_bytes=store.read_bytes, file_id=file_id, **kw)


# --- constants ------------------------------------------------------------------------------


def test_limits():
    assert MAX_CHARS == 262_144
    assert MAX_RUBRIC_BYTES == 1_048_576 == len((FOUR_BYTE * MAX_CHARS).encode())


# --- read_verified_text -----------------------------------------------------------------------


def test_reads_verified_text(store):
    store.add("file_a", "héllo\n".encode())
    assert read(store, "file_a") == "héllo\n"
    # The loader is asked for one byte more than recorded, so a longer object is detected.
    assert store.reads == [("file_a", len("héllo\n".encode()) + 1)]


def test_missing(store):
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_nope")
    assert exc.value.reason == "missing"
    assert exc.value.file_id == "file_nope"
    assert str(exc.value) == "File file_nope not found."
    assert store.reads == []


def test_cross_workspace_is_indistinguishable_from_missing(store):
    store.add("file_foreign", b"secret", workspace="beta", filename="secret.txt")
    with pytest.raises(AdmissionError) as foreign:
        read(store, "file_foreign")
    del store.files["file_foreign"]
    with pytest.raises(AdmissionError) as missing:
        read(store, "file_foreign")
    assert str(foreign.value) == str(missing.value) == "File file_foreign not found."
    assert foreign.value.reason == missing.value.reason == "missing"
    assert "secret" not in str(foreign.value)
    assert store.reads == []


def test_cross_workspace_reason_is_reported_as_missing():
    error = AdmissionError("File file_x not found.", file_id="file_x", reason=adm.CROSS_WORKSPACE)
    assert error.reason == "missing"
    assert str(not_found_error("file_x")) == "File file_x not found."


def test_deleting(store):
    store.add("file_d", b"x", state="deleting", filename="gone.txt")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_d")
    assert exc.value.reason == "deleting"
    assert "file_d" in str(exc.value) and '"gone.txt"' in str(exc.value)
    assert store.reads == []


def test_not_yet_ready_is_missing(store):
    store.add("file_p", b"x", state="pending")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_p")
    assert exc.value.reason == "missing"
    assert str(exc.value) == "File file_p not found."


def test_session_scoped(store):
    store.add("file_s", b"x", scope_session_id="sesn_1", downloadable=True, origin="resource")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_s")
    assert exc.value.reason == "session_scoped"
    assert "file_s" in str(exc.value)
    assert store.reads == []


def test_empty(store):
    store.add("file_e", b"", filename="empty.txt")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_e")
    assert exc.value.reason == "empty"
    assert str(exc.value) == 'File file_e ("empty.txt") is empty.'
    assert store.reads == []


def test_oversized_by_recorded_size_is_rejected_before_reading(store):
    store.add("file_big", b"a" * (MAX_RUBRIC_BYTES + 1))
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_big")
    assert exc.value.reason == "oversized"
    assert store.reads == []


def test_explicit_max_bytes(store):
    store.add("file_a", b"abcdef")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_a", max_bytes=5)
    assert exc.value.reason == "oversized"
    assert read(store, "file_a", max_bytes=6) == "abcdef"


def test_character_boundary(store):
    store.add("file_ok", b"a" * MAX_CHARS)
    store.add("file_over", b"a" * (MAX_CHARS + 1))
    assert len(read(store, "file_ok")) == MAX_CHARS
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_over")
    assert exc.value.reason == "oversized"
    assert "262,145 characters" in str(exc.value)


def test_four_byte_characters_at_the_byte_cap(store):
    store.add("file_emoji", (FOUR_BYTE * MAX_CHARS).encode())
    text = read(store, "file_emoji")
    assert len(text) == MAX_CHARS
    assert store.reads == [("file_emoji", MAX_RUBRIC_BYTES + 1)]
    store.add("file_emoji_over", (FOUR_BYTE * (MAX_CHARS + 1)).encode())
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_emoji_over")
    assert exc.value.reason == "oversized"


def test_multibyte_text_over_the_char_limit_within_the_byte_cap(store):
    # 262,145 two-byte characters fit the byte cap but not the character limit.
    store.add("file_two", ("é" * (MAX_CHARS + 1)).encode())
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_two")
    assert exc.value.reason == "oversized"


@pytest.mark.parametrize(
    ("stored", "needle"),
    [(b"hello", "holds 5 bytes"), (b"hello world!!", "more than 11"), (b"", "holds 0 bytes")],
)
def test_corrupt_byte_count(store, stored, needle):
    store.add("file_c", b"hello world", stored=stored)
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_c")
    assert exc.value.reason == "corrupt"
    assert needle in str(exc.value)


def test_corrupt_sha256(store):
    store.add("file_c", b"hello world", stored=b"HELLO WORLD")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_c")
    assert exc.value.reason == "corrupt"
    assert "SHA-256" in str(exc.value)


def test_sha256_is_compared_case_insensitively(store):
    store.add("file_a", b"abc", sha256=hashlib.sha256(b"abc").hexdigest().upper())
    assert read(store, "file_a") == "abc"


def test_missing_object_is_corrupt(store):
    ref = store.add("file_a", b"abc")
    store.files["file_a"] = ("alpha", ref, b"")

    def gone(ref, limit):
        raise FileNotFoundError(ref.file_id)

    with pytest.raises(AdmissionError) as exc:
        read_verified_text(ref, read_bytes=gone)
    assert exc.value.reason == "corrupt"


def test_storage_failures_propagate(store):
    ref = store.add("file_a", b"abc")

    def broken(ref, limit):
        raise ConnectionError("s3 down")

    with pytest.raises(ConnectionError):
        read_verified_text(ref, read_bytes=broken)


def test_loader_returning_more_than_asked_is_corrupt(store):
    ref = store.add("file_a", b"abc")
    with pytest.raises(AdmissionError) as exc:
        read_verified_text(ref, read_bytes=lambda ref, limit: b"abc" * 10)
    assert exc.value.reason == "corrupt"


@pytest.mark.parametrize("data", [b"\xff\xfe", b"ok \xc3\x28", b"\xed\xa0\x80", b"caf\xe9"])
def test_not_utf8(store, data):
    store.add("file_bin", data)
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_bin")
    assert exc.value.reason == "not_utf8"
    assert "file_bin" in str(exc.value)


def test_octet_stream_utf8_is_accepted(store):
    store.add("file_o", "plain ünïcode".encode(), mime_type="application/octet-stream", filename="blob")
    assert read(store, "file_o") == "plain ünïcode"


def test_octet_stream_with_nul_is_rejected(store):
    store.add("file_o", b"abc\x00def", mime_type="application/octet-stream")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_o")
    assert exc.value.reason == "contains_nul"


def test_declared_text_with_nul_is_accepted(store):
    # The NUL rule is the spec's octet-stream rule; declared text only has to be UTF-8.
    store.add("file_t", b"abc\x00def", mime_type="text/plain")
    assert read(store, "file_t") == "abc\x00def"


@pytest.mark.parametrize("mime", ["application/pdf", "image/png", "application/zip", "image/svg+xml"])
def test_unsupported_media_type_is_rejected_before_reading(store, mime):
    store.add("file_pdf", b"%PDF-1.7 text", mime_type=mime, filename="paper")
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_pdf")
    assert exc.value.reason == "unsupported_media_type"
    assert mime in str(exc.value)
    assert store.reads == []


def test_media_check_can_be_disabled(store):
    store.add("file_pdf", b"abc\x00", mime_type="application/pdf")
    assert read(store, "file_pdf", require_text_media=False) == "abc\x00"


def test_location_prefixes_the_message(store):
    with pytest.raises(AdmissionError) as exc:
        read(store, "file_nope", location="content[2]")
    assert str(exc.value) == "content[2]: File file_nope not found."


def test_error_is_a_client_error():
    error = AdmissionError("x", reason="empty")
    assert error.status == 400 and error.type == "invalid_request_error"
    assert isinstance(error, ValueError)


# --- message content ------------------------------------------------------------------------


def test_admit_message_content(store):
    store.add("file_a", b"alpha", filename="a.md", mime_type="text/markdown")
    content = [{"type": "text", "text": "read this"}, doc("file_a", title="A")]
    original = copy.deepcopy(content)
    admitted = admit_message_content(content, **store.kw())
    assert admitted.content == original
    assert admitted.content is not content
    assert admitted.snapshots == [
        {"index": 1, "file_id": "file_a", "filename": "a.md", "media_type": "text/markdown", "text": "alpha"}
    ]
    assert admitted.chars == 5
    json.dumps(admitted.snapshots)  # storable


def test_other_blocks_pass_untouched_without_reads(store):
    content = [
        {"type": "text", "text": "hi"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAAAAAAAAA=="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjcK"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "inline"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}},
        {"type": "redacted"},
    ]
    admitted = admit_message_content(content, **store.kw())
    assert admitted.content == content
    assert admitted.snapshots == []
    assert store.lookups == [] and store.reads == []


def test_message_rejections_name_position_file_and_reason(store):
    store.add("file_a", b"ok")
    store.add("file_e", b"", filename="e.txt")
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_a"), doc("file_e")], **store.kw())
    assert exc.value.reason == "empty"
    assert str(exc.value) == 'content[1]: File file_e ("e.txt") is empty.'


def test_file_images_and_pdfs_are_admitted_as_media_snapshots(store):
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
    store.add("file_img", png, mime_type="image/png", filename="shot.png")
    store.add("file_pdf", b"%PDF-1.7\n...", mime_type="application/pdf", filename="paper.pdf")
    store.add("file_a", b"ok")
    content = [doc("file_a"), {"type": "image", "source": {"type": "file", "file_id": "file_img"}}, doc("file_pdf")]
    admitted = admit_message_content(content, **store.kw())
    snapshots = {s["file_id"]: s for s in admitted.snapshots}
    assert snapshots["file_a"]["text"] == "ok" and "kind" not in snapshots["file_a"]
    assert snapshots["file_img"] == {
        "index": 1, "file_id": "file_img", "filename": "shot.png", "media_type": "image/png", "kind": "image",
        "size_bytes": len(png),
    }  # fmt: skip
    assert snapshots["file_pdf"]["kind"] == "pdf" and snapshots["file_pdf"]["media_type"] == "application/pdf"
    assert admitted.chars == 2  # only text counts toward the characters aggregate


@pytest.mark.parametrize(
    ("block_type", "data", "mime", "reason"),
    [
        ("image", b"GIF89a....", "image/png", "signature_mismatch"),  # says PNG, is a GIF
        ("image", b"%PDF-1.7", "application/pdf", "unsupported_media_type"),  # an image block takes images
        ("document", b"not a pdf", "application/pdf", "signature_mismatch"),
        ("image", b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png", "oversized"),
    ],
)
def test_media_files_are_what_they_claim_and_within_the_limits(store, block_type, data, mime, reason):
    store.add("file_m", data, mime_type=mime)
    admission = Admission(**store.kw(), media_limits={"image": 64, "pdf": 64})
    with pytest.raises(AdmissionError) as exc:
        admission.message_content([{"type": block_type, "source": {"type": "file", "file_id": "file_m"}}])
    assert exc.value.reason == reason and exc.value.file_id == "file_m"


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ({"type": "base64", "media_type": "image/png", "data": "!!notbase64"}, "standard base64"),
        ({"type": "base64", "media_type": "image/png", "data": "JVBERi0xLjcK"}, "not a image/png"),
        ({"type": "base64", "media_type": "image/tiff", "data": "JVBERi0xLjcK"}, "media_type"),
        ({"type": "url", "url": "file:///etc/passwd"}, "http(s) URL"),
        ({"type": "text", "data": "x"}, "source.type"),
    ],
)
def test_inline_image_sources_are_checked(store, source, fragment):
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([{"type": "image", "source": source}], **store.kw())
    assert fragment in str(exc.value) and exc.value.reason in ("invalid", "signature_mismatch")


@pytest.mark.parametrize("source", [{"type": "file"}, {"type": "file", "file_id": ""}, {"type": "file", "file_id": 7}])
def test_malformed_file_source(store, source):
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([{"type": "document", "source": source}], **store.kw())
    assert exc.value.reason == "invalid"


def test_content_must_be_a_list(store):
    with pytest.raises(AdmissionError) as exc:
        admit_message_content("hello", **store.kw())
    assert exc.value.reason == "invalid"


def test_aggregate_over_several_documents(store):
    half = MAX_CHARS // 2
    store.add("file_1", b"a" * half)
    store.add("file_2", b"b" * half)
    store.add("file_3", b"c")
    admitted = admit_message_content([doc("file_1"), doc("file_2")], **store.kw())
    assert admitted.chars == MAX_CHARS  # exactly at the aggregate limit
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_1"), doc("file_2"), doc("file_3")], **store.kw())
    assert exc.value.reason == "aggregate_oversized"
    assert exc.value.file_id == "file_3"
    assert "content[2]" in str(exc.value) and "262,145" in str(exc.value)


def test_same_file_twice_is_read_once_and_counted_twice(store):
    store.add("file_1", b"a" * (MAX_CHARS // 2 + 1))
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_1"), doc("file_1")], **store.kw())
    assert exc.value.reason == "aggregate_oversized"
    assert [r[0] for r in store.reads] == ["file_1"]


def test_aggregate_across_events_in_one_admission(store):
    store.add("file_1", b"a" * 200_000)
    store.add("file_2", b"b" * 62_144)
    store.add("file_3", b"c")
    admission = Admission(**store.kw())
    admission.message_content([doc("file_1")])
    admission.message_content([doc("file_2")])
    assert admission.used_chars == MAX_CHARS
    with pytest.raises(AdmissionError) as exc:
        admission.message_content([{"type": "text", "text": "x"}, doc("file_3")])
    assert exc.value.reason == "aggregate_oversized"
    # A failed message adds nothing to the aggregate.
    assert admission.used_chars == MAX_CHARS
    # ... and text without Files still fits.
    admission.message_content([{"type": "text", "text": "more"}])


def test_admit_message_content_with_a_shared_admission(store):
    store.add("file_1", b"a" * MAX_CHARS)
    store.add("file_2", b"b")
    admission = Admission(**store.kw())
    admit_message_content([doc("file_1")], admission=admission, **store.kw())
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_2")], admission=admission, **store.kw())
    assert exc.value.reason == "aggregate_oversized"
    # Separate admissions have separate aggregates.
    admit_message_content([doc("file_2")], **store.kw())


def test_custom_aggregate_limit(store):
    store.add("file_1", b"abc")
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_1")], aggregate_limit=2, **store.kw())
    assert exc.value.reason == "aggregate_oversized"


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"data": b""}, "empty"),
        ({"data": b"x", "state": "deleting"}, "deleting"),
        ({"data": b"x", "scope_session_id": "sesn_1"}, "session_scoped"),
        ({"data": b"a" * (MAX_CHARS + 1)}, "oversized"),
        ({"data": b"abc", "stored": b"abd"}, "corrupt"),
        ({"data": b"abc", "stored": b"ab"}, "corrupt"),
        ({"data": b"\xff"}, "not_utf8"),
        ({"data": b"a\x00", "mime_type": "application/octet-stream"}, "contains_nul"),
        ({"data": b"PK\x03\x04", "mime_type": "application/zip"}, "unsupported_media_type"),
    ],
)
def test_every_document_rejection(store, setup, reason):
    setup = dict(setup)
    store.add("file_x", setup.pop("data"), filename="x.bin", **setup)
    with pytest.raises(AdmissionError) as exc:
        admit_message_content([doc("file_x")], **store.kw())
    assert exc.value.reason == reason
    assert exc.value.file_id == "file_x"
    assert str(exc.value).startswith('content[0]: File file_x ("x.bin") ')


def test_document_cross_workspace_message_equals_missing(store):
    store.add("file_x", b"x", workspace="beta")
    with pytest.raises(AdmissionError) as foreign:
        admit_message_content([doc("file_x")], **store.kw())
    with pytest.raises(AdmissionError) as missing:
        admit_message_content([doc("file_x")], **Store().kw())
    assert str(foreign.value) == str(missing.value) == "content[0]: File file_x not found."
    assert foreign.value.reason == missing.value.reason == "missing"


# --- rendering ------------------------------------------------------------------------------


def test_render_replaces_file_documents_with_text(store):
    store.add("file_secretid123", b'{"k": 1}\n', filename="data.json", mime_type="application/json")
    content = [{"type": "text", "text": "look"}, doc("file_secretid123")]
    admitted = admit_message_content(content, **store.kw())
    rendered = render_message_for_model(admitted.content, admitted.snapshots)
    assert rendered[0] == {"type": "text", "text": "look"}
    assert rendered[1] == {
        "type": "text",
        "text": '<document filename="data.json" media_type="application/json">\n{"k": 1}\n</document>',
    }
    assert "file_secretid123" not in json.dumps(rendered)
    # Pure: the inputs are untouched.
    assert admitted.content == content


def test_render_escapes_attributes_and_keeps_title_context_cache_control():
    content = [doc("file_a", title='T "1"', context="line1\nline2", cache_control={"type": "ephemeral"})]
    snapshots = [
        {
            "index": 0,
            "file_id": "file_a",
            "filename": 'a"<b>&.txt',
            "media_type": "text/plain; charset=utf-8",
            "text": "body",
        }
    ]
    [block] = render_message_for_model(content, snapshots)
    assert block["type"] == "text"
    assert block["cache_control"] == {"type": "ephemeral"}
    assert block["text"].startswith(
        '<document filename="a&quot;&lt;b&gt;&amp;.txt" media_type="text/plain; charset=utf-8" '
        'title="T &quot;1&quot;" context="line1&#10;line2">\nbody\n</document>'
    )
    assert "file_a" not in block["text"]


def test_render_uses_the_snapshot_not_the_live_file(store):
    store.add("file_a", b"original", filename="a.txt")
    admitted = admit_message_content([doc("file_a")], **store.kw())
    stored = json.loads(json.dumps(admitted.snapshots))  # as persisted with the event
    store.files.clear()  # the source File is deleted afterwards
    rendered = render_message_for_model(admitted.content, stored)
    assert "original" in rendered[0]["text"]


def test_render_passes_other_blocks_and_drops_redacted():
    content = [
        {"type": "text", "text": "a"},
        {"type": "redacted"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAAAAAAAAA=="}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "inline"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}},
    ]
    assert render_message_for_model(content, []) == [content[0], *content[2:]]


def test_render_requires_a_matching_snapshot():
    with pytest.raises(ValueError):
        render_message_for_model([doc("file_a")], [])
    wrong = [{"index": 0, "file_id": "file_b", "filename": "b", "media_type": "text/plain", "text": "b"}]
    with pytest.raises(ValueError):
        render_message_for_model([doc("file_a")], wrong)
    with pytest.raises(ValueError):
        render_message_for_model([{"type": "image", "source": {"type": "file", "file_id": "file_i"}}], [])


def test_render_text_ending_in_newline_gets_no_blank_line():
    snap = {"index": 0, "file_id": "file_a", "filename": "a", "media_type": "text/plain", "text": "x\n"}
    assert render_message_for_model([doc("file_a")], [snap])[0]["text"].endswith('">\nx\n</document>')


# --- rubrics --------------------------------------------------------------------------------


def test_file_rubric(store):
    store.add("file_r", "Must cite sources ✓".encode(), filename="rubric.md", mime_type="text/markdown")
    assert admit_rubric({"type": "file", "file_id": "file_r"}, **store.kw()) == "Must cite sources ✓"


def test_file_rubric_accepts_any_media_type_that_decodes(store):
    store.add("file_r", b"criteria", mime_type="application/pdf")
    assert admit_rubric({"type": "file", "file_id": "file_r"}, **store.kw()) == "criteria"
    store.add("file_bad", b"%PDF\xff", mime_type="application/pdf")
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "file", "file_id": "file_bad"}, **store.kw())
    assert exc.value.reason == "not_utf8"


def test_file_rubric_byte_cap_and_char_limit(store):
    store.add("file_max", (FOUR_BYTE * MAX_CHARS).encode())
    assert len(admit_rubric({"type": "file", "file_id": "file_max"}, **store.kw())) == MAX_CHARS
    assert store.reads[-1] == ("file_max", MAX_RUBRIC_BYTES + 1)
    store.add("file_bytes", b"a" * (MAX_RUBRIC_BYTES + 1))
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "file", "file_id": "file_bytes"}, **store.kw())
    assert exc.value.reason == "oversized"
    assert store.reads[-1][0] == "file_max"  # never read
    store.add("file_chars", b"a" * (MAX_CHARS + 1))
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "file", "file_id": "file_chars"}, **store.kw())
    assert exc.value.reason == "oversized"


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ({"data": b""}, "empty"),
        ({"data": b"x", "state": "deleting"}, "deleting"),
        ({"data": b"x", "scope_session_id": "sesn_1"}, "session_scoped"),
        ({"data": b"abc", "stored": b"abd"}, "corrupt"),
        ({"data": b"abc", "size_bytes": 4}, "corrupt"),
        ({"data": b"\xc3"}, "not_utf8"),
    ],
)
def test_file_rubric_rejections(store, setup, reason):
    setup = dict(setup)
    store.add("file_r", setup.pop("data"), filename="r.txt", **setup)
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "file", "file_id": "file_r"}, **store.kw())
    assert exc.value.reason == reason
    assert str(exc.value).startswith('rubric: File file_r ("r.txt") ')


def test_file_rubric_cross_workspace_equals_missing(store):
    store.add("file_r", b"x", workspace="beta")
    with pytest.raises(AdmissionError) as foreign:
        admit_rubric({"type": "file", "file_id": "file_r"}, **store.kw())
    with pytest.raises(AdmissionError) as missing:
        admit_rubric({"type": "file", "file_id": "file_r"}, **Store().kw())
    assert str(foreign.value) == str(missing.value) == "rubric: File file_r not found."


def test_text_rubric(store):
    assert admit_rubric({"type": "text", "content": "be precise"}, **store.kw()) == "be precise"
    assert len(admit_rubric({"type": "text", "content": FOUR_BYTE * MAX_CHARS}, **store.kw())) == MAX_CHARS
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "text", "content": "a" * (MAX_CHARS + 1)}, **store.kw())
    assert exc.value.reason == "oversized"
    with pytest.raises(AdmissionError) as exc:
        admit_rubric({"type": "text", "content": ""}, **store.kw())
    assert exc.value.reason == "empty"


@pytest.mark.parametrize(
    "rubric",
    [
        None,
        "text",
        {"type": "url", "url": "x"},
        {"type": "text"},
        {"type": "text", "content": 3},
        {"type": "file"},
        {"type": "file", "file_id": ""},
    ],
)
def test_invalid_rubric(store, rubric):
    with pytest.raises(AdmissionError) as exc:
        admit_rubric(rubric, **store.kw())
    assert exc.value.reason == "invalid"


def test_rubric_does_not_count_toward_the_document_aggregate(store):
    store.add("file_d", b"a" * MAX_CHARS)
    store.add("file_r", b"r" * MAX_CHARS)
    admission = Admission(**store.kw())
    admission.message_content([doc("file_d")])
    rubric = admission.rubric({"type": "file", "file_id": "file_r"})
    assert len(rubric.text) == MAX_CHARS


# --- tool results ---------------------------------------------------------------------------


# --- whole events ---------------------------------------------------------------------------


def test_admit_events(store):
    store.add("file_a", b"doc text", filename="a.txt")
    store.add("file_r", b"rubric text", filename="r.txt")
    admission = Admission(**store.kw())
    message = {"type": "user.message", "content": [doc("file_a")]}
    admitted = admission.event(message, location="events[0]")
    assert admitted.public == message
    assert admitted.private == {
        "documents": [
            {"index": 0, "file_id": "file_a", "filename": "a.txt", "media_type": "text/plain", "text": "doc text"}
        ]
    }

    outcome = {"type": "user.define_outcome", "description": "d", "rubric": {"type": "file", "file_id": "file_r"}}
    admitted = admission.event(outcome)
    assert admitted.public == outcome  # the public event keeps only the File reference
    assert admitted.private == {
        "rubric": {
            "type": "file",
            "file_id": "file_r",
            "filename": "r.txt",
            "media_type": "text/plain",
            "text": "rubric text",
        }
    }

    text_outcome = {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "c"}}
    assert admission.event(text_outcome).private == {"rubric": {"type": "text", "text": "c"}}

    plain = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
    assert admission.event(plain).private is None
    assert admission.event({"type": "user.interrupt"}).public == {"type": "user.interrupt"}


def test_admit_event_errors_carry_the_event_location(store):
    admission = Admission(**store.kw())
    with pytest.raises(AdmissionError) as exc:
        admission.event({"type": "user.message", "content": [doc("file_x")]}, location="initial_events[1]")
    assert str(exc.value) == "initial_events[1].content[0]: File file_x not found."
    with pytest.raises(AdmissionError) as exc:
        admission.event({"type": "user.tool_result", "tool_use_id": "t", "content": [doc("file_x")]})
    assert str(exc.value) == "event.content[0]: File file_x not found."
    store.add("file_t", b"tool output")
    admitted = admission.event(
        {"type": "user.custom_tool_result", "custom_tool_use_id": "t", "content": [doc("file_t")]}
    )
    assert admitted.private["documents"][0]["text"] == "tool output"


def test_file_ref_is_frozen():
    ref = FileRef("file_a", "a", "text/plain", 1, "00")
    with pytest.raises(AttributeError):
        ref.size_bytes = 2  # type: ignore[misc]


def test_file_ref_of_a_model_like_object():
    class Row:
        id = "file_a"
        filename = "a.txt"
        mime_type = "text/plain"
        size_bytes = 3
        sha256 = "ab"
        state = "ready"
        scope_session_id = None
        downloadable = False
        origin = "upload"

    assert FileRef.of(Row()) == FileRef("file_a", "a.txt", "text/plain", 3, "ab")
