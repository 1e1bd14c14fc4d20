"""No secret default outside DEBUG: without DJANGO_SECRET_KEY the server and every manage.py
command stop with one line naming the variable; DJANGO_DEBUG=true keeps a development default."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_DEBUG")}
    return {**env, "MANGO_ENV_FILE": "", **extra}


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        [sys.executable, "manage.py", "check"],
        [sys.executable, "manage.py", "migrate", "--plan"],
        [sys.executable, "-c", "import config.asgi"],  # what gunicorn's uvicorn workers load
        [sys.executable, "-m", "celery", "-A", "config", "inspect", "ping", "--timeout", "1"],
    ],
    ids=["check", "migrate", "asgi", "celery"],
)
def test_without_a_secret_key_outside_debug_every_entry_point_stops_with_one_line(args):
    result = _run(args, _env(DJANGO_DEBUG="false"))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "DJANGO_SECRET_KEY" in lines[0] and "Traceback" not in result.stderr


def test_debug_mode_and_a_set_key_both_start():
    debug = _run([sys.executable, "manage.py", "check"], _env(DJANGO_DEBUG="true"))
    assert debug.returncode == 0, debug.stderr
    keyed = _run([sys.executable, "manage.py", "check"], _env(DJANGO_SECRET_KEY="k" * 50))
    assert keyed.returncode == 0, keyed.stderr
