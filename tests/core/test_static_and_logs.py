"""Static files and JSON logs, through a real gunicorn started the way `make run` and the image
start it (`-c config/gunicorn.conf.py`)."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.logging import JsonFormatter
from tests.files.server import free_port
from tests.worker import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


@pytest.fixture
def gunicorn(tmp_path):
    port = free_port()
    log_path = tmp_path / "gunicorn.log"
    env = {**os.environ, "DATABASE_URL": database_url(), "DATABASE_CONN_MAX_AGE": "0", "MANGO_LOG_LEVEL": "INFO"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "-c", "config/gunicorn.conf.py", "config.asgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            break
        except httpx.TransportError:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
    yield url, log_path
    os.killpg(process.pid, signal.SIGINT)  # quick shutdown (SIGTERM waits out graceful_timeout)
    process.wait(60)


def _json_lines(path: Path) -> list[dict]:
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_admin_css_is_served_by_the_app_server(gunicorn):
    url, _ = gunicorn
    login = httpx.get(f"{url}/admin/login/")
    assert login.status_code == 200
    assert "/static/admin/css/base.css" in login.text
    css = httpx.get(f"{url}/static/admin/css/base.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert "body" in css.text
    assert httpx.get(f"{url}/static/admin/css/no-such.css").status_code == 404


def test_access_lines_are_json_with_the_request_id(gunicorn):
    url, log_path = gunicorn
    response = httpx.get(f"{url}/healthz?probe=1")
    request_id = response.headers["request-id"]
    deadline = time.monotonic() + 5
    while True:
        access = [line for line in _json_lines(log_path) if line.get("logger") == "gunicorn.access"]
        matching = [line for line in access if line.get("request_id") == request_id]
        if matching or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    [line] = matching
    assert line["method"] == "GET" and line["path"] == "/healthz" and line["query"] == "probe=1"
    assert line["status"] == 200 and line["duration_ms"] >= 0 and line["level"] == "INFO" and line["ts"]
    # gunicorn's own lines are JSON too: every line it wrote is.
    text_lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    assert text_lines and all(line.startswith("{") for line in text_lines), text_lines[:5]


def test_every_extra_field_is_kept():
    record = logging.LogRecord("files.reconcile", logging.WARNING, __file__, 1, "intent %s stuck", (7,), None)
    record.object_key = "files/wrkspc_1/abc"
    record.intent_id = 7
    record.request_id = "req_1"
    line = json.loads(JsonFormatter().format(record))
    assert list(line)[:4] == ["ts", "level", "logger", "message"]
    assert line["message"] == "intent 7 stuck" and line["level"] == "WARNING" and line["logger"] == "files.reconcile"
    assert line["object_key"] == "files/wrkspc_1/abc" and line["intent_id"] == 7 and line["request_id"] == "req_1"
