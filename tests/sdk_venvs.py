"""Older releases of the official SDK, each in a virtualenv of its own beside the checkout
(`.venv-sdk<version without dots>`, created on first use), for the tests that run them beside
the pinned one: anthropic 1.1.0 for the Files API, and the oldest release whose
EnvironmentWorker Mango still supports."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The oldest SDK whose self-hosted worker (client.beta.environments.work.worker) Mango serves:
# the release Mango pinned before 2.17.
OLDEST_WORKER_SDK = "2.14.0"


def sdk_python(version: str) -> Path:
    """The python of a virtualenv holding anthropic==`version` (installed when missing)."""
    venv = ROOT / f".venv-sdk{version.replace('.', '')}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import anthropic; print(anthropic.__version__)"], capture_output=True, text=True
    )
    if probe.stdout.strip() != version:
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"anthropic=={version}"], check=True)
    return python
