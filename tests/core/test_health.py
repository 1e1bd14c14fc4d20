import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_healthz_needs_no_auth():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_all_up(s3_bucket):
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"postgresql": "ok", "redis": "ok", "object_store": "ok"}


def _store_at(settings, endpoint: str) -> None:
    storages = {**settings.STORAGES}
    storages["files"] = {**storages["files"], "OPTIONS": {**storages["files"]["OPTIONS"], "endpoint_url": endpoint}}
    settings.STORAGES = storages  # Django rebuilds the storage handler on this change


def test_readyz_names_the_object_store_when_it_is_down(settings):
    # Nothing listens on port 9 (discard) here: the store is unreachable.
    _store_at(settings, "http://127.0.0.1:9")
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["type"] == "error"
    assert "object_store" in body["error"]["message"]
    assert body["error"]["details"]["checks"]["object_store"].startswith("down")
    assert body["error"]["details"]["checks"]["postgresql"] == "ok"


def test_readyz_names_redis_when_it_is_down(settings, s3_bucket):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert "redis" in response.json()["error"]["message"]


def test_readyz_skips_the_store_when_files_are_not_configured(settings):
    settings.MANGO_FILE_S3_BUCKET = None
    response = Client().get("/readyz")
    assert response.status_code == 200
