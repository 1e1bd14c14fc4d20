"""The repository names no package registry's host: they are read from the machine's package
managers' configuration (sandboxes/registries.py, scripts/lib.sh's apt_mirror), so that a
deployment behind its own mirrors carries nothing that points past them."""

import subprocess
from pathlib import Path

from sandboxes import registries

ROOT = Path(__file__).resolve().parents[2]


def test_no_tracked_file_names_a_registry_host_of_this_machine():
    hosts = sorted({host for found in registries.machine_registries().values() for host in found})
    assert hosts, "this machine's apt, pip and npm configuration named no registry"
    patterns = [argument for host in hosts for argument in ("-e", host)]
    found = subprocess.run(
        ["git", "grep", "-n", "-F", "-i", *patterns], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert found.returncode == 1, f"registry host names in tracked files:\n{found.stdout}"


def test_apt_sources_are_read_in_both_formats(tmp_path, monkeypatch):
    listing = tmp_path / "sources.list"
    listing.write_text(
        "# deb http://commented.example/debian bookworm main\ndeb [arch=amd64] http://a.example/debian bookworm main\n"
    )
    sources = tmp_path / "mirror.sources"
    sources.write_text(
        "Types: deb\n# a comment inside the stanza\nURIs: https://b.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://off.example/debian\nEnabled: no\n"
    )
    monkeypatch.setattr(registries, "APT_LISTS", (str(listing),))
    monkeypatch.setattr(registries, "APT_SOURCES", (str(sources),))
    assert registries.apt_sources() == ["http://a.example/debian", "https://b.example/debian"]
