import pytest

from processors.text_formats import TEXTUAL_APPLICATION_TYPES, classify, essence


@pytest.mark.parametrize(
    "mime",
    [
        "text/plain",
        "text/markdown",
        "text/csv",
        "text/html",
        "text/xml",
        "text/x-python",
        "text/javascript",
        "text/yaml",
        "text/x-anything-at-all",
        "application/json",
        "application/xml",
        "application/ld+json",
        "application/vnd.api+json",
        "application/atom+xml",
        "application/xhtml+xml",
        "application/x-ipynb+json",
        "application/vnd.oai.openapi+yaml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/sql",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-python",
        "application/x-httpd-php",
        "application/graphql",
        "application/x-ndjson",
        "application/jsonl",
        "application/x-tex",
    ],
)
def test_textual_types(mime):
    assert classify(mime) == "text"
    assert classify(mime) == "text"


@pytest.mark.parametrize(
    "mime",
    [
        "application/pdf",
        "image/png",
        "image/jpeg",
        "image/svg+xml",  # an image, even though it is XML
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "audio/mpeg",
        "video/mp4",
        "application/rtf",
        "application/x-python-code",  # .pyc bytecode
        "application/msword",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/+json",
        "nonsense",
        "text/",
        "/plain",
        "text/plain/extra",
    ],
)
def test_unsupported_types(mime):
    assert classify(mime) == "unsupported"
    assert classify(mime) != "text"


@pytest.mark.parametrize("mime", ["application/octet-stream", "Application/Octet-Stream; x=1", "", None])
def test_octet_stream_and_missing_type_defer_to_the_bytes(mime):
    assert classify(mime) == "octet_stream"
    assert classify(mime) != "text"


@pytest.mark.parametrize(
    "mime", ["TEXT/PLAIN", "text/plain; charset=utf-8", " Application/JSON ;charset=UTF-8", "application/Foo+JSON"]
)
def test_parameters_and_case_are_ignored(mime):
    assert classify(mime) == "text"


def test_essence():
    assert essence("Text/Plain; charset=UTF-8") == "text/plain"
    assert essence(None) == ""


def test_the_explicit_list_is_lowercase_application_types():
    assert all(t == t.lower() and t.startswith("application/") for t in TEXTUAL_APPLICATION_TYPES)
    assert "application/rtf" not in TEXTUAL_APPLICATION_TYPES
