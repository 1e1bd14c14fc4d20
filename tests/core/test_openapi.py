"""/openapi.json: valid OpenAPI 3 JSON describing all its operations (OPERATIONS) with request and response
schemas, both API-key schemes and the error envelope; and every operation, replayed, answers
as documented (tests/openapi.py checks each response)."""

import base64
import io
import json

import pytest
from django.test import Client
from openapi_spec_validator import validate

from files import services
from sessions.queue.services import environment_key_create
from tests import openapi
from webhooks.services import webhook_event_emit

pytestmark = pytest.mark.django_db

OPERATIONS = {
    ("get", "/v1/models"): "models_list",
    ("get", "/v1/models/{model_id}"): "models_retrieve",
    ("get", "/v1/files"): "files_list",
    ("post", "/v1/files"): "files_upload",
    ("get", "/v1/files/{file_id}"): "files_retrieve_metadata",
    ("delete", "/v1/files/{file_id}"): "files_delete",
    ("get", "/v1/files/{file_id}/content"): "files_download",
    ("get", "/v1/agents"): "agents_list",
    ("post", "/v1/agents"): "agents_create",
    ("get", "/v1/agents/{agent_id}"): "agents_retrieve",
    ("post", "/v1/agents/{agent_id}"): "agents_update",
    ("post", "/v1/agents/{agent_id}/archive"): "agents_archive",
    ("get", "/v1/agents/{agent_id}/versions"): "agents_versions_list",
    ("get", "/v1/environments"): "environments_list",
    ("post", "/v1/environments"): "environments_create",
    ("get", "/v1/environments/{environment_id}"): "environments_retrieve",
    ("post", "/v1/environments/{environment_id}"): "environments_update",
    ("delete", "/v1/environments/{environment_id}"): "environments_delete",
    ("post", "/v1/environments/{environment_id}/archive"): "environments_archive",
    ("get", "/v1/environments/{environment_id}/work"): "environments_work_list",
    ("get", "/v1/environments/{environment_id}/work/poll"): "environments_work_poll",
    ("get", "/v1/environments/{environment_id}/work/stats"): "environments_work_stats",
    ("get", "/v1/environments/{environment_id}/work/{work_id}"): "environments_work_retrieve",
    ("post", "/v1/environments/{environment_id}/work/{work_id}"): "environments_work_update",
    ("post", "/v1/environments/{environment_id}/work/{work_id}/ack"): "environments_work_ack",
    ("post", "/v1/environments/{environment_id}/work/{work_id}/heartbeat"): "environments_work_heartbeat",
    ("post", "/v1/environments/{environment_id}/work/{work_id}/stop"): "environments_work_stop",
    ("get", "/v1/sessions"): "sessions_list",
    ("post", "/v1/sessions"): "sessions_create",
    ("get", "/v1/sessions/{session_id}"): "sessions_retrieve",
    ("post", "/v1/sessions/{session_id}"): "sessions_update",
    ("delete", "/v1/sessions/{session_id}"): "sessions_delete",
    ("post", "/v1/sessions/{session_id}/archive"): "sessions_archive",
    ("get", "/v1/sessions/{session_id}/events"): "sessions_events_list",
    ("post", "/v1/sessions/{session_id}/events"): "sessions_events_send",
    ("get", "/v1/sessions/{session_id}/events/stream"): "sessions_events_stream",
    ("get", "/v1/sessions/{session_id}/resources"): "sessions_resources_list",
    ("post", "/v1/sessions/{session_id}/resources"): "sessions_resources_add",
    ("get", "/v1/sessions/{session_id}/resources/{resource_id}"): "sessions_resources_retrieve",
    ("post", "/v1/sessions/{session_id}/resources/{resource_id}"): "sessions_resources_update",
    ("delete", "/v1/sessions/{session_id}/resources/{resource_id}"): "sessions_resources_delete",
    ("get", "/v1/sessions/{session_id}/threads"): "sessions_threads_list",
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}"): "sessions_threads_retrieve",
    ("post", "/v1/sessions/{session_id}/threads/{thread_id}/archive"): "sessions_threads_archive",
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}/events"): "sessions_threads_events_list",
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}/stream"): "sessions_threads_stream",
    ("get", "/v1/skills"): "skills_list",
    ("post", "/v1/skills"): "skills_create",
    ("get", "/v1/skills/{skill_id}"): "skills_retrieve",
    ("delete", "/v1/skills/{skill_id}"): "skills_delete",
    ("get", "/v1/skills/{skill_id}/versions"): "skills_versions_list",
    ("post", "/v1/skills/{skill_id}/versions"): "skills_versions_create",
    ("get", "/v1/skills/{skill_id}/versions/{version}"): "skills_versions_retrieve",
    ("delete", "/v1/skills/{skill_id}/versions/{version}"): "skills_versions_delete",
    ("get", "/v1/skills/{skill_id}/versions/{version}/content"): "skills_versions_download",
    ("get", "/v1/memory_stores"): "memory_stores_list",
    ("post", "/v1/memory_stores"): "memory_stores_create",
    ("get", "/v1/memory_stores/{memory_store_id}"): "memory_stores_retrieve",
    ("post", "/v1/memory_stores/{memory_store_id}"): "memory_stores_update",
    ("delete", "/v1/memory_stores/{memory_store_id}"): "memory_stores_delete",
    ("post", "/v1/memory_stores/{memory_store_id}/archive"): "memory_stores_archive",
    ("get", "/v1/memory_stores/{memory_store_id}/memories"): "memory_stores_memories_list",
    ("post", "/v1/memory_stores/{memory_store_id}/memories"): "memory_stores_memories_create",
    ("get", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): "memory_stores_memories_retrieve",
    ("post", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): "memory_stores_memories_update",
    ("delete", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): "memory_stores_memories_delete",
    ("get", "/v1/memory_stores/{memory_store_id}/memory_versions"): "memory_stores_memory_versions_list",
    (
        "get",
        "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}",
    ): "memory_stores_memory_versions_retrieve",
    (
        "post",
        "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact",
    ): "memory_stores_memory_versions_redact",
    ("get", "/v1/vaults"): "vaults_list",
    ("post", "/v1/vaults"): "vaults_create",
    ("get", "/v1/vaults/{vault_id}"): "vaults_retrieve",
    ("post", "/v1/vaults/{vault_id}"): "vaults_update",
    ("delete", "/v1/vaults/{vault_id}"): "vaults_delete",
    ("post", "/v1/vaults/{vault_id}/archive"): "vaults_archive",
    ("get", "/v1/vaults/{vault_id}/credentials"): "vaults_credentials_list",
    ("post", "/v1/vaults/{vault_id}/credentials"): "vaults_credentials_create",
    ("get", "/v1/vaults/{vault_id}/credentials/{credential_id}"): "vaults_credentials_retrieve",
    ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}"): "vaults_credentials_update",
    ("delete", "/v1/vaults/{vault_id}/credentials/{credential_id}"): "vaults_credentials_delete",
    ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}/archive"): "vaults_credentials_archive",
    (
        "post",
        "/v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate",
    ): "vaults_credentials_mcp_oauth_validate",
    ("get", "/v1/deployments"): "deployments_list",
    ("post", "/v1/deployments"): "deployments_create",
    ("get", "/v1/deployments/{deployment_id}"): "deployments_retrieve",
    ("post", "/v1/deployments/{deployment_id}"): "deployments_update",
    ("post", "/v1/deployments/{deployment_id}/archive"): "deployments_archive",
    ("post", "/v1/deployments/{deployment_id}/pause"): "deployments_pause",
    ("post", "/v1/deployments/{deployment_id}/unpause"): "deployments_unpause",
    ("post", "/v1/deployments/{deployment_id}/run"): "deployments_run",
    ("get", "/v1/deployment_runs"): "deployment_runs_list",
    ("get", "/v1/deployment_runs/{deployment_run_id}"): "deployment_runs_retrieve",
    ("get", "/v1/dreams"): "dreams_list",
    ("post", "/v1/dreams"): "dreams_create",
    ("get", "/v1/dreams/{dream_id}"): "dreams_retrieve",
    ("post", "/v1/dreams/{dream_id}/archive"): "dreams_archive",
    ("post", "/v1/dreams/{dream_id}/cancel"): "dreams_cancel",
    ("get", "/v1/mango/webhook_endpoints"): "webhook_endpoints_list",
    ("post", "/v1/mango/webhook_endpoints"): "webhook_endpoints_create",
    ("get", "/v1/mango/webhook_endpoints/{endpoint_id}"): "webhook_endpoints_retrieve",
    ("post", "/v1/mango/webhook_endpoints/{endpoint_id}"): "webhook_endpoints_update",
    ("delete", "/v1/mango/webhook_endpoints/{endpoint_id}"): "webhook_endpoints_delete",
    ("post", "/v1/mango/webhook_endpoints/{endpoint_id}/rotate_secret"): "webhook_endpoints_rotate_secret",
    ("post", "/v1/mango/webhook_endpoints/{endpoint_id}/replay"): "webhook_endpoints_replay",
    ("get", "/v1/mango/webhook_endpoints/{endpoint_id}/deliveries"): "webhook_deliveries_list",
    ("get", "/v1/mango/webhook_endpoints/{endpoint_id}/deliveries/{delivery_id}"): "webhook_deliveries_retrieve",
}
BODYLESS = {
    "files_download",
    "agents_archive",
    "environments_archive",
    "environments_work_ack",
    "environments_work_heartbeat",
    "sessions_archive",
    "memory_stores_archive",
    "memory_stores_memory_versions_redact",
    "sessions_threads_archive",
    "vaults_archive",
    "vaults_credentials_archive",
    "vaults_credentials_mcp_oauth_validate",
    "deployments_archive",
    "deployments_pause",
    "deployments_unpause",
    "deployments_run",
    "dreams_archive",
    "dreams_cancel",
}


