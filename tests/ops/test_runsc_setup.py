"""make run and MANGO_SANDBOX_RUNTIME=runsc (scripts/lib.sh): the dockerd configuration it starts
dockerd with registers gVisor's runsc over the operator's own configuration, and a dockerd already
running without the runtime stops make run, saying why (docs/sandboxes.md#gvisor)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lib(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"source scripts/lib.sh; {script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_the_dockerd_configuration_registers_runsc_over_the_operators_own(tmp_path):
    base = tmp_path / "daemon.json"
    base.write_text(json.dumps({"log-level": "warn", "runtimes": {"other": {"path": "/usr/bin/other"}}}))
    out = tmp_path / "runsc.json"
    assert _lib(f"runsc_daemon_config {out} {base}").returncode == 0
    config = json.loads(out.read_text())
    assert config["log-level"] == "warn" and config["runtimes"]["other"] == {"path": "/usr/bin/other"}
    assert config["runtimes"]["runsc"]["runtimeArgs"] == ["--network=host", "--file-access=shared"]
    assert config["runtimes"]["runsc"]["path"] == shutil.which("runsc")


def test_a_running_dockerd_without_the_runtime_stops_make_run_saying_why():
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no dockerd running")
    # A runtime no dockerd here has (make test's dockerd registers runsc when it is installed).
    result = _lib("ensure_dockerd", MANGO_SANDBOX_RUNTIME="mango-absent-runtime")
    assert result.returncode == 1
    assert "MANGO_SANDBOX_RUNTIME=mango-absent-runtime, but the running dockerd has no such runtime" in result.stderr
    assert _lib("ensure_dockerd", MANGO_SANDBOX_RUNTIME="runc").returncode == 0
