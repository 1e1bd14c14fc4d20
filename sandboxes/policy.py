"""What a docker sandbox is allowed: the container's security settings, its writable mounts and
its network, as plain data for the ``docker/`` package (issue #10). No I/O here.

* Least privilege: a fixed unprivileged uid (MANGO_SANDBOX_UID), no capabilities at all,
  ``no-new-privileges``, Docker's default seccomp profile, ulimits, memory-swap = memory. The
  number of processes is bounded by the container's pids cgroup only (MANGO_SANDBOX_PIDS): no
  RLIMIT_NPROC is set, because it counts the uid on the whole host, which every sandbox shares,
  so one sandbox's processes would use up another's (issue 44, finding 4).
* Root filesystem: the sandbox user owns no directory of the image and holds no capability, and
  every directory of the image it could write to (/tmp, /var/tmp, /run/lock) has a bounded mount
  over it, so it can write only to the mounts below. (Docker's ``read_only`` flag is not set:
  file resources may be added to a running sandbox at any mount path, and Docker's put_archive
  refuses every path of a read-only root; those writes come from the server, never from the
  sandbox, and are bounded by the resource limits.)
* Writable mounts, each bounded:
  - ``DISKS`` (/workspace, /mnt/session/outputs): ext4 filesystems of their setting's size on
    the host's disk (``disks.py``): a write beyond the size fails inside with ENOSPC, and they
    are not the sandbox's memory.
  - ``TMPFS_VOLUMES`` (/tmp, the memory stores, the skills): tmpfs-backed named volumes with
    ``size=``, which dockerd can still stream (put_archive of resources, files and skills) —
    a container ``--tmpfs`` is invisible to it.
  - ``CONTAINER_TMPFS`` (/var/tmp, /run/lock): plain container tmpfs mounts, nothing of the
    server's goes there.
  All are root-owned; the sandbox's own are sticky and world-writable (1777): the sandbox user
  creates files there but cannot remove, rename or replace what it does not own (a file
  resource, owned by RESOURCE_OWNER_UID). The skills mount is root's alone (0755).
* Network: ``unrestricted``: a bridge of its own (``network_spec``), a /29 from
  MANGO_SANDBOX_NETWORK_POOL, inter-container traffic off, and a bridge name under BRIDGE_PREFIX
  so one host firewall rule (``firewall.py``) drops everything from sandboxes to the host itself.
  Docker's isolation rules already drop traffic between two bridges.
  ``limited``: an *internal* bridge of its own (no route out, no NAT) that holds the sandbox and
  its egress proxy (sandboxes/egress_proxy.py, a container of its own on MANGO_SANDBOX_EGRESS_NETWORK
  too), reached through HTTP(S)_PROXY: the proxy is the only thing the sandbox can reach, and it
  lets through the allow-list (``egress_hosts``) by name only, on ports 80 and 443. Direct IP
  addresses, other ports and DNS to anywhere have no route. A limited environment whose
  allow-list is empty gets no network at all (``none``), as before.
"""

import hashlib
import ipaddress
import json
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.crypto import salted_hmac

from processors.memory import MEMORY_ROOT
from processors.resources import SKILLS_DIR
from sandboxes.base import OUTPUTS_PATH, WORKDIR, size_bytes
from sandboxes.registries import package_registries

BRIDGE_PREFIX = "mgo-"  # interface names are at most 15 characters
SUBNET_PREFIX = 29  # gateway + the sandbox, 6 usable addresses
TMP_PATH = "/tmp"
# (disk name, mount point, size setting): ext4 filesystems on the host's disk (disks.py).
DISKS = (
    ("workspace", WORKDIR, "MANGO_SANDBOX_WORKDIR_SIZE"),
    ("outputs", OUTPUTS_PATH, "MANGO_SANDBOX_OUTPUTS_SIZE"),
)
# (volume name prefix, mount point, size setting, mode): tmpfs-backed named volumes.
TMPFS_VOLUMES = (
    ("mango-tmp-", TMP_PATH, "MANGO_SANDBOX_TMP_SIZE", "1777"),
    # Memory stores (sessions/services/memory_mounts.py): one directory per attached store.
    ("mango-memory-", MEMORY_ROOT, "MANGO_SANDBOX_MEMORY_STORES_SIZE", "1777"),
    # Skills (sessions/services/skills.py), placed by the server, read-only for the sandbox.
    ("mango-skills-", SKILLS_DIR, "MANGO_SANDBOX_SKILLS_SIZE", "0755"),
)
# The image's other world-writable directories, bounded in place.
CONTAINER_TMPFS = (
    ("/var/tmp", "MANGO_SANDBOX_TMP_SIZE"),
    ("/run/lock", None),  # lock files only
)
LOCK_SIZE = "1m"
DISK_MOUNT_OPTIONS = "nosuid,nodev,noatime"
# pid 1 ignores every signal it installs no handler for, so nothing inside can stop the sandbox.
KEEPALIVE = "while :; do sleep 3600 & wait $!; done"


