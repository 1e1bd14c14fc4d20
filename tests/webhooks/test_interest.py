"""webhooks.interest: "this workspace has no endpoint" is known from a Redis flag, never wrongly —
an endpoint created, enabled, disabled or deleted through the API or the admin's services is seen
by the next event of its workspace; Redis unreachable falls back to the database."""

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.services.events import events_append
from tests.factories import make_session
from webhooks.interest import KEY_PREFIX, workspace_subscribed
from webhooks.models import WebhookDelivery
from webhooks.services import endpoints_set_disabled

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/v1/mango/webhook_endpoints"
URL = "https://hooks.example.invalid/in"
RUNNING = {"type": "session.status_running", "payload": {}}


def _flag(workspace_id: str) -> bytes | None:
    return redis.Redis.from_url(settings.REDIS_URL).get(f"{KEY_PREFIX}{workspace_id}")


def _event_rows(session) -> int:
    events_append(session_id=session.id, items=[RUNNING])
    return WebhookDelivery.objects.filter(body__contains=session.id, event_type="session.running").count()


def test_the_flag_follows_the_endpoints(api, api_key):
    workspace = api_key.workspace
    session = make_session(workspace)
    assert _event_rows(session) == 0 and _flag(workspace.id) == b"0"
    with CaptureQueriesContext(connection) as queries:
        events_append(session_id=session.id, items=[RUNNING])
    assert not [q for q in queries.captured_queries if "webhooks_" in q["sql"]]

    created = api.post(BASE, {"url": URL}, content_type="application/json").json()
    assert _flag(workspace.id) == b"1"
    assert _event_rows(session) == 1

    api.post(f"{BASE}/{created['id']}", {"disabled": True}, content_type="application/json")
    assert _flag(workspace.id) is None  # not known: the next event reads the database
    assert _event_rows(session) == 1 and _flag(workspace.id) == b"0"

    endpoints_set_disabled(endpoint_ids=[created["id"]], disabled=False)  # the admin's enable
    assert _flag(workspace.id) == b"1" and _event_rows(session) == 2

    endpoints_set_disabled(endpoint_ids=[created["id"]], disabled=True, reason="disabled in the admin")
    assert _flag(workspace.id) is None and _event_rows(session) == 2

    api.post(f"{BASE}/{created['id']}", {"disabled": False}, content_type="application/json")
    assert _event_rows(session) == 3
    assert api.delete(f"{BASE}/{created['id']}").status_code == 200
    assert _flag(workspace.id) is None and workspace_subscribed(workspace_id=workspace.id) is False


def test_a_stale_no_is_overwritten_by_a_creation_and_redis_down_reads_the_database(api, api_key, settings):
    workspace = api_key.workspace
    session = make_session(workspace)
    # An event that read "no endpoint" before a creation committed stores its "0" only if the
    # creation has not set "1" yet (SET NX): here the creation comes after and overwrites it.
    assert workspace_subscribed(workspace_id=workspace.id) is False
    api.post(BASE, {"url": URL}, content_type="application/json")
    assert _flag(workspace.id) == b"1" and _event_rows(session) == 1

    # Redis unreachable: the gate answers "maybe" and the outbox reads the database as before.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert workspace_subscribed(workspace_id=workspace.id) is True
    assert _event_rows(session) == 2
    created = api.post(BASE, {"url": URL}, content_type="application/json")
    assert created.status_code == 503  # an endpoint is not enabled behind a flag it cannot set
