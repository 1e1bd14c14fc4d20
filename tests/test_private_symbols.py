"""Every private or undocumented symbol of another library that the serving layer (config/) still
relies on, checked against the installed version: an upgrade that renames or drops one fails here,
naming it and the module of ours that needs it, instead of breaking uploads or downloads at run
time. Each such library is pinned (requirements-runtime.txt) to the version checked here.

The apps use none (the import contracts in .importlinter keep them from importing a server);
the signed object-store backend uses botocore's public signer and boto3's public credentials.
Outside the serving layer: the worker's broker-reconnect guards (config/celery.py) and the
database pool's reconnect interval (core/database.py), both for dependency outages.
"""

import inspect
import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# library (distribution name) -> the modules of ours that reach into it
LIBRARIES = {
    "uvicorn": "config/uvicorn.py",
    "uvicorn-worker": "config/uvicorn.py",
    "httptools": "config/uvicorn.py",
    "gunicorn": "config/bodies.py",
    "a2wsgi": "config/asgi.py, config/downloads.py",
    "celery": "config/celery.py",
    "kombu": "config/celery.py",
    "psycopg-pool": "core/database.py",
}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-runtime.txt").read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line.strip())
        if found:
            pins[found.group(1).lower()] = found.group(3)
    return pins


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_each_library_is_pinned_to_the_checked_version(library):
    pins = _pins()
    assert library in pins, (
        f"{library} (used privately by {LIBRARIES[library]}) must be pinned with == in requirements-runtime.txt"
    )
    installed = metadata.version(library)
    assert installed == pins[library], (
        f"{library} {installed} is installed but {pins[library]} is pinned: re-check the private symbols "
        f"{LIBRARIES[library]} uses (this file) before moving the pin"
    )


def _sets(cls, attribute: str) -> bool:
    """Whether the class (or a base of it) assigns self.<attribute> anywhere in its source."""
    pattern = re.compile(rf"self\.{re.escape(attribute)}\s*(:[^=\n]*)?=[^=]")
    return any(pattern.search(inspect.getsource(klass)) for klass in cls.__mro__ if klass is not object)


def _check(owner, names, *, user: str, kind: str = "attribute") -> None:
    missing = [name for name in names if not (hasattr(owner, name) or (isinstance(owner, type) and _sets(owner, name)))]
    assert not missing, (
        f"{owner.__module__}.{owner.__qualname__} no longer has the {kind}(s) {missing} that {user} relies on: "
        "the library changed; adapt that module (or move the pin back)"
    )


def test_uvicorn_protocol_and_cycle():
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

    user = "config/uvicorn.py (EnvelopeHttpToolsProtocol, BodySocket, SpliceSink)"
    _check(
        HttpToolsProtocol,
        [
            "_start_asgi_task",
            "_unset_keepalive_if_required",
            "on_body",
            "on_message_begin",
            "on_headers_complete",
            "on_response_complete",
            "send_400_response",
            "data_received",
            "cycle",
            "transport",
            "flow",
            "parser",
            "scheme",
            "loop",
            "server_state",
        ],
        user=user,
    )
    _check(
        RequestResponseCycle,
        [
            "body",
            "more_body",
            "response_started",
            "chunked_encoding",
            "transport",
            "disconnected",
            "waiting_for_100_continue",
            "message_event",
            "expected_content_length",
            "scope",
            "send",
            "receive",
        ],
        user=user,
    )
    _check(FlowControl, ["pause_reading", "resume_reading"], user=user)
    start = inspect.signature(HttpToolsProtocol._start_asgi_task)
    assert list(start.parameters)[1:] == ["cycle", "app"], (
        f"uvicorn's HttpToolsProtocol._start_asgi_task{start} changed: config/uvicorn.py overrides it"
    )