def disk_sizes() -> list[tuple[str, int]]:
    """[(disk name, bytes)] of the sandbox's on-disk filesystems."""
    return [(name, size_bytes(getattr(settings, size))) for name, _target, size in DISKS]


def volume_specs(session_id: str, incarnation: str, devices: dict[str, str]) -> list[tuple[str, str, dict]]:
    """[(volume name, mount point, local-driver options)] of the session's writable volumes: its
    disks (`devices`: disk name → the loop node disks.attached made) and its tmpfs volumes.
    Names carry the incarnation: a sandbox made again never finds an old volume."""
    disks = [
        (
            f"mango-{name}-{session_id}-{incarnation}",
            target,
            {"type": "ext4", "device": devices[name], "o": DISK_MOUNT_OPTIONS},
        )
        for name, target, _size in DISKS
    ]
    tmpfs = [
        (
            f"{prefix}{session_id}-{incarnation}",
            target,
            {"type": "tmpfs", "device": "tmpfs", "o": f"size={getattr(settings, size)},mode={mode},nosuid,nodev"},
        )
        for prefix, target, size, mode in TMPFS_VOLUMES
    ]
    return disks + tmpfs


def container_tmpfs() -> dict[str, str]:
    return {
        target: f"size={getattr(settings, size) if size else LOCK_SIZE},mode=1777,nosuid,nodev"
        for target, size in CONTAINER_TMPFS
    }


def bridge_name(session_id: str) -> str:
    return BRIDGE_PREFIX + hashlib.sha256(session_id.encode()).hexdigest()[:11]


def network_name(session_id: str) -> str:
    return f"mango-net-{session_id}"


PROXY_PORT = 3128
PROXY_HOST_INDEX = 2  # the proxy's address on the internal /29: gateway .1, proxy .2, sandbox after


def is_unrestricted(networking: dict | None) -> bool:
    return bool(networking) and networking.get("type") == "unrestricted"


def egress_hosts(networking: dict | None, mcp_server_urls: list[str] = ()) -> list[str]:
    """The hosts a `limited` sandbox reaches through its proxy: allowed_hosts, the deployment's
    package registries with allow_package_managers, the agent's MCP server hosts with
    allow_mcp_servers. Empty for anything but `limited` (and for a limited one without any)."""
    if not networking or networking.get("type") != "limited":
        return []
    hosts = [host.strip().lower() for host in networking.get("allowed_hosts") or [] if host.strip()]
    if networking.get("allow_package_managers"):
        hosts += package_registries()
    if networking.get("allow_mcp_servers"):
        hosts += [urlsplit(url).hostname or "" for url in mcp_server_urls]
    return sorted({host for host in hosts if host})


def _covers(entry: str, host: str) -> bool:
    """The allow-list entry lets the proxy reach `host` (an exact name or a `*.` wildcard, as
    sandboxes/egress_proxy.py matches them)."""
    entry, host = entry.lower().rstrip("."), host.lower().rstrip(".")
    if entry == "*":
        return True
    if entry.startswith("*."):
        return host.endswith(entry[1:]) and host != entry[2:]
    return host == entry


def unreachable_credential_hosts(
    credential_hosts: list[str] | None, networking: dict | None, egress: list[str]
) -> list[str]:
    """The hosts of a credential (None: every host) that a sandbox of this networking can never
    send a request to: under `limited`, an IP address (the proxy takes names only), a name no
    entry of the allow-list `egress` covers, a `*.` wildcard none of whose names any entry
    covers. None under `unrestricted` or when the credential names no hosts."""
    if credential_hosts is None or not networking or networking.get("type") != "limited":
        return []
    unreachable = []
    for host in credential_hosts:
        try:
            ipaddress.ip_address(host)
            unreachable.append(host)
            continue
        except ValueError:
            pass
        if host.startswith("*."):
            # Some name under the wildcard is allowed: the entry takes a name of the wildcard's,
            # or the wildcard takes the entry's name (one of them, for an entry's own wildcard).
            ours = "x." + host[2:]
            reached = any(
                _covers(entry, ours) or (_covers(host, theirs) and _covers(entry, theirs))
                for entry in egress
                for theirs in ["x." + entry[2:] if entry.startswith("*.") else entry]
            )
        else:
            reached = any(_covers(entry, host) for entry in egress)
        if not reached:
            unreachable.append(host)
    return unreachable


