"""Newcomer paths: the model-upstream warning, management commands with `make run`'s .env, one
line (not a traceback) when the database is wrong, and Ctrl-C under `make run | tee log`."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.test import Client

from tests.files.server import free_port
from tests.worker import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, env, timeout=120):
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_URL"))}
    return {**env, "MANGO_ENV_FILE": "", **extra}


def test_startup_warns_when_the_model_upstream_is_not_configured():
    unset = _manage("check", "--tag", "model_upstream", env=_clean_env())
    assert unset.returncode == 0
    assert "mango.W001" in unset.stderr and "ANTHROPIC_API_KEY is unset" in unset.stderr
    assert "https://api.anthropic.com" in unset.stderr and "ANTHROPIC_BASE_URL" in unset.stderr
    configured = _manage("check", "--tag", "model_upstream", env=_clean_env(ANTHROPIC_API_KEY="sk-ant-x"))
    assert configured.returncode == 0 and "mango.W001" not in configured.stderr + configured.stdout


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie whose parent has not reaped it yet is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_ctrl_c_stops_everything_when_output_is_piped(tmp_path, s3_bucket):
    port = free_port()
    env = {
        **_clean_env(),
        "DATABASE_URL": database_url(),
        "PORT": str(port),
        "MANGO_ENV_FILE": str(tmp_path / ".env"),
        "MANGO_SANDBOX": "local_process",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        "MANGO_SESSIONS_QUEUE": f"mango-test-run-{os.getpid()}",
    }
    log = tmp_path / "run.log"
    # The terminal's Ctrl-C is SIGINT to the foreground process group: here, this shell's group.
    shell = subprocess.Popen(
        ["bash", "-c", f"bash scripts/run.sh 2>&1 | tee {log} >/dev/null"], cwd=ROOT, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while "Mango is serving" not in (log.read_text() if log.exists() else ""):
            assert shell.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/static/admin/css/base.css", timeout=60).status_code == 200
        pids = [int(line) for line in (ROOT / "var" / "run.pids").read_text().split()]
        assert len(pids) >= 3 and all(_alive(pid) for pid in pids)
        assert (tmp_path / ".env").read_text().startswith("# Written by make run")
        assert "DATABASE_URL=" in (tmp_path / ".env").read_text()
        assert "ANTHROPIC_API_KEY is unset" in log.read_text()  # the startup warning, in the banner

        os.killpg(shell.pid, signal.SIGINT)
        shell.wait(60)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [pid for pid in pids if _alive(pid)], log.read_text()[-3000:]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:  # whatever happened, leave nothing running
        run_pids = ROOT / "var" / "run.pids"
        for pid in [shell.pid] + ([int(p) for p in run_pids.read_text().split()] if run_pids.exists() else []):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
