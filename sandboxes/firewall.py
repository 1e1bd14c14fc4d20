"""The host firewall rules that keep ``unrestricted`` sandboxes away from the Docker host.

A container on a bridge reaches the host through the bridge's gateway address, or any other
address of the host: those packets take the host's INPUT chain (not FORWARD, where Docker's own
rules live), so every service bound to 0.0.0.0 (or to ``::``, via link-local IPv6) would be
open to it. One rule per family drops every packet that enters the host from a sandbox bridge
(``mgo-*``); replies to connections the host opened are not needed (the server talks to
sandboxes through dockerd only). Sandbox DNS still works: Docker's resolver answers inside the
container's own network namespace. Link-local addresses (cloud metadata services) are dropped on
the forward path too.

MANGO_SANDBOX_FIREWALL=iptables: installed idempotently by the worker before the first
unrestricted sandbox (needs root and iptables on the Docker host); ``external``: the operator
installs the same rules (docs/operating.md) and this module only trusts that.
"""

import shutil
import subprocess
import threading

from django.conf import settings

from sandboxes.base import SandboxError
from sandboxes.policy import BRIDGE_PREFIX

RULES = (
    ("iptables", ["INPUT", "-i", f"{BRIDGE_PREFIX}+", "-j", "DROP"]),
    ("ip6tables", ["INPUT", "-i", f"{BRIDGE_PREFIX}+", "-j", "DROP"]),
    ("iptables", ["DOCKER-USER", "-i", f"{BRIDGE_PREFIX}+", "-d", "169.254.0.0/16", "-j", "DROP"]),
)
_lock = threading.Lock()
_installed = False


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def ensure_rules() -> None:
    """Make sure the rules are in place (once per process). Raises SandboxError when they cannot
    be: an unrestricted sandbox is then refused rather than started without isolation."""
    global _installed
    if settings.MANGO_SANDBOX_FIREWALL == "external":
        return
    with _lock:
        if _installed:
            return
        for tool, rule in RULES:
            binary = shutil.which(tool)
            if binary is None:
                if tool == "ip6tables":
                    continue  # no IPv6 firewall tool: the host has no IPv6 stack to protect
                raise SandboxError(f"{tool} is not installed: cannot isolate sandbox networks")
            chain, spec = rule[0], rule[1:]
            if _run([binary, "-w", "-C", chain, *spec]).returncode == 0:
                continue
            result = _run([binary, "-w", "-I", chain, "1", *spec])
            if result.returncode != 0:
                detail = result.stderr.strip()
                raise SandboxError(f"cannot install the sandbox firewall rule ({tool} {chain}): {detail}")
        _installed = True