def proxy_address(subnet: str) -> str:
    return str(ipaddress.ip_network(subnet)[PROXY_HOST_INDEX])


CA_DIRECTORY = "/usr/local/share/mango-ca"
CA_FILE = "proxy-ca.pem"
CA_BUNDLE_FILE = "bundle.pem"


def proxy_environment(address: str, *, credentials: list[dict] = ()) -> dict:
    """What the sandbox's clients read (curl, pip, npm, git and apt each read one of these); with
    credentials, their placeholders under the credentials' names and the bundle that trusts the
    proxy's CA (Python's ssl, requests, pip, curl, git; node adds the CA)."""
    url = f"http://{address}:{PROXY_PORT}"
    environment = {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": "",
        "no_proxy": "",
    }
    if credentials:
        bundle = f"{CA_DIRECTORY}/{CA_BUNDLE_FILE}"
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO"):
            environment[name] = bundle
        environment["NODE_EXTRA_CA_CERTS"] = f"{CA_DIRECTORY}/{CA_FILE}"
        environment |= {credential["name"]: credential["placeholder"] for credential in credentials}
    return environment


def proxy_secrets(credentials: list[dict]) -> bytes:
    """The one line the proxy reads on stdin: what it substitutes, where."""
    keys = ("placeholder", "value", "hosts", "header", "body")
    return (json.dumps({"credentials": [{key: c[key] for key in keys} for c in credentials]}) + "\n").encode()


def proxy_fingerprint(hosts: list[str], credentials: list[dict]) -> str:
    """What a proxy holds (its allow-list and the credentials it substitutes), as a keyed digest
    for its label: another value means the proxy is out of date. Reveals nothing of the secrets
    without SECRET_KEY."""
    data = json.dumps({"hosts": sorted(hosts), "credentials": json.loads(proxy_secrets(credentials))}, sort_keys=True)
    return salted_hmac("mango.proxy-fingerprint", data, algorithm="sha256").hexdigest()


def _upstream_ca() -> str | None:
    if not settings.MANGO_OUTBOUND_CA_FILE:
        return None
    with open(settings.MANGO_OUTBOUND_CA_FILE) as handle:
        return handle.read()


def proxy_config(hosts: list[str], *, credentials: bool = False) -> str:
    return json.dumps(
        {
            "allowed": hosts,
            "credentials_on_stdin": credentials,
            "upstream_ca": _upstream_ca() if credentials else None,
            # The operator's registries may be private (a mirror inside the network); a tenant's
            # hosts only where MANGO_SANDBOX_PRIVATE_HOSTS says so (never the worker's own
            # MANGO_OUTBOUND_PRIVATE_HOSTS: every tenant's code would reach those).
            "private_hosts": sorted(
                {
                    entry.strip().lower()
                    for entry in [*settings.MANGO_SANDBOX_PRIVATE_HOSTS, *package_registries()]
                    if entry.strip()
                }
            ),
            "listen_port": PROXY_PORT,
            "max_connections": settings.MANGO_SANDBOX_PROXY_MAX_CONNECTIONS,
            "idle_seconds": settings.MANGO_SANDBOX_PROXY_IDLE_SECONDS,
        }
    )


def internal_network_options(session_id: str) -> dict:
    """The limited sandbox's own bridge: the sandbox and its proxy talk on it; nothing routes out."""
    return {
        "com.docker.network.bridge.name": bridge_name(session_id),
        "com.docker.network.bridge.enable_icc": "true",
        "com.docker.network.bridge.enable_ip_masquerade": "false",
    }


def egress_network_options() -> dict:
    return {
        "com.docker.network.bridge.name": f"{BRIDGE_PREFIX}egress",
        "com.docker.network.bridge.enable_icc": "false",
        "com.docker.network.bridge.enable_ip_masquerade": "true",
    }


# Under gVisor the pids cgroup counts the sandbox kernel's own host threads, not the tenant's
# processes (those live in the sandbox kernel): below about 40 its start fails
# ("containerManager.StartRoot failed: EOF"), and its ptrace platform's stub threads grow with the
# tenant's processes times the kernel's own threads: about 110 processes at once exhausted 1,024
# ("error initializing first thread: resource temporarily unavailable", which takes the sandbox
# kernel down with its container). So under gVisor a container may hold GVISOR_PIDS_FACTOR host
# threads per process the setting allows, and at least GVISOR_MIN_PIDS. docs/sandboxes.md#gvisor.
GVISOR_MIN_PIDS = 96
GVISOR_PIDS_FACTOR = 16


