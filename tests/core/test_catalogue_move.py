"""The catalogue models (agents, environments, vaults, memory stores, skills) moved out of the
sessions app (label agent_sessions) into apps of their own with state-only migrations: no table is
created, altered or dropped, and a database filled at the schema before the move keeps every row,
content type, permission and admin log entry, and answers the API as before."""

import io
import re
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from core.services import api_key_issue

BEFORE_THE_MOVE = [
    ("agent_sessions", "0011_vaults"),
    ("agents", None),
    ("vaults", None),
    ("memory", None),
    ("skills", None),
]
MOVES = {
    "agents": ["agent", "agentversion", "environment"],
    "vaults": ["vault", "vaultcredential"],
    "memory": ["memorystore", "memory", "memoryversion"],
    "skills": ["skill", "skillversion"],
}
AGENT_CONFIG = {
    "name": "mover",
    "model": {"id": "claude-sonnet-5-5", "speed": "standard"},
    "system": None,
    "description": None,
    "tools": [],
    "mcp_servers": [],
    "skills": [],
    "execution_identity": None,
    "multiagent": None,
    "metadata": {},
}
MOVED_MODELS = [name for names in MOVES.values() for name in names]
DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|TRUNCATE|RENAME)\b", re.I | re.M)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("app", "migration"),
    [("agents", "0001"), ("vaults", "0001"), ("memory", "0001"), ("skills", "0001"), ("agent_sessions", "0012")],
)
def test_the_move_runs_no_ddl(app, migration):
    out = io.StringIO()
    call_command("sqlmigrate", app, migration, stdout=out)
    sql = out.getvalue()
    assert "(no-op)" in sql
    assert not DDL.search(sql), sql


