"""The runtime says what happened through named services and reads through selectors: no module
of sessions/runtime/ makes an ORM query, saves a row or opens a transaction itself (it may name
models for their types and enums). Also: sessions services import no serializers and render no
stream frames (the import-linter contracts in .importlinter check the imports; this checks the
roles that imports cannot show)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Attribute names that mean the ORM or a transaction is used directly.
ORM_ATTRIBUTES = {"objects", "select_for_update", "save", "bulk_create", "atomic", "on_commit", "raw"}


def _uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ORM_ATTRIBUTES:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "django.db":
            names = {alias.name for alias in node.names} - {"close_old_connections", "connection"}
            if names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} from django.db import {sorted(names)}")
    return found


def test_the_runtime_makes_no_query_of_its_own():
    found = [use for path in sorted((ROOT / "sessions" / "runtime").glob("*.py")) for use in _uses(path)]
    assert not found, "the runtime must write through sessions.services and read through selectors:\n" + "\n".join(
        found
    )


def test_the_rule_sees_a_query():
    probe = ROOT / "var" / "runtime_roles_probe.py"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text("from django.db import transaction\nSession.objects.filter(id=1).update(x=1)\n")
    try:
        assert len(_uses(probe)) == 2
    finally:
        probe.unlink()


def test_sessions_and_processors_reach_file_rows_only_through_the_files_gate():
    """One gate per resource, for callers in other apps too: no File.objects outside files/."""
    found = []
    for app in ("sessions", "processors"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr == "objects"
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "File"
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "File rows come from files.selectors:\n" + "\n".join(found)
