"""STYLE rule 9: `processors/` is pure. Importing it pulls in no Django, ORM, storage, boto3,
docker or network client, so its functions can run (and be tested) anywhere."""

import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("django", "rest_framework", "boto3", "botocore", "storages", "docker", "requests", "httpx", "files")


def test_processors_import_nothing_impure():
    code = (
        "import sys\n"
        "import processors.admission, processors.conversation, processors.file_text, processors.outputs\n"
        "import processors.rendering, processors.repositories, processors.resources\n"
        "import processors.text_formats\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.stdout.strip() == ""