def runtime_spec() -> dict:
    """The OCI runtime of the containers that run tenant code or face it (MANGO_SANDBOX_RUNTIME):
    nothing for runc, dockerd's default."""
    runtime = settings.MANGO_SANDBOX_RUNTIME
    return {} if runtime == "runc" else {"runtime": runtime}


def pids_limit(limit: int) -> int:
    return limit if settings.MANGO_SANDBOX_RUNTIME == "runc" else max(limit * GVISOR_PIDS_FACTOR, GVISOR_MIN_PIDS)


def proxy_spec() -> dict:
    """The proxy container: unprivileged, no capabilities, read-only, small."""
    uid = settings.MANGO_SANDBOX_UID
    return {
        **runtime_spec(),
        "user": f"{uid}:{uid}",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {"/tmp": "size=1m,mode=1777"},  # the intercepting proxy's per-host certificates
        "nano_cpus": int(0.5 * 1e9),
        "mem_limit": "96m",
        "memswap_limit": "96m",
        "pids_limit": pids_limit(32),
        "ulimits": [{"Name": "nofile", "Soft": 4096, "Hard": 4096}],
    }


def install_spec() -> dict:
    """The build container that installs an environment's packages: root (package managers need
    it) with the few capabilities they use, nothing more; the sandbox's memory and pid bounds."""
    memory = settings.MANGO_SANDBOX_MEMORY
    return {
        **runtime_spec(),
        "user": "0:0",
        "cap_drop": ["ALL"],
        "cap_add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"],
        "security_opt": ["no-new-privileges"],
        "nano_cpus": int(settings.MANGO_SANDBOX_CPUS * 1e9),
        "mem_limit": memory,
        "memswap_limit": memory,
        "pids_limit": pids_limit(settings.MANGO_SANDBOX_PIDS),
    }


def subnet_candidates(session_id: str, attempts: int = 16) -> list[str]:
    """/29 subnets of the pool to try in turn, starting at one derived from the session id (a
    taken subnet is refused by dockerd, and the next one is tried)."""
    pool = ipaddress.ip_network(settings.MANGO_SANDBOX_NETWORK_POOL)
    count = 2 ** (SUBNET_PREFIX - pool.prefixlen)
    start = int(hashlib.sha256(session_id.encode()).hexdigest(), 16) % count
    size = 2 ** (32 - SUBNET_PREFIX)
    return [
        str(ipaddress.ip_network((int(pool.network_address) + ((start + n) % count) * size, SUBNET_PREFIX)))
        for n in range(min(attempts, count))
    ]


def network_options(session_id: str, *, icc: bool = False) -> dict:
    return {
        "com.docker.network.bridge.name": bridge_name(session_id),
        "com.docker.network.bridge.enable_icc": "true" if icc else "false",
        "com.docker.network.bridge.enable_ip_masquerade": "true",
    }


def container_spec(session_id: str, *, environment: dict | None = None) -> dict:
    """Keyword arguments of ``containers.create`` that state the sandbox's privileges."""
    uid = settings.MANGO_SANDBOX_UID
    memory = settings.MANGO_SANDBOX_MEMORY
    return {
        **runtime_spec(),
        "user": f"{uid}:{uid}",
        # No capability is needed: every built-in tool runs as the unprivileged uid, for which
        # capabilities would not be effective anyway; the server's own file operations
        # (put_archive/get_archive) are done by dockerd outside the container, and the few execs
        # it runs as root (creating a resource's directory, removing a resource) act only on
        # root-owned paths, so owner permissions suffice (no DAC_OVERRIDE, FOWNER or CHOWN).
        "cap_drop": ["ALL"],
        # No setuid binary can raise privileges; the default seccomp profile applies because
        # none is named.
        "security_opt": ["no-new-privileges"],
        "nano_cpus": int(settings.MANGO_SANDBOX_CPUS * 1e9),
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap beyond the memory limit
        "pids_limit": pids_limit(settings.MANGO_SANDBOX_PIDS),
        "ulimits": [
            {"Name": "nofile", "Soft": settings.MANGO_SANDBOX_NOFILE, "Hard": settings.MANGO_SANDBOX_NOFILE},
        ]
        + (
            [{"Name": "fsize", "Soft": settings.MANGO_SANDBOX_FSIZE_BYTES, "Hard": settings.MANGO_SANDBOX_FSIZE_BYTES}]
            if settings.MANGO_SANDBOX_FSIZE_BYTES > 0
            else []
        ),
        "tmpfs": container_tmpfs(),
        "working_dir": WORKDIR,
        "environment": {
            "HOME": WORKDIR,
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "TMPDIR": TMP_PATH,
            **(environment or {}),
        },
    }
