"""Environment packages, as plain data for the ``docker/`` package: which managers this deployment's image
serves, how a package name may look, the derived image a package set is installed into, the
commands that install it, and which package an install's output blames. No I/O here.

A session's sandbox starts from MANGO_SANDBOX_IMAGE; when its environment lists packages, the
worker first installs them into an image derived from it (a build container, committed), tagged
by a hash of the workspace, the base image and the package set, so every later session of that
environment starts from the cache. Installs run as root in the build container (the sandbox
itself never does), with the environment's networking, bounded by
MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS and MANGO_SANDBOX_INSTALL_MAX_BYTES; a workspace runs at most
MANGO_WORKSPACE_MAX_INSTALLS at once and keeps at most MANGO_WORKSPACE_MAX_PACKAGE_IMAGES images.
"""

import hashlib
import json
import re

from django.conf import settings

REPOSITORY = "mango-sandbox-packages"
LABEL_PACKAGES = "mango.packages"
# The order installs run in: system packages first, then the language managers.
ORDER = ("apt", "pip", "npm", "cargo", "gem", "go")
# What one package entry may be: a name with an optional version or range, never an option.
NAME_PATTERNS = {
    "apt": re.compile(r"^[a-z0-9][a-z0-9+.\-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+:~\-]+)?$"),
    "pip": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9._,\-]+\])?([<>=!~]=?[A-Za-z0-9.*+!\-]+,?)*$"),
    "npm": re.compile(r"^(@[a-z0-9][a-z0-9._\-]*/)?[a-z0-9][a-z0-9._\-]*(@[A-Za-z0-9.^~<>=*|+\- ]+)?$"),
    "cargo": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*(@[A-Za-z0-9.^~<>=*+\-]+)?$"),
    "gem": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(:[A-Za-z0-9.<>=~ \-]+)?$"),
    "go": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~/\-]*(@[A-Za-z0-9.+\-]+)?$"),
}
# An install's words for "no such package", per manager: the group names the package.
MISSING = {
    "apt": (
        re.compile(r"Unable to locate package (\S+)"),
        re.compile(r"Package '?(\S+?)'? has no installation candidate"),
    ),
    "pip": (
        re.compile(r"No matching distribution found for (\S+)"),
        re.compile(r"Could not find a version that satisfies the requirement (\S+)"),
    ),
    "npm": (re.compile(r"404\s+'?(\S+?)'? is not in this registry"), re.compile(r"404 Not Found - GET \S+/(\S+)")),
}


class PackageInstallFailed(Exception):
    """One manager's install failed; `package` is the entry blamed (None when none could be)."""

    def __init__(self, manager: str, package: str | None, detail: str):
        super().__init__(detail)
        self.manager, self.package, self.detail = manager, package, detail

    def describe(self) -> str:
        what = f"{self.manager} package {self.package!r}" if self.package else f"{self.manager} packages"
        return f"Installing the environment's {what} failed: {self.detail}"


def served_managers() -> tuple[str, ...]:
    return tuple(manager.strip() for manager in settings.MANGO_SANDBOX_PACKAGE_MANAGERS if manager.strip())


def listed(packages: dict | None) -> list[tuple[str, list[str]]]:
    """[(manager, entries)] with entries, in install order."""
    packages = packages or {}
    return [(manager, list(packages[manager])) for manager in ORDER if packages.get(manager)]


def refusal(packages: dict | None) -> str | None:
    """Why this deployment cannot install the package set (the 400 at environment create)."""
    served = served_managers()
    for manager, entries in listed(packages):
        if manager not in served:
            return (
                f"config.packages.{manager}: this server's sandbox image cannot install {manager} packages "
                f"(it serves {', '.join(served) or 'none'}; MANGO_SANDBOX_PACKAGE_MANAGERS)."
            )
        for entry in entries:
            if not NAME_PATTERNS[manager].match(entry):
                return (
                    f"config.packages.{manager}: {entry!r} is not a {manager} package name (with an optional version)."
                )
    return None


def image_tag(*, workspace_id: str, base_image_id: str, packages: dict, networking: str) -> str:
    digest = hashlib.sha256(
        json.dumps(
            {"workspace": workspace_id, "base": base_image_id, "packages": listed(packages), "net": networking},
            sort_keys=True,
        ).encode()
    ).hexdigest()[:24]
    return f"{REPOSITORY}:{digest}"


def commands(manager: str, entries: list[str]) -> list[list[str]]:
    """The argv lists (run as root in the build container, no shell) that install `entries`."""
    if manager == "apt":
        return [
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *entries],
            ["sh", "-c", "rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb"],
        ]
    if manager == "pip":
        return [["python3", "-m", "pip", "install", "--no-input", "--no-cache-dir", "--progress-bar", "off", *entries]]
    if manager == "npm":
        return [["npm", "install", "--global", "--no-audit", "--no-fund", "--no-update-notifier", *entries]]
    raise ValueError(f"{manager} packages are not served")


def blamed(manager: str, entries: list[str], output: str) -> str | None:
    """The entry an install's output names as missing, if it names one of them."""
    for pattern in MISSING.get(manager, ()):
        for found in pattern.finditer(output):
            name = found.group(1).strip("'\"").rstrip(".:")
            for entry in entries:
                if entry == name or _base_name(manager, entry) == _base_name(manager, name):
                    return entry
    return None


def _base_name(manager: str, entry: str) -> str:
    entry = entry.lower()
    if manager == "npm":
        head, _, _ = entry[1:].partition("@") if entry.startswith("@") else entry.partition("@")
        return ("@" + head) if entry.startswith("@") else head
    return re.split(r"[<>=!~\[:@ ]", entry, maxsplit=1)[0].replace("_", "-")
