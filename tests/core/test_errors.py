import json

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.core.urls_probe")]


def assert_envelope(response, status: int, error_type: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].endswith("json")
    assert response["request-id"].startswith("req_")
    body = response.json()
    assert set(body) == {"type", "error", "request_id"}
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    assert body["request_id"] == response["request-id"]
    return body


@pytest.fixture
def client(api_key):
    return Client(headers={"x-api-key": str(api_key)}, raise_request_exception=False)


def test_unknown_route_is_404_envelope(client):
    body = assert_envelope(client.get("/v1/nope"), 404, "not_found_error")
    assert "/v1/nope" in body["error"]["message"]


def test_unknown_route_without_auth_is_still_an_envelope():
    assert_envelope(Client().get("/nothing/here"), 404, "not_found_error")


def test_trailing_slash_is_not_redirected(client):
    response = client.get("/probe/echo/")
    assert response.status_code == 404


def test_wrong_method_is_405_envelope(client):
    assert_envelope(client.get("/probe/echo"), 405, "invalid_request_error")


def test_malformed_json_is_400_envelope(client):
    body = assert_envelope(
        client.post("/probe/echo", data="{not json", content_type="application/json"), 400, "invalid_request_error"
    )
    assert "JSON" in body["error"]["message"]


def test_valid_json_is_echoed(client):
    response = client.post("/probe/echo", data=json.dumps({"a": 1}), content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"received": {"a": 1}}


def test_oversize_json_body_is_413_envelope(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    payload = json.dumps({"blob": "x" * 4096})
    assert_envelope(client.post("/probe/echo", data=payload, content_type="application/json"), 413, "request_too_large")


@pytest.mark.parametrize("path", ["/probe/crash", "/probe/plain-crash"])
def test_unhandled_exception_is_500_envelope_without_traceback(client, path):
    response = client.get(path)
    body = assert_envelope(response, 500, "api_error")
    assert b"secret internals" not in response.content
    assert b"Traceback" not in response.content
    assert b"<html" not in response.content.lower()
    assert body["error"]["message"] == "Internal server error."


def test_401_carries_request_id_header():
    response = Client().get("/v1/files")
    assert_envelope(response, 401, "authentication_error")


def test_request_id_on_success_and_unique(client):
    first = client.get("/healthz")
    second = client.get("/healthz")
    assert first.status_code == 200
    assert first["request-id"] != second["request-id"]
