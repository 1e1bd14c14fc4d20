"""The import contracts in .importlinter (STYLE.md §20, §23): processors and core import no app, files
does not import sessions, imports inside sessions run one way and form no cycle, the apps import no
server package (nor config/), the object store's backends are reached only through files.storage, and
nothing outside files imports files.storage (files owns every object in the store). CI runs this."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:]