def test_uvicorn_server_and_worker():
    from uvicorn.server import Server, ServerState
    from uvicorn_worker import UvicornWorker

    _check(ServerState, ["default_headers"], user="config/uvicorn.py (_send_error)")
    _check(Server, ["servers", "started", "shutdown"], user="config/uvicorn.py (StreamEndingServer)")
    assert "sockets" in inspect.signature(Server.shutdown).parameters, "uvicorn Server.shutdown(sockets) changed"
    _check(
        UvicornWorker,
        ["_serve", "_install_sigquit_handler", "CONFIG_KWARGS", "config", "wsgi", "sockets"],
        user="config/uvicorn.py (MangoUvicornWorker)",
    )


def test_httptools_parser_leniency():
    import httptools

    parser = httptools.HttpRequestParser(object())
    assert hasattr(parser, "set_dangerous_leniencies"), (
        "httptools.HttpRequestParser.set_dangerous_leniencies is gone: config/uvicorn.py's new_parser uses it"
    )


def test_gunicorn_body_reader():
    from gunicorn.http.body import Body, LengthReader
    from gunicorn.http.unreader import SocketUnreader

    user = "config/bodies.py (GunicornSocketBody)"
    _check(Body, ["reader", "buf", "failed"], user=user)
    _check(LengthReader, ["unreader", "length"], user=user)
    _check(SocketUnreader, ["sock", "buf"], user=user)


def test_a2wsgi_environ_and_executor():
    from a2wsgi import WSGIMiddleware
    from a2wsgi.wsgi import Body, build_environ

    assert list(inspect.signature(build_environ).parameters) == ["scope", "body"], (
        "a2wsgi.wsgi.build_environ(scope, body) changed: config/downloads.py builds a download's environ with it"
    )
    assert list(inspect.signature(Body).parameters) == ["loop", "receive"], (
        "a2wsgi.wsgi.Body(loop, receive) changed: config/downloads.py builds a download's body with it"
    )
    assert "asgi.scope" in inspect.getsource(build_environ), (
        "a2wsgi's environ no longer carries asgi.scope: config/bodies.py (UploadBodies) finds the receive there"
    )
    parameters = inspect.signature(WSGIMiddleware).parameters
    assert {"workers", "send_queue_size"} <= set(parameters), (
        "a2wsgi.WSGIMiddleware(workers=, send_queue_size=) changed"
    )
    _check(WSGIMiddleware, ["executor"], user="config/asgi.py (downloads run on api_app.executor)")


def test_celery_consumer_reconnect_and_kombu_redis_channel():
    import kombu
    from celery.worker.consumer import Consumer
    from kombu.transport import redis as kombu_redis

    user = "config/celery.py (Consumer, RedisChannel, RedisTransport)"
    _check(Consumer, ["ensure_connected", "on_connection_error_after_connected", "connection"], user=user)
    assert list(inspect.signature(Consumer.ensure_connected).parameters) == ["self", "conn"], user
    internal = inspect.signature(kombu.Connection._ensure_connection)
    assert {"interval_start", "interval_step", "interval_max"} <= set(internal.parameters), user
    _check(kombu_redis.Channel, ["basic_ack", "basic_reject", "closed", "_create_client", "pool"], user=user)
    assert list(inspect.signature(kombu_redis.Channel._create_client).parameters) == ["self", "asynchronous"], user
    assert kombu_redis.Transport.Channel is kombu_redis.Channel, user


def test_psycopg_pool_reconnect_backoff():
    from psycopg_pool.base import AttemptWithBackoff

    user = "core/database.py (pool_retry_constant)"
    _check(AttemptWithBackoff, ["INITIAL_DELAY", "DELAY_BACKOFF", "update_delay"], user=user)
    attempt = AttemptWithBackoff(timeout=300)
    delays = []
    for _ in range(6):
        attempt.update_delay(0.0)
        delays.append(attempt.delay)
    # As set at start by core.apps: about a second each time (jitter), never growing.
    assert max(delays) < 1.2, (user, delays)
