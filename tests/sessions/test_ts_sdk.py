"""The official TypeScript SDK, pinned in tests/sdk_ts/package.json, as a client of Mango: files
(multipart upload, cursor pages of one), agents, environments, a session's SSE stream and event
list with a real worker and the scripted model, memory stores, vaults, skills and the error
envelope, through its own code (tests/sdk_ts/conformance.mjs run by node)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.scripted_model import echo

SDK_DIR = Path(__file__).resolve().parents[1] / "sdk_ts"
PINNED = json.loads((SDK_DIR / "package.json").read_text())["dependencies"]["@anthropic-ai/sdk"]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("npm") is None, reason="no node/npm")]


@pytest.fixture(scope="module")
def ts_sdk():
    """The pinned SDK in tests/sdk_ts/node_modules (installed when missing or another version; no
    lock file is written: it would name the registry)."""
    installed = SDK_DIR / "node_modules" / "@anthropic-ai" / "sdk" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != PINNED:
        subprocess.run(
            ["npm", "install", "--no-package-lock", "--no-audit", "--no-fund"], cwd=SDK_DIR, check=True,
            capture_output=True, timeout=300,
        )  # fmt: skip
    assert json.loads(installed.read_text())["version"] == PINNED
    return SDK_DIR


@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_the_typescript_sdk_drives_files_agents_sessions_and_catalogues(
    ts_sdk, live_server, api_key, s3_bucket, model, celery_worker
):
    model.default = echo
    ran = subprocess.run(
        ["node", "conformance.mjs", live_server.url, str(api_key)], cwd=ts_sdk, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["file"]["filename"] == "node.txt" and out["file"]["size"] == len("hello from node\n")
    assert out["files"] == [out["file"]["id"]] and out["fileMeta"] == "text/plain"
    assert out["agent"] == {"version": 2, "description": "from node"}
    assert out["session"] == {"status": "idle", "title": "node"}
    assert out["answer"] == "(scripted model) You said: hi from node"
    assert (
        out["streamed"][0] in ("session.status_running", "user.message")
        and out["streamed"][-1] == "session.status_idle"
    )
    assert (
        out["listed"][:2] == ["user.message", "session.status_running"] and out["listed"][-1] == "session.status_idle"
    )
    assert out["memories"] == ["/a.md"] and out["vault"] == "node-vault"
    assert out["skills"] == ["docx", "pdf", "pptx", "xlsx"]
    assert out["missing"] == {"status": 404, "type": "not_found_error"} and out["deleted"]
