"""The package registries of this machine, read from its package managers' configuration.

`allow_package_managers` opens a `limited` sandbox's proxy to the registries its installs use.
Unless MANGO_SANDBOX_PACKAGE_REGISTRIES names them (an operator's mirrors), they are the ones this
machine's own package managers are configured with: apt's sources, pip's index (its configured
`index-url`, else pip's default) with the host that index serves its files from, and npm's
registry. The sandbox image is built from the same apt mirror, and its pip and npm keep their
defaults, so what the machine uses is what its sandboxes' installs reach.
"""

import functools
import glob
import os
import re
import shutil
import subprocess
from urllib.parse import urlsplit

from django.conf import settings

APT_LISTS = ("/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list")))
APT_SOURCES = tuple(sorted(glob.glob("/etc/apt/sources.list.d/*.sources")))
_DEB_LINE = re.compile(r"^\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)")


def package_registries() -> list[str]:
    """The hosts `allow_package_managers` adds to a sandbox's allow-list: the setting when it
    names any, else this machine's (cached: the configuration is read once per process)."""
    configured = [host.strip().lower() for host in settings.MANGO_SANDBOX_PACKAGE_REGISTRIES if host.strip()]
    return configured or sorted({host for hosts in machine_registries().values() for host in hosts})


@functools.cache
def machine_registries() -> dict[str, list[str]]:
    """Registry host names by manager ({"apt": [...], "pip": [...], "npm": [...]}); a manager this
    machine lacks, or whose configuration cannot be read, has none."""
    return {"apt": _hosts(apt_sources()), "pip": _hosts(pip_indexes()), "npm": _hosts(npm_registries())}


def apt_sources() -> list[str]:
    """The URIs of apt's enabled sources (one-line .list files and deb822 .sources files)."""
    uris = []
    for path in APT_LISTS:
        for line in _lines(path):
            if match := _DEB_LINE.match(line):
                uris.append(match.group(1))
    for path in APT_SOURCES:
        stanzas = "\n".join(_lines(path)).split("\n\n")
        for stanza in stanzas:
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, flags=re.MULTILINE))
            if fields.get("Enabled", "yes").strip().lower() != "no":
                uris += fields.get("URIs", "").split()
    return uris


def pip_indexes() -> list[str]:
    """pip's index (PIP_INDEX_URL, its configuration's index-url, else its default) and, for its
    default, the host the default index serves files from; extra indexes count too."""
    try:
        from pip._internal.configuration import Configuration
        from pip._internal.models.index import PyPI
    except ImportError:  # no pip in this environment: its registry is not known here
        return []
    values: dict[str, str] = {}
    try:
        configuration = Configuration(isolated=False)
        configuration.load()
        values = {key.split(".", 1)[-1]: value for key, value in configuration.items()}
    except Exception:  # noqa: BLE001 - an unreadable pip configuration leaves pip's defaults
        values = {}
    index = os.environ.get("PIP_INDEX_URL") or values.get("index-url") or ""
    extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or values.get("extra-index-url") or "").split()
    if index:
        return [index, *extra]
    return [PyPI.simple_url, f"https://{PyPI.file_storage_domain}/", *extra]


def npm_registries() -> list[str]:
    """npm's configured registry (`npm config get registry`), when npm is installed."""
    npm = shutil.which("npm")
    if not npm:
        return []
    try:
        result = subprocess.run(
            [npm, "config", "get", "registry"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return result.stdout.split() if result.returncode == 0 else []


def _hosts(urls: list[str]) -> list[str]:
    """The host names of network URLs (file: and cdrom: sources are local)."""
    hosts = set()
    for url in urls:
        parts = urlsplit(url.strip())
        if parts.scheme in ("http", "https") and parts.hostname:
            hosts.add(parts.hostname.lower())
    return sorted(hosts)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            # A comment line is dropped whole (in a deb822 file it must not end a stanza).
            return [line.split("#", 1)[0].rstrip() for line in handle if not line.lstrip().startswith("#")]
    except OSError:
        return []
