"""Newcomer paths: the model-upstream warning, management commands with `make run`'s .env, and one
line (not a traceback) when the database is wrong. (`make run` itself, Ctrl-C under `make run | tee
log` included: tests/ops/test_make_run.py.)"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.scripted_model import ScriptedModel
from tests.worker import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, env, timeout=120):
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_URL"))}
    return {**env, "MANGO_ENV_FILE": "", **extra}


def test_startup_warns_when_the_model_upstream_is_not_usable():
    """One deployment check (`make run` prints it under its banner), quoting what a turn would
    report; no other command repeats it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    unreachable = _manage("check", "--deploy", "--tag", "model_upstream", env=_clean_env(ANTHROPIC_BASE_URL=closed))
    assert unreachable.returncode == 0 and "mango.W001" in unreachable.stderr
    assert f"The model upstream at {closed} could not be reached" in unreachable.stderr
    assert "check ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY" in unreachable.stderr
    assert "make scripted-model" in unreachable.stderr
    # Anthropic's API without a key: the 401 every turn would get (or, offline, unreachable).
    default = _manage("check", "--deploy", "--tag", "model_upstream", env=_clean_env())
    assert "mango.W001" in default.stderr and "https://api.anthropic.com" in default.stderr
    assert "ANTHROPIC_API_KEY is unset" in default.stderr or "could not be reached" in default.stderr
    # A stand-in that answers needs no key; a key with an upstream that answers: no warning.
    model = ScriptedModel()
    try:
        for extra in ({}, {"ANTHROPIC_API_KEY": "sk-ant-x"}):
            fine = _manage(
                "check", "--deploy", "--tag", "model_upstream", env=_clean_env(ANTHROPIC_BASE_URL=model.url, **extra)
            )
            assert fine.returncode == 0 and "mango.W001" not in fine.stderr + fine.stdout
    finally:
        model.close()
    # Other commands (migrate, collectstatic, every manage.py call) do not repeat it.
    plain = _manage("check", env=_clean_env(ANTHROPIC_BASE_URL=closed))
    assert plain.returncode == 0 and "mango.W001" not in plain.stderr + plain.stdout


@pytest.mark.django_db(transaction=True)
def test_commands_read_the_env_file_make_run_writes(tmp_path, s3_bucket):
    env_file = tmp_path / ".env"
    env_file.write_text(f"# Written by make run: test\nDATABASE_URL={database_url()}\n")
    result = _manage("create_api_key", "--workspace", "from-dotenv", env=_clean_env(MANGO_ENV_FILE=str(env_file)))
    assert result.returncode == 0, result.stderr
    raw_key = result.stdout.strip().splitlines()[-1]
    assert Client().get("/v1/files", headers={"authorization": f"Bearer {raw_key}"}).status_code == 200
    # The environment wins over the file.
    missing = database_url().rsplit("/", 1)[0] + "/mango_no_such_db"
    result = _manage(
        "create_api_key", "--workspace", "x", env=_clean_env(MANGO_ENV_FILE=str(env_file), DATABASE_URL=missing)
    )
    assert result.returncode == 1


def test_a_wrong_database_is_one_line_naming_what_failed():
    missing = database_url().rsplit("/", 1)[0] + "/mango_no_such_db"
    result = _manage("create_api_key", "--workspace", "x", env=_clean_env(DATABASE_URL=missing))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("[mango]")]
    assert 'database "mango_no_such_db" does not exist' in line and "DATABASE_URL" in line
