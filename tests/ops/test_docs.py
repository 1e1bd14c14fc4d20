"""The README and docs/ against what they describe: every target in `make help`, every setting
in docs/configuration.md, the benchmarks list equal to the Makefile's, links that lead somewhere.
(The README's quickstarts are run by tests/ops/test_make_run.py.)"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_make_alone_lists_every_target_and_runs_nothing():
    result = subprocess.run(["make", "-n"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "scripts/run.sh" not in result.stdout  # what `make` would run
    listed = subprocess.run(["make"], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
    targets = re.findall(r"^  make ([a-z-]+) +\S", listed, re.M)
    makefile = (ROOT / "Makefile").read_text()
    declared = re.findall(r"^([a-z][a-z-]*):", makefile, re.M)
    phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M).group(1).split()
    assert targets[0] == "help" and sorted(targets) == sorted(declared) == sorted(phony)


def _settings_read() -> set[str]:
    names = set()
    for path in (ROOT / "config").rglob("*.py"):
        names |= set(re.findall(r'env(?:\.[a-z]+)?\("([A-Z][A-Z0-9_]+)"', path.read_text()))
        names |= set(re.findall(r'os\.environ\.get\("([A-Z][A-Z0-9_]+)"', path.read_text()))
    for path in (ROOT / "scripts").glob("*.sh"):
        names |= set(re.findall(r"\$\{((?:MANGO|DATABASE|REDIS|PORT|WEB)[A-Z0-9_]*):?-", path.read_text()))
    return names - {"MANGO_TEST_BUCKET"}  # the tests' own (docs/development.md)


def test_every_setting_is_documented():
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text()))
    read = _settings_read()
    assert len(read) > 80
    assert not read - documented


def test_the_benchmarks_page_lists_what_make_bench_runs():
    makefile = (ROOT / "Makefile").read_text()
    benches = re.search(r"^BENCHES = (.*?)\n(?=\S)", makefile, re.M | re.S).group(1)
    in_make = [item.strip('"') for item in re.findall(r'"[^"]+"|\S+\.py', benches.replace("\\\n", " "))]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    in_docs = re.findall(r"^- `([a-z_]+\.py[^`]*)`:", page, re.M)
    assert in_make == in_docs and all((ROOT / "bench" / item.split()[0]).is_file() for item in in_make)


def test_the_readme_is_for_users_and_its_links_lead_somewhere():
    first_screen = README[:3000]
    for command in ("make run", "make test", "create_api_key", "client.beta.files.upload"):
        assert command in first_screen, command
    assert len(README.splitlines()) < 275  # two commands, five quickstarts run by test_make_run, links
    for heading in ("A session, end to end", "The model: real or offline", "The admin", "Strict mode"):
        assert f"## {heading}" in README, heading
    strict = README.split("## Strict mode", 1)[1].split("\n## ", 1)[0]
    for needed in ("files-api-2025-04-14", "managed-agents-2026-04-01", 'betas=["files-api-2025-04-14"]'):
        assert needed in strict, needed
    assert "make scripted-model" in README and "createsuperuser" in README
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), (page.name, target)
    assert "product card" not in "".join(page.read_text() for page in pages)