def _fill(apps) -> dict:
    """One row of every moved model, written with the models as they were before the move."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    Workspace = apps.get_model("core", "Workspace")
    workspace = Workspace.objects.create(name="before-the-move")
    model = lambda name: apps.get_model("agent_sessions", name)  # noqa: E731
    agent = model("Agent").objects.create(
        id="agent_moved", workspace=workspace, version=1, created_at=now, updated_at=now
    )
    model("AgentVersion").objects.create(agent=agent, version=1, created_at=now, config=AGENT_CONFIG)
    environment = model("Environment").objects.create(
        id="env_moved", workspace=workspace, name="moved", config={"type": "cloud"}, created_at=now, updated_at=now
    )
    vault = model("Vault").objects.create(
        id="vlt_moved", workspace=workspace, display_name="moved", created_at=now, updated_at=now
    )
    model("VaultCredential").objects.create(
        id="vcrd_moved",
        vault=vault,
        workspace=workspace,
        auth_type="static_bearer",
        mcp_server_url="https://mcp.example.com/mcp",
        auth={"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/mcp"},
        secret="not-read-here",
        created_at=now,
        updated_at=now,
    )
    store = model("MemoryStore").objects.create(
        id="memstore_moved", workspace=workspace, name="moved", created_at=now, updated_at=now
    )
    model("MemoryVersion").objects.create(
        id="memver_moved", store=store, memory_id="mem_moved", operation="created", path="/a.md", content="kept",
        content_sha256="0" * 64, content_size_bytes=4, created_at=now,
    )  # fmt: skip
    model("Memory").objects.create(
        id="mem_moved", store=store, path="/a.md", content="kept", content_sha256="0" * 64, content_size_bytes=4,
        version_id="memver_moved", created_at=now, updated_at=now,
    )  # fmt: skip
    skill = model("Skill").objects.create(
        id="skill_moved", workspace=workspace, display_name="Moved", name="moved", latest_version="1", created_at=now,
        updated_at=now,
    )  # fmt: skip
    model("SkillVersion").objects.create(
        skill=skill, version="1", name="moved", description="d", files=[], ready=True, created_at=now
    )
    session = model("Session").objects.create(
        id="sesn_moved",
        workspace=workspace,
        agent=agent,
        agent_version=1,
        agent_snapshot={"name": "mover"},
        environment_id=environment.id,
        environment_config={"type": "cloud"},
        created_at=now,
        updated_at=now,
    )
    # What the admin hangs on a model's content type: a permission and a log entry.
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    LogEntry = apps.get_model("admin", "LogEntry")
    User = apps.get_model("auth", "User")
    agent_type = ContentType.objects.get(app_label="agent_sessions", model="agent")
    permission = Permission.objects.get(content_type=agent_type, codename="change_agent")
    operator = User.objects.create(username="operator-before-the-move", is_staff=True)
    operator.user_permissions.add(permission)
    entry = LogEntry.objects.create(
        user=operator, content_type=agent_type, object_id=agent.id, object_repr="mover", action_flag=2, action_time=now
    )
    return {
        "workspace": workspace.id,
        "content_types": {
            model_name: ContentType.objects.get(app_label="agent_sessions", model=model_name).id
            for names in MOVES.values()
            for model_name in names
        },
        "permission": permission.id,
        "log_entry": entry.id,
        "operator": operator.id,
        "session": session.id,
    }


@pytest.mark.django_db(transaction=True)
def test_a_database_filled_before_the_move_keeps_every_row_permission_and_answer():
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Permission, User
    from django.contrib.contenttypes.models import ContentType

    from agents.models import Agent, AgentVersion, Environment
    from core.models import Workspace
    from memory.models import Memory, MemoryStore, MemoryVersion
    from sessions.models import Session
    from skills.models import Skill, SkillVersion
    from vaults.models import Vault, VaultCredential

    executor = MigrationExecutor(connection)
    state = executor.migrate(BEFORE_THE_MOVE)
    try:
        filled = _fill(state.apps)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    # Every row, read through the models where they live now.
    assert Agent.objects.get(id="agent_moved").workspace_id == filled["workspace"]
    assert AgentVersion.objects.get(agent_id="agent_moved").config["name"] == "mover"
    assert Environment.objects.get(id="env_moved").config == {"type": "cloud"}
    assert VaultCredential.objects.get(id="vcrd_moved").vault_id == Vault.objects.get(id="vlt_moved").id
    assert Memory.objects.get(id="mem_moved").content == "kept"
    assert MemoryVersion.objects.get(id="memver_moved").store_id == MemoryStore.objects.get(id="memstore_moved").id
    assert SkillVersion.objects.get(skill_id="skill_moved").ready is True
    assert Skill.objects.get(id="skill_moved").latest_version == "1"
    assert Session.objects.get(id=filled["session"]).agent.id == "agent_moved"

    # Content types moved, keeping their ids: permissions and log entries follow.
    for app_label, names in MOVES.items():
        for model_name in names:
            moved = ContentType.objects.get(app_label=app_label, model=model_name)
            assert moved.id == filled["content_types"][model_name], (app_label, model_name)
    assert not ContentType.objects.filter(app_label="agent_sessions", model__in=MOVED_MODELS).exists()
    assert Permission.objects.get(id=filled["permission"]).content_type.model_class() is Agent
    assert User.objects.get(id=filled["operator"]).has_perm("agents.change_agent")
    assert LogEntry.objects.get(id=filled["log_entry"]).get_edited_object().id == "agent_moved"

    # The API answers as it did.
    _, raw = api_key_issue(workspace=Workspace.objects.get(id=filled["workspace"]), name="after-the-move")
    client = Client(headers={"authorization": f"Bearer {raw}"})
    agent = client.get("/v1/agents/agent_moved").json()
    assert (agent["id"], agent["name"], agent["version"]) == ("agent_moved", "mover", 1)
    assert client.get("/v1/environments/env_moved").json()["name"] == "moved"
    assert client.get("/v1/vaults/vlt_moved").json()["display_name"] == "moved"
    assert client.get("/v1/vaults/vlt_moved/credentials/vcrd_moved").json()["id"] == "vcrd_moved"
    assert client.get("/v1/memory_stores/memstore_moved").json()["name"] == "moved"
    memories = client.get("/v1/memory_stores/memstore_moved/memories").json()["data"]
    assert [m["path"] for m in memories] == ["/a.md"]
    assert client.get("/v1/skills/skill_moved").json()["id"] == "skill_moved"
