"""Each workspace's share of an API process's threads (core.shares), on the real serving layout
(gunicorn + one uvicorn worker running config.asgi): a tenant holding its places has its further
requests wait on the event loop and then refused with 429, while another workspace, the probes
and the tenant itself once a place frees are served. Large bodies have a byte budget per process
that small requests never wait for."""

import json
import socket
import threading
import time

import pytest
import requests

from tests.files.server import AsgiServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

MAX_REQUESTS = 2
WAIT_SECONDS = 3
BODY_BUDGET = 3 * 1024 * 1024
LARGE = 2 * 1024 * 1024


@pytest.fixture
def server(tmp_path, s3_bucket):
    env = {
        "MANGO_WORKSPACE_MAX_REQUESTS": str(MAX_REQUESTS),
        "MANGO_WORKSPACE_MAX_WAITING_REQUESTS": "1",
        "MANGO_WORKSPACE_REQUEST_WAIT_SECONDS": str(WAIT_SECONDS),
        "MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS": "30",
        "MANGO_LARGE_BODIES_BUDGET_BYTES": str(BODY_BUDGET),
    }
    server = AsgiServer(log_path=tmp_path / "asgi.log", env=env).start()
    yield server
    server.stop()


class SlowCreate:
    """POST /v1/environments whose JSON body arrives a byte at a time (leading whitespace), so
    the request holds its thread until finish()."""

    BODY = b'{"name": "slow"}'

    def __init__(self, server, key, *, padding: int = 200):
        self.padding, self.sent = padding, 0
        # trickle() runs in another thread, and may be due while finish() runs: they take turns,
        # and once finished nothing more is sent (else a stray byte follows the whole body).
        self._lock = threading.Lock()
        self._finished = False
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        self.sock.sendall(
            (
                f"POST /v1/environments HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {padding + len(self.BODY)}\r\n\r\n"
            ).encode()
        )

    def send_padding(self, count: int) -> None:
        self.sock.sendall(b" " * count)
        self.sent += count

    def trickle(self) -> None:
        with self._lock:
            if not self._finished and self.sent < self.padding - 1:
                self.sock.sendall(b" ")
                self.sent += 1

    def finish(self) -> int:
        with self._lock:  # exactly Content-Length bytes in all
            self._finished = True
            self.sock.sendall(b" " * (self.padding - self.sent) + self.BODY)
        head = b""
        while b"\r\n\r\n" not in head and (chunk := self.sock.recv(4096)):
            head += chunk
        self.sock.close()
        self.response_head = head
        return int(head.split(b" ", 2)[1])


def _get(server, key, path="/v1/files") -> requests.Response:
    return requests.get(f"{server.url}{path}", headers={"x-api-key": str(key)}, timeout=60)


def test_a_tenant_at_its_share_waits_then_gets_429_while_others_are_served(server, api_key, other_api_key):
    slow = [SlowCreate(server, api_key) for _ in range(MAX_REQUESTS)]
    stop = threading.Event()

    def trickle():  # a byte now and then: slow, never idle
        while not stop.wait(0.3):
            for request in slow:
                request.trickle()

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        # Once both slow requests hold alpha's places, a third waits out the queue and is refused.
        # A 429 at once means the one waiting place was taken: by a slow request that arrived
        # while a probe held a place, until that place is handed over to it. Try again then.
        deadline = time.monotonic() + 30
        while True:
            started = time.monotonic()
            refused = _get(server, api_key)
            waited_for = time.monotonic() - started
            if refused.status_code == 429 and waited_for < WAIT_SECONDS * 0.9 and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if refused.status_code == 429 or time.monotonic() > deadline:
                break
            assert refused.status_code == 200
        assert refused.status_code == 429, refused.text
        assert waited_for >= WAIT_SECONDS * 0.9  # it waited on the loop first
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["retry-after"].isdigit()
        assert refused.headers["request-id"].startswith("req_")

        # Another workspace and the probes are served meanwhile.
        assert _get(server, other_api_key).status_code == 200
        assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200

        # A waiting request takes over the first place that frees.
        waited = {}
        waiter = threading.Thread(target=lambda: waited.update(response=_get(server, api_key)))
        waiter.start()
        time.sleep(0.5)  # it is queued (alpha's places are still held)
        assert slow[0].finish() == 200, slow[0].response_head
        waiter.join(30)
        assert waited["response"].status_code == 200
    finally:
        stop.set()
        trickler.join()
    assert slow[1].finish() == 200, slow[1].response_head
    assert _get(server, api_key).status_code == 200
    # Requests without a valid key share one bucket and still get Django's 401 envelope.
    unauthorized = requests.get(f"{server.url}/v1/files", headers={"x-api-key": "sk-nope"}, timeout=30)
    assert unauthorized.status_code == 401
    assert json.loads(unauthorized.text)["error"]["type"] == "authentication_error"


def test_large_bodies_wait_for_the_process_budget_and_small_requests_do_not(server, api_key, other_api_key):
    big = SlowCreate(server, api_key, padding=LARGE)
    big.send_padding(LARGE - 10)  # all but the last bytes: it holds LARGE of the 3 MiB budget
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.3):
            big.trickle()

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    body = b" " * LARGE + SlowCreate.BODY
    headers = {"x-api-key": str(other_api_key), "content-type": "application/json"}
    try:
        deadline = time.monotonic() + 30
        while True:  # once the held body has its bytes, another large one waits its time, then 429
            started = time.monotonic()
            refused = requests.post(f"{server.url}/v1/environments", data=body, headers=headers, timeout=60)
            # (An instant 429 means the one-place queue was still taken, e.g. by the held body
            # itself before it got its bytes: try again.)
            if refused.status_code == 429 and time.monotonic() - started >= WAIT_SECONDS * 0.9:
                break
            assert time.monotonic() < deadline, refused.text
        assert "large request bodies" in refused.json()["error"]["message"]
        # Small requests, of either workspace, do not wait for the budget.
        small = requests.post(f"{server.url}/v1/environments", json={"name": "small"}, headers=headers, timeout=30)
        assert small.status_code == 200
        assert _get(server, api_key).status_code == 200
    finally:
        stop.set()
        trickler.join()
    assert big.finish() == 200, big.response_head
    accepted = requests.post(f"{server.url}/v1/environments", data=body, headers=headers, timeout=60)
    assert accepted.status_code == 200, accepted.text
