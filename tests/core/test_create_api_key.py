import pytest
from django.core.management import call_command
from django.test import Client

from core.models import ApiKey, Workspace


@pytest.mark.django_db
def test_create_api_key_prints_key_last_and_creates_workspace(capsys, s3_bucket):
    call_command("create_api_key", "--workspace", "gamma")
    lines = capsys.readouterr().out.strip().splitlines()
    raw_key = lines[-1]
    assert raw_key.startswith("sk-mango-")
    workspace = Workspace.objects.get(name="gamma")
    assert ApiKey.objects.filter(workspace=workspace).count() == 1
    assert Client().get("/v1/files", headers={"x-api-key": raw_key}).status_code == 200

    call_command("create_api_key", "--workspace", "gamma")
    assert Workspace.objects.filter(name="gamma").count() == 1
    assert ApiKey.objects.filter(workspace=workspace).count() == 2