@pytest.fixture(scope="module")
def served(django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/openapi.json")
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] in ("application/json", "application/vnd.oai.openapi+json")
    return json.loads(response.content)


def test_document_is_valid_openapi_3(served):
    validate(served)
    assert served["openapi"].startswith("3.")


def test_every_operation_is_described(served):
    found = {
        (method, path): operation["operationId"]
        for path, operations in served["paths"].items()
        for method, operation in operations.items()
    }
    assert found == OPERATIONS
    assert len(found) == len(OPERATIONS)
    schemes = served["components"]["securitySchemes"]
    assert schemes["ApiKeyAuth"] == {"type": "apiKey", "in": "header", "name": "x-api-key"}
    assert schemes["BearerAuth"]["type"] == "http" and schemes["BearerAuth"]["scheme"] == "bearer"
    for (method, path), operation_id in OPERATIONS.items():
        operation = served["paths"][path][method]
        assert operation["security"] == [{"ApiKeyAuth": []}, {"BearerAuth": []}], operation_id
        for status in ("400", "401", "404", "500"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}, (operation_id, status)
        success = [status for status in operation["responses"] if status.startswith("2")]
        assert success, operation_id
        for status in success:
            content = operation["responses"][status]["content"]
            assert all(media.get("schema") for media in content.values()), (operation_id, status)
        if method == "post" and operation_id not in BODYLESS:
            assert operation["requestBody"]["content"], operation_id
    # What DELETE /v1/files/{id} really returns: 200 with {id, type: file_deleted}.
    deleted = served["paths"]["/v1/files/{file_id}"]["delete"]["responses"]
    assert "200" in deleted and "204" not in deleted
    error = served["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"type", "error", "request_id"}


def _post(api, path, body=None):
    return api.post(path, json.dumps(body) if body is not None else "", content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_every_operation_replayed_answers_as_documented(api, api_key, s3_bucket):
    """One call per operation through the full middleware stack; tests/openapi.py validates each
    response against the document (a departure fails this test in teardown)."""
    openapi.checked.clear()
    handle = io.BytesIO(b"hello")
    handle.name = "a.txt"
    upload = api.post("/v1/files", {"file": handle})
    assert upload.status_code == 200, upload.content
    file_id = upload.json()["id"]
    assert api.get("/v1/files").status_code == 200
    assert api.get(f"/v1/files/{file_id}").status_code == 200
    assert api.get("/v1/models?limit=2").status_code == 200
    assert api.get("/v1/models/claude-sonnet-4-5").status_code == 200

    agent = _post(api, "/v1/agents", {"name": "a", "model": "claude-sonnet-4-5", "tools": [
        {"type": "agent_toolset_20260401"},
        {"type": "custom", "name": "t", "description": "d", "input_schema": {"type": "object"}},
    ]}).json()  # fmt: skip
    assert api.get("/v1/agents").status_code == 200
    assert api.get(f"/v1/agents/{agent['id']}").status_code == 200
    assert _post(api, f"/v1/agents/{agent['id']}", {"version": 1, "system": "s"}).status_code == 200
    assert api.get(f"/v1/agents/{agent['id']}/versions").status_code == 200

    env = _post(api, "/v1/environments", {"name": "e", "metadata": {"k": "v"}}).json()
    spare = _post(api, "/v1/environments", {"name": "spare"}).json()
    assert api.get("/v1/environments").status_code == 200
    assert api.get(f"/v1/environments/{env['id']}").status_code == 200
    assert _post(api, f"/v1/environments/{env['id']}", {"description": "d"}).status_code == 200
    assert _post(api, f"/v1/environments/{spare['id']}/archive").status_code == 200
    assert api.delete(f"/v1/environments/{spare['id']}").status_code == 200

    session = _post(api, "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"], "title": "t"}).json()
    sid = session["id"]
    assert api.get("/v1/sessions").status_code == 200
    assert api.get(f"/v1/sessions/{sid}").status_code == 200
    assert _post(api, f"/v1/sessions/{sid}", {"metadata": {"k": "v"}}).status_code == 200
    sent = _post(
        api,
        f"/v1/sessions/{sid}/events",
        {"events": [{"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}}]},
    )
    assert sent.status_code == 200, sent.content
    assert api.get(f"/v1/sessions/{sid}/events").status_code == 200

    resource = _post(api, f"/v1/sessions/{sid}/resources", {"type": "file", "file_id": file_id})
    assert resource.status_code == 200, resource.content
    rid = resource.json()["id"]
    assert api.get(f"/v1/sessions/{sid}/resources").status_code == 200
    assert api.get(f"/v1/sessions/{sid}/resources/{rid}").status_code == 200
    assert _post(api, f"/v1/sessions/{sid}/resources/{rid}", {}).status_code == 400
    assert api.delete(f"/v1/sessions/{sid}/resources/{rid}").status_code == 200

    # The stream closes its database connection while it waits (hence a transactional test).
    stream = api.get(f"/v1/sessions/{sid}/events/stream")
    assert stream.status_code == 200
    stream.close()
    thread = api.get(f"/v1/sessions/{sid}/threads").json()["data"][0]["id"]
    assert api.get(f"/v1/sessions/{sid}/threads/{thread}").status_code == 200
    assert api.get(f"/v1/sessions/{sid}/threads/{thread}/events").status_code == 200
    assert _post(api, f"/v1/sessions/{sid}/threads/{thread}/archive").status_code == 400
    thread_stream = api.get(f"/v1/sessions/{sid}/threads/{thread}/stream")
    assert thread_stream.status_code == 200
    thread_stream.close()
    assert _post(api, f"/v1/sessions/{sid}/archive").status_code == 200

    deployment = _post(api, "/v1/deployments", {
        "agent": agent["id"], "environment_id": env["id"], "name": "d",
        "initial_events": [{"type": "user.message", "content": [{"type": "text", "text": "go"}]}],
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Paris"},
    })  # fmt: skip
    assert deployment.status_code == 200, deployment.content
    did = deployment.json()["id"]
    assert api.get("/v1/deployments").status_code == 200
    assert api.get(f"/v1/deployments/{did}").status_code == 200
    assert _post(api, f"/v1/deployments/{did}", {"description": "nightly"}).status_code == 200
    assert _post(api, f"/v1/deployments/{did}/pause").status_code == 200
    assert _post(api, f"/v1/deployments/{did}/unpause").status_code == 200
    run = _post(api, f"/v1/deployments/{did}/run")
    assert run.status_code == 200, run.content
    assert api.get("/v1/deployment_runs").status_code == 200
    assert api.get(f"/v1/deployment_runs/{run.json()['id']}").status_code == 200
    assert _post(api, f"/v1/deployments/{did}/archive").status_code == 200
    dream_store = _post(api, "/v1/memory_stores", {"name": "dreamt"}).json()["id"]
    dream = _post(api, "/v1/dreams", {
        "inputs": [
            {"type": "memory_store", "memory_store_id": dream_store}, {"type": "sessions", "session_ids": [sid]},
        ],
        "model": "claude-sonnet-4-5",
    })  # fmt: skip
    assert dream.status_code == 200, dream.content
    drm = dream.json()["id"]
    assert api.get("/v1/dreams").status_code == 200
    assert api.get(f"/v1/dreams/{drm}").status_code == 200
    assert _post(api, f"/v1/dreams/{drm}/cancel").status_code == 200
    assert _post(api, f"/v1/dreams/{drm}/archive").status_code == 200
    assert _post(api, f"/v1/agents/{agent['id']}/archive").status_code == 200
    assert api.delete(f"/v1/sessions/{sid}").status_code == 200
    # Uploads are not downloadable (a 400, checked like any response); a session output is.
    assert api.get(f"/v1/files/{file_id}/content").status_code == 400
    output = services.file_upload_stream(
        workspace=api_key.workspace, chunks=[b"out"], filename="o.txt", mime_type="text/plain", downloadable=True
    )
    assert api.get(f"/v1/files/{output.id}/content").status_code == 200
    assert api.delete(f"/v1/files/{file_id}").status_code == 200

    skill_md = b"---\nname: probe\ndescription: A probe.\n---\n"

    def skill_upload(path):
        part = io.BytesIO(skill_md)
        part.name = "SKILL.md"
        # The test client names a part by its file's basename; a skill file's name is its path.
        body = (
            b'--b\r\nContent-Disposition: form-data; name="files[]"; filename="probe/SKILL.md"\r\n'
            b"Content-Type: text/markdown\r\n\r\n" + skill_md + b"\r\n--b--\r\n"
        )
        return api.post(path, body, content_type="multipart/form-data; boundary=b")

    skill = skill_upload("/v1/skills")
    assert skill.status_code == 200, skill.content
    skill_id, first = skill.json()["id"], skill.json()["latest_version_id"]
    assert api.get("/v1/skills").status_code == 200
    assert api.get(f"/v1/skills/{skill_id}").status_code == 200
    assert skill_upload(f"/v1/skills/{skill_id}/versions").status_code == 200
    assert api.get(f"/v1/skills/{skill_id}/versions").status_code == 200
    assert api.get(f"/v1/skills/{skill_id}/versions/{first}").status_code == 200
    assert api.get(f"/v1/skills/{skill_id}/versions/{first}/content").status_code == 200
    assert api.delete(f"/v1/skills/{skill_id}/versions/{first}").status_code == 200
    assert api.delete(f"/v1/skills/{skill_id}").status_code == 200

    store = _post(api, "/v1/memory_stores", {"name": "m", "metadata": {"k": "v"}})
    assert store.status_code == 200, store.content
    msid = store.json()["id"]
    assert api.get("/v1/memory_stores").status_code == 200
    assert api.get(f"/v1/memory_stores/{msid}").status_code == 200
    assert _post(api, f"/v1/memory_stores/{msid}", {"description": "d"}).status_code == 200
    memory = _post(api, f"/v1/memory_stores/{msid}/memories", {"path": "/a/b.md", "content": "one"}).json()
    first_version = memory["memory_version_id"]
    assert api.get(f"/v1/memory_stores/{msid}/memories?depth=1").status_code == 200
    assert api.get(f"/v1/memory_stores/{msid}/memories/{memory['id']}").status_code == 200
    changed = _post(api, f"/v1/memory_stores/{msid}/memories/{memory['id']}", {"content": "two"})
    assert changed.status_code == 200, changed.content
    assert api.get(f"/v1/memory_stores/{msid}/memory_versions").status_code == 200
    assert api.get(f"/v1/memory_stores/{msid}/memory_versions/{first_version}").status_code == 200
    assert _post(api, f"/v1/memory_stores/{msid}/memory_versions/{first_version}/redact").status_code == 200
    assert api.delete(f"/v1/memory_stores/{msid}/memories/{memory['id']}").status_code == 200
    assert _post(api, f"/v1/memory_stores/{msid}/archive").status_code == 200
    assert api.delete(f"/v1/memory_stores/{msid}").status_code == 200

    # The self-hosted work queue: the worker's calls with the environment key and the item's token.
    hosted = _post(api, "/v1/environments", {"name": "h", "config": {"type": "self_hosted"}}).json()
    hid = hosted["id"]
    _, environment_key = environment_key_create(environment_id=hid)
    worker = Client(headers={"authorization": f"Bearer {environment_key}"})
    local = _post(api, "/v1/agents", {"name": "local", "model": "claude-sonnet-4-5"}).json()
    assert _post(api, "/v1/sessions", {"agent": local["id"], "environment_id": hid}).status_code == 200
    assert worker.get(f"/v1/environments/{hid}/work").status_code == 200
    assert api.get(f"/v1/environments/{hid}/work/stats").status_code == 200
    work = worker.get(f"/v1/environments/{hid}/work/poll?block_ms=1").json()
    assert worker.get(f"/v1/environments/{hid}/work/poll").json() is None
    token = json.loads(base64.urlsafe_b64decode(work["secret"] + "==="))["sessions_token"]
    item = Client(headers={"authorization": f"Bearer {token}"})
    assert _post(worker, f"/v1/environments/{hid}/work/{work['id']}/ack").status_code == 200
    beat = _post(item, f"/v1/environments/{hid}/work/{work['id']}/heartbeat?expected_last_heartbeat=NO_HEARTBEAT")
    assert beat.status_code == 200, beat.content
    assert (
        _post(item, f"/v1/environments/{hid}/work/{work['id']}/heartbeat?expected_last_heartbeat=x").status_code == 412
    )
    assert api.get(f"/v1/environments/{hid}/work/{work['id']}").status_code == 200
    assert _post(api, f"/v1/environments/{hid}/work/{work['id']}", {"metadata": {"k": "v"}}).status_code == 200
    assert _post(api, f"/v1/environments/{hid}/work/{work['id']}/stop", {"force": True}).status_code == 200
    vault = _post(api, "/v1/vaults", {"display_name": "v", "metadata": {"k": "v"}})
    assert vault.status_code == 200, vault.content
    vid = vault.json()["id"]
    assert api.get("/v1/vaults").status_code == 200
    assert api.get(f"/v1/vaults/{vid}").status_code == 200
    assert _post(api, f"/v1/vaults/{vid}", {"display_name": "w"}).status_code == 200
    oauth = {
        "type": "mcp_oauth",
        "mcp_server_url": "https://mcp.example.invalid/mcp",
        "access_token": "a",
        "refresh": {
            "client_id": "c",
            "refresh_token": "r",
            "token_endpoint": "https://auth.example.invalid/token",
            "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "s"},
        },
    }
    credential = _post(api, f"/v1/vaults/{vid}/credentials", {"auth": oauth})
    assert credential.status_code == 200, credential.content
    cid = credential.json()["id"]
    assert api.get(f"/v1/vaults/{vid}/credentials").status_code == 200
    assert api.get(f"/v1/vaults/{vid}/credentials/{cid}").status_code == 200
    assert _post(api, f"/v1/vaults/{vid}/credentials/{cid}", {"display_name": "c"}).status_code == 200
    assert _post(api, f"/v1/vaults/{vid}/credentials/{cid}/mcp_oauth_validate").status_code == 200
    assert _post(api, f"/v1/vaults/{vid}/credentials/{cid}/archive").status_code == 200
    assert api.delete(f"/v1/vaults/{vid}/credentials/{cid}").status_code == 200
    assert _post(api, f"/v1/vaults/{vid}/archive").status_code == 200
    assert api.delete(f"/v1/vaults/{vid}").status_code == 200

    hooks = "/v1/mango/webhook_endpoints"
    hook = _post(api, hooks, {"url": "https://hooks.example.invalid/in", "event_types": ["session.archived"]})
    assert hook.status_code == 200, hook.content
    hid = hook.json()["id"]
    assert api.get(hooks).status_code == 200
    assert api.get(f"{hooks}/{hid}").status_code == 200
    assert _post(api, f"{hooks}/{hid}", {"event_types": []}).status_code == 200
    assert _post(api, f"{hooks}/{hid}/rotate_secret", {}).status_code == 200
    webhook_event_emit(workspace_id=api_key.workspace.id, type="session.archived", object_id="sesn_x")
    deliveries = api.get(f"{hooks}/{hid}/deliveries").json()["data"]
    assert len(deliveries) == 1, deliveries
    assert api.get(f"{hooks}/{hid}/deliveries/{deliveries[0]['id']}").status_code == 200
    assert _post(api, f"{hooks}/{hid}/replay", {"delivery_id": deliveries[0]["id"]}).json() == {"scheduled": 1}
    assert api.delete(f"{hooks}/{hid}").status_code == 200

    seen = {" ".join(key.split()[:2]) for key in openapi.checked}
    expected = {f"{method.upper()} {path}" for method, path in OPERATIONS}
    assert seen >= expected, expected - seen
    assert not openapi.violations, openapi.violations


def test_what_the_services_require_the_document_states(served, api):
    """Validation lives in the serializers, so the schema states it: a session needs an agent and
    an environment, and a request without either is the 400 the document promises."""
    ref = served["paths"]["/v1/sessions"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = served["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert {"agent", "environment_id"} <= set(schema["required"])
    agent = _post(api, "/v1/agents", {"name": "a", "model": "claude-sonnet-4-5"}).json()
    for body, field in (({"agent": agent["id"]}, "environment_id"), ({"environment_id": "env_x"}, "agent")):
        response = _post(api, "/v1/sessions", body)
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["message"]
