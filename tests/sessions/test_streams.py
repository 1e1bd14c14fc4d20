"""SSE under load: 50 concurrent event streams stay served while uploads and lists continue, and
each stream delivers its session's turn. Figures are printed (run with -s) and written to
var/log/sse-50-streams.json."""

import json
import statistics
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.scripted_model import text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

STREAMS = 50


def _timed(fn):
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def test_fifty_concurrent_streams_while_uploads_and_lists_continue(sdk, model, celery_worker, s3_bucket):
    agent = sdk.beta.agents.create(name="chat", model="claude-sonnet-4-5")
    env = sdk.beta.environments.create(name="e")
    sessions = [sdk.beta.sessions.create(agent=agent.id, environment_id=env.id) for _ in range(STREAMS)]
    model.script([text(f"reply {i}") for i in range(STREAMS)])

    connected = threading.Semaphore(0)
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def follow(session_id: str) -> None:
        record = results.setdefault(session_id, {"types": []})
        try:
            opened = time.monotonic()
            with sdk.beta.sessions.events.stream(session_id) as stream:
                record["open_seconds"] = time.monotonic() - opened
                connected.release()
                for event in stream:
                    record["types"].append(event.type)
                    if event.type == "session.status_idle":
                        record["idle_at"] = time.monotonic()
                        return
        except BaseException as exc:  # noqa: BLE001 — reported by the main thread
            errors.append(exc)
            connected.release()

    threads = [threading.Thread(target=follow, args=(s.id,), daemon=True) for s in sessions]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for _ in threads:
        assert connected.acquire(timeout=30)
    all_open = time.monotonic() - started
    assert not errors, errors

    # With every stream open: uploads and lists keep their latency.
    upload_latencies, list_latencies = [], []
    payload = b"x" * 256 * 1024
    for i in range(10):
        upload_latencies.append(_timed(lambda i=i: sdk.beta.files.upload(file=(f"f{i}.txt", payload, "text/plain"))))
        list_latencies.append(_timed(lambda: sdk.beta.sessions.list(limit=20)))
        list_latencies.append(_timed(lambda: sdk.beta.files.list(limit=20)))

    # Then every session runs a turn; each stream must deliver it.
    sent_at = time.monotonic()
    for session in sessions:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert all("idle_at" in r for r in results.values()), {
        k: v["types"] for k, v in results.items() if "idle_at" not in v
    }
    for record in results.values():
        assert record["types"][:2] == ["user.message", "session.status_running"]
        assert record["types"][-2:] == ["agent.message", "session.status_idle"]
    delivery = [r["idle_at"] - sent_at for r in results.values()]

    figures = {
        "streams": STREAMS,
        "all_streams_open_seconds": round(all_open, 3),
        "stream_open_p50_seconds": round(statistics.median(r["open_seconds"] for r in results.values()), 3),
        "upload_256k_p50_seconds": round(statistics.median(upload_latencies), 3),
        "upload_256k_max_seconds": round(max(upload_latencies), 3),
        "list_p50_seconds": round(statistics.median(list_latencies), 3),
        "list_max_seconds": round(max(list_latencies), 3),
        "turns_all_idle_seconds": round(max(delivery), 3),
        "turn_idle_p50_seconds": round(statistics.median(delivery), 3),
    }
    print("\nSSE figures:", json.dumps(figures))
    out = Path(__file__).resolve().parents[2] / "var" / "log" / "sse-50-streams.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    assert max(upload_latencies) < 5 and max(list_latencies) < 5


def test_stream_heartbeats_and_framing(sdk, live_server, api_key, settings):
    settings.MANGO_SSE_HEARTBEAT_SECONDS = 0.3
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    env = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    headers = {"authorization": f"Bearer {api_key}", "accept": "application/json"}
    url = f"{live_server.url}/v1/sessions/{session.id}/events/stream"
    with requests.get(url, headers=headers, stream=True, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines, started = [], time.monotonic()
        for line in response.iter_lines(chunk_size=1, decode_unicode=True):
            lines.append(line)
            if lines.count("event: ping") >= 2:
                break
        assert time.monotonic() - started < 3
    assert 'data: {"type":"ping"}' in lines

    # Every message carries an `event:` line naming its type, and `type` inside data.
    with requests.get(url, headers=headers, stream=True, timeout=10) as response:
        sdk.beta.sessions.events.send(session.id, events=[{"type": "user.interrupt"}])
        block = []
        for line in response.iter_lines(chunk_size=1, decode_unicode=True):
            if line.startswith("event: user.interrupt"):
                block.append(line)
            elif block:
                block.append(line)
                break
    assert block[0] == "event: user.interrupt"
    assert json.loads(block[1].removeprefix("data: "))["type"] == "user.interrupt"

    # Streams of unknown or foreign sessions are 404s.
    missing = requests.get(f"{live_server.url}/v1/sessions/sesn_missing/events/stream", headers=headers)
    assert missing.status_code == 404
