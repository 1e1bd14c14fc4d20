"""The ``docker`` backend: the only module that imports ``docker`` (STYLE.md 8).

One durable container per session, created lazily on the first tool call, from
MANGO_SANDBOX_IMAGE (it needs nothing but /bin/sh; python3 for ``call_reaper.py``), with the
privileges, writable mounts and network that ``policy.py`` states (issue #10) and its disks
(``disks.py``). A container that is not running is never started again: its disks went when it
stopped, so it is removed and made anew. Labels: ``mango.session``, ``mango.workspace`` and
``mango.outputs_mount_version`` on the container, its volumes and its network. Containers
without that label predate the outputs mount and are treated as having no outputs (fail closed).

Control stays on the host side: interrupt and tool timeouts kill from a separate exec that the
command cannot redirect (``_kill_commands``); the server's file operations go through dockerd
(put_archive/get_archive) or through execs whose arguments the sandbox cannot influence.

Every public method translates the library's exceptions (DockerException, and the transport's
RequestException) into SandboxError.
"""

import functools
import io
import json
import logging
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import docker
import requests
from django.conf import settings
from docker.errors import APIError, DockerException, NotFound

from core import caps
from core.errors import RateLimited
from sandboxes import disks, firewall, packages, policy
from sandboxes.base import (
    WORKDIR,
    ExecResult,
    OutputCollector,
    SandboxBackend,
    SandboxError,
    SandboxGone,
    reader_thread,
    supervise,
)

logger = logging.getLogger(__name__)

OUTPUTS_MOUNT_VERSION = "1"
LABEL_SESSION = "mango.session"
# How long a sandbox another creator is making at once may take to become visible by name.
CONCURRENT_CREATE_SECONDS = 10.0
LABEL_WORKSPACE = "mango.workspace"
LABEL_OUTPUTS_MOUNT = "mango.outputs_mount_version"
LABEL_PROXY_HOLDS = "mango.proxy_holds"  # the egress proxy's policy.proxy_fingerprint
ROOT = "0:0"
# Kills every process of the sandbox user except pid 1 (kill(-1) spares init and the caller),
# repeated so that a process forked during one sweep dies in the next.
_KILL_ALL = "for i in 1 2 3 4 5; do kill -KILL -1 2>/dev/null; done; true"
# Run as root: fails unless every existing ancestor of $1 is root-owned and not writable by
# others without the sticky bit, so the sandbox user cannot rename a resource's directory away.
_ROOT_DIRECTORY = """mkdir -p "$1" || exit 1
d="$1"
while [ "$d" != / ]; do
  set -- $(stat -c '%u %a' "$d")
  [ "$1" = 0 ] || { echo "$d is owned by the sandbox user"; exit 3; }
  case "$2" in 1???) ;; *[2367]|*[2367]?) echo "$d is writable by the sandbox user"; exit 3 ;; esac
  d=$(dirname "$d")
done"""


# The egress proxy's program (standard library only), run by the proxy image's python3.
PROXY_SOURCE = Path(__file__).resolve().parent / "egress_proxy.py"
# Every command runs under call_reaper.py (what it leaves running dies with it), by python3 when
# the image has it, else by the shell alone.
REAPER_SOURCE = (Path(__file__).resolve().parent / "call_reaper.py").read_text()
_REAPED = (
    "command -v python3 >/dev/null 2>&1 && "
    'exec python3 -S -c "import os; exec(os.environ.pop(\'MANGO_REAPER\'))" "$1"; '
    'unset MANGO_REAPER; exec /bin/sh -c "$1"'
)
KILLER_NAME = "mango-kill-{}"
PROXY_READY_SECONDS = 15
INSTALL_OUTPUT_BYTES = 256 * 1024
INSTALL_DISK_CHECK_SECONDS = 2.0
INSTALL_SLOT_WAIT_SECONDS = 2.0


def container_name(session_id: str) -> str:
    return f"mango-sbx-{session_id}"


def proxy_name(session_id: str) -> str:
    return f"mango-egress-{session_id}"


def install_name(session_id: str) -> str:
    return f"mango-install-{session_id}"


def _labels(session_id: str, workspace_id: str) -> dict:
    return {LABEL_SESSION: session_id, LABEL_WORKSPACE: workspace_id}


def _translated(method):
    """Library exceptions leave this module as SandboxError only."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (DockerException, requests.RequestException) as exc:
            raise SandboxError(str(exc)) from exc

    return wrapper


def _tar_one(name: str, data: bytes, *, uid: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o600
        info.uid = info.gid = uid
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class DockerBackend(SandboxBackend):
    name = "docker"
    sleeps = True

    def __init__(self):
        self._client_lock = threading.Lock()
        self._client: docker.DockerClient | None = None

    def _docker(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                if settings.DOCKER_HOST:
                    self._client = docker.DockerClient(base_url=settings.DOCKER_HOST, timeout=60)
                else:
                    self._client = docker.from_env(timeout=60)
            return self._client

    def _get_container(self, session_id: str):
        try:
            return self._docker().containers.get(container_name(session_id))
        except NotFound:
            return None

    def _require_container(self, session_id: str):
        container = self._get_container(session_id)
        if container is None:
            raise SandboxGone("the sandbox container is gone")
        return container

    def _concurrent_container(self, session_id: str):
        """The container another creator made at the same time (the name was taken): dockerd
        reserves the name before the container can be read by it, so it is looked for a while."""
        deadline = time.monotonic() + CONCURRENT_CREATE_SECONDS
        while (container := self._get_container(session_id)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if container is None:
            raise SandboxError("the sandbox container is gone")
        return container

    @_translated
    def ensure(self, *, session_id: str, workspace_id: str, networking: dict | None, image: str | None = None) -> str:
        container = self._get_container(session_id)
        if container is None:
            container = self._create(session_id, workspace_id, networking, image or settings.MANGO_SANDBOX_IMAGE)
            if container is not None:
                return container.id  # created and started
            container = self._concurrent_container(session_id)
        if container.status != "running":
            # Its disks went with it (disks.py): never started again, made anew.
            logger.warning("sandbox container found %s; made anew", container.status, extra={"session_id": session_id})
            self.remove(session_id=session_id)
            return self.ensure(session_id=session_id, workspace_id=workspace_id, networking=networking, image=image)
        self._proxy_current(session_id, container, networking)
        return container.id

    def _proxy_current(self, session_id: str, container, networking: dict | None) -> None:
        """A running sandbox made with an egress proxy (its environment points at one) gets one
        holding the credentials it is given now: a proxy removed on a revocation
        (sessions/services/sandboxes.py) or holding other values is made again, and the sandbox
        trusts the new one's CA. Only credentials whose placeholder the sandbox already has are
        kept: a credential added since is not in its environment (nor its CA in its trust)."""
        environment = container.attrs.get("Config", {}).get("Env") or []
        if not any(item.startswith("HTTP_PROXY=") for item in environment):
            return
        known = set(environment)
        credentials = [
            credential
            for credential in (networking or {}).get("credentials") or []
            if f"{credential['name']}={credential['placeholder']}" in known
        ]
        hosts = ["*"] if policy.is_unrestricted(networking) else self._limited_hosts(networking)
        try:
            proxy = self._docker().containers.get(proxy_name(session_id))
        except NotFound:
            proxy = None
        if (
            proxy is not None
            and proxy.status == "running"
            and proxy.labels.get(LABEL_PROXY_HOLDS) == policy.proxy_fingerprint(hosts, credentials)
        ):
            return
        labels = _labels(session_id, container.labels.get(LABEL_WORKSPACE, ""))
        name = policy.network_name(session_id)
        subnet = self._docker().networks.get(name).attrs["IPAM"]["Config"][0]["Subnet"]
        _address, authority = self._proxy(session_id, labels, name, policy.proxy_address(subnet), hosts, credentials)
        if authority:
            self._place_authority(session_id, authority)

    @staticmethod
    def _limited_hosts(networking: dict | None) -> list[str]:
        hosts = (networking or {}).get("egress_hosts")
        return policy.egress_hosts(networking) if hosts is None else hosts

    @_translated
    def proxy_remove(self, *, session_id: str) -> None:
        try:
            self._docker().containers.get(proxy_name(session_id)).remove(force=True)
        except NotFound:
            pass

    @_translated
    def prepare_image(
        self, *, session_id: str, workspace_id: str, networking: dict | None, packages_config: dict | None
    ) -> str:
        """The image the session's sandbox starts from: MANGO_SANDBOX_IMAGE, or with packages the
        image derived from it that holds them (built now unless cached). Raises
        PackageInstallFailed naming the manager and the package when an install fails."""
        base_name = settings.MANGO_SANDBOX_IMAGE
        wanted = packages.listed(packages_config)
        if not wanted:
            return base_name
        client = self._docker()
        base = client.images.get(base_name)
        tag = packages.image_tag(
            workspace_id=workspace_id,
            base_image_id=base.id,
            packages=packages_config,
            networking=json.dumps(
                {key: value for key, value in (networking or {}).items() if key != "credentials"}, sort_keys=True
            ),
        )
        try:
            client.images.get(tag)
            return tag  # cached
        except NotFound:
            pass
        labels = _labels(session_id, workspace_id)
        network_mode, environment, _authority = self._network_mode(session_id, labels, networking)
        if network_mode == "none":
            raise packages.PackageInstallFailed(
                wanted[0][0], None, "the environment's networking reaches no package registry"
            )
        gate = caps.thread_gate()
        slot = self._install_slot(gate, workspace_id)
        try:
            self._build(base, tag, session_id, workspace_id, network_mode, environment, wanted)
        finally:
            gate.release(slot)
        self._evict_package_images(workspace_id, keep=tag)
        return tag

    def _install_slot(self, gate: caps.ThreadGate, workspace_id: str):
        """One of the workspace's MANGO_WORKSPACE_MAX_INSTALLS slots, waited for a while."""
        limit = settings.MANGO_WORKSPACE_MAX_INSTALLS
        if limit <= 0:
            return None
        deadline = time.monotonic() + settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS
        while True:
            try:
                return gate.take(kind="installs", workspace_id=workspace_id, limit=limit)
            except RateLimited:
                if time.monotonic() > deadline:
                    raise packages.PackageInstallFailed(
                        "packages", None, f"the workspace already runs {limit} package installs (at most {limit})"
                    ) from None
                time.sleep(INSTALL_SLOT_WAIT_SECONDS)

    def _build(self, base, tag: str, session_id: str, workspace_id: str, network_mode: str, environment: dict, wanted):
        client = self._docker()
        name = install_name(session_id)
        try:
            client.containers.get(name).remove(force=True)  # a build a dead worker left behind
        except NotFound:
            pass
        container = client.containers.run(
            base.id,
            command=["/bin/sh", "-c", policy.KEEPALIVE],
            name=name,
            detach=True,
            labels=_labels(session_id, workspace_id),
            network_mode=network_mode,
            environment={**environment, "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"},
            **policy.install_spec(),
        )
        try:
            deadline = time.monotonic() + settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS
            for manager, entries in wanted:
                for argv in packages.commands(manager, entries):
                    status, output = self._install_step(container, argv, deadline)
                    if status != 0:
                        package = packages.blamed(manager, entries, output)
                        if package is None and status > 0 and len(entries) > 1:
                            package = self._blame_alone(container, manager, entries, deadline)
                        raise packages.PackageInstallFailed(manager, package, _last_lines(output))
            config = base.attrs["Config"]
            container.commit(
                repository=tag.split(":")[0],
                tag=tag.split(":")[1],
                conf={
                    "Env": config.get("Env"),
                    "Cmd": config.get("Cmd"),
                    "WorkingDir": config.get("WorkingDir"),
                    "User": config.get("User") or "",
                    "Labels": {
                        **(config.get("Labels") or {}),
                        LABEL_WORKSPACE: workspace_id,
                        packages.LABEL_PACKAGES: json.dumps(wanted),
                    },
                },
            )
        finally:
            try:
                container.remove(force=True)
            except NotFound:
                pass

    def _install_step(self, container, argv: list[str], deadline: float) -> tuple[int, str]:
        """Run one install command as root; past the deadline or past
        MANGO_SANDBOX_INSTALL_MAX_BYTES written, kill the build (status -1) and say why."""
        api = self._docker().api
        exec_id = api.exec_create(container.id, argv, stdout=True, stderr=True, user="0:0")["Id"]
        collector = OutputCollector(limit=INSTALL_OUTPUT_BYTES)
        reader = reader_thread(api.exec_start(exec_id, stream=True), collector)
        checked = [time.monotonic()]
        too_big = [False]

        def over_disk() -> bool:
            if time.monotonic() - checked[0] < INSTALL_DISK_CHECK_SECONDS:
                return False
            checked[0] = time.monotonic()
            found = api.containers(all=True, filters={"id": container.id}, size=True)
            too_big[0] = bool(found) and (found[0].get("SizeRw") or 0) > settings.MANGO_SANDBOX_INSTALL_MAX_BYTES
            return too_big[0]

        def kill():
            container.kill()
            reader.join(2.0)

        cancelled, timed_out = supervise(
            done=lambda: not reader.is_alive(),
            kill=kill,
            timeout=max(deadline - time.monotonic(), 0.1),
            should_cancel=over_disk,
        )
        output = collector.value().decode(errors="replace")
        if timed_out:
            limit = settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS
            return -1, f"the install took longer than {limit:g} s (MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS)"
        if cancelled:
            limit = settings.MANGO_SANDBOX_INSTALL_MAX_BYTES
            return -1, f"the install wrote more than {limit} bytes (MANGO_SANDBOX_INSTALL_MAX_BYTES)"
        return api.exec_inspect(exec_id).get("ExitCode") or 0, output

    def _blame_alone(self, container, manager: str, entries: list[str], deadline: float) -> str | None:
        """The first entry that fails when installed alone (the output named none)."""
        for entry in entries:
            for argv in packages.commands(manager, [entry]):
                status, _output = self._install_step(container, argv, deadline)
                if status < 0:
                    return None
                if status != 0:
                    return entry
        return None

    def _evict_package_images(self, workspace_id: str, *, keep: str) -> None:
        """At most MANGO_WORKSPACE_MAX_PACKAGE_IMAGES derived images per workspace: the oldest go
        (one in use by a sandbox stays; it goes on a later build)."""
        client = self._docker()
        found = client.images.list(name=packages.REPOSITORY, filters={"label": f"{LABEL_WORKSPACE}={workspace_id}"})
        found.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
        for image in found[settings.MANGO_WORKSPACE_MAX_PACKAGE_IMAGES :]:
            if keep in image.tags:
                continue
            try:
                client.images.remove(image.id)
            except APIError:
                logger.info("derived image %s is in use; kept for now", image.tags)

    def _create(self, session_id: str, workspace_id: str, networking: dict | None, image: str):
        client = self._docker()
        labels = _labels(session_id, workspace_id)
        network_mode, environment, authority = self._network_mode(session_id, labels, networking)
        with disks.attached(client, session_id=session_id, labels=labels, disks=policy.disk_sizes()) as devices:
            incarnation = os.urandom(4).hex()
            # Named volumes declared as mounts are created by dockerd with the container (one
            # round trip less each); nothing of the image is copied into them.
            mounts = [
                docker.types.Mount(
                    target,
                    name,
                    type="volume",
                    no_copy=True,
                    driver_config=docker.types.DriverConfig("local", options),
                    labels=labels,
                )
                for name, target, options in policy.volume_specs(session_id, incarnation, devices)
            ]
            try:
                container = client.containers.run(
                    image,
                    command=["/bin/sh", "-c", policy.KEEPALIVE],
                    name=container_name(session_id),
                    detach=True,
                    labels={**labels, LABEL_OUTPUTS_MOUNT: OUTPUTS_MOUNT_VERSION},
                    network_mode=network_mode,
                    mounts=mounts,
                    **policy.container_spec(session_id, environment=environment),
                )
            except APIError as exc:
                self._volumes_remove(session_id, incarnation)
                if exc.status_code == 409:
                    return None
                raise SandboxError(f"could not create the sandbox container: {exc}") from exc
        if authority:
            self._place_authority(session_id, authority)
        return container

    def _volumes_remove(self, session_id: str, incarnation: str | None = None) -> None:
        """The session's volumes (of one incarnation, or all): none is in use by then."""
        for volume in self._docker().volumes.list(filters={"label": f"{LABEL_SESSION}={session_id}"}):
            if incarnation is None or volume.name.endswith(f"-{incarnation}"):
                try:
                    volume.remove(force=True)
                except NotFound:
                    pass
                except APIError:
                    logger.warning("volume %s still in use; left for the next removal", volume.name)

    def _network_mode(self, session_id: str, labels: dict, networking: dict | None) -> tuple[str, dict, str | None]:
        """(network_mode, environment, CA certificate) of the session's sandbox and of its build
        container: unrestricted, its own NAT bridge; limited with an allow-list, its internal
        bridge and egress proxy (the environment points the clients at it); anything else, no
        network. With vault environment_variable credentials the proxy is there in both cases
        (it substitutes them): the environment then holds their placeholders and the CA
        certificate (placed by ``_place_authority``) the sandbox trusts for it."""
        networking = networking or {}
        credentials = networking.get("credentials") or []
        if policy.is_unrestricted(networking):
            firewall.ensure_rules()
            name = self._network(session_id, labels, shared=bool(credentials))
            if not credentials:
                return name, {}, None
            hosts = ["*"]
        else:
            hosts = self._limited_hosts(networking)
            if not hosts:
                return "none", {}, None
            firewall.ensure_rules()
            name = self._network(session_id, labels, internal=True)
        subnet = self._docker().networks.get(name).attrs["IPAM"]["Config"][0]["Subnet"]
        address, authority = self._proxy(session_id, labels, name, policy.proxy_address(subnet), hosts, credentials)
        return name, policy.proxy_environment(address, credentials=credentials), authority

    def _proxy(
        self, session_id: str, labels: dict, network: str, address: str, hosts: list[str], credentials: list
    ) -> tuple[str, str | None]:
        """The sandbox's egress proxy, running and listening at `address` on the session's
        network (internal for limited, the NAT bridge for unrestricted), reaching out from
        MANGO_SANDBOX_EGRESS_NETWORK: its address, and its CA certificate when it substitutes
        credentials. Credentials go to it on stdin once: a proxy not running, or holding another
        allow-list or other credentials (its label says which), is made again."""
        client = self._docker()
        holds = policy.proxy_fingerprint(hosts, credentials)
        try:
            proxy = client.containers.get(proxy_name(session_id))
            if proxy.status != "running" or proxy.labels.get(LABEL_PROXY_HOLDS) != holds:
                proxy.remove(force=True)
                proxy = None
        except NotFound:
            proxy = None
        if proxy is None:
            proxy = self._new_proxy(session_id, labels, network, address, hosts, credentials)
        deadline = time.monotonic() + PROXY_READY_SECONDS
        while b"ready" not in (logs := proxy.logs(stdout=True, stderr=False)):
            proxy.reload()
            if proxy.status == "exited" or time.monotonic() > deadline:
                tail = proxy.logs(tail=5).decode(errors="replace").strip()
                raise SandboxError(f"the egress proxy did not start: {tail or proxy.status}")
            time.sleep(0.05)
        authority = None
        if b"ca-begin\n" in logs:
            authority = logs.split(b"ca-begin\n", 1)[1].split(b"ca-end", 1)[0].decode()
        return address, authority

    def _new_proxy(self, session_id: str, labels: dict, network: str, address: str, hosts, credentials):
        client = self._docker()
        try:
            proxy = client.containers.create(
                settings.MANGO_SANDBOX_PROXY_IMAGE,
                command=["python3", "-c", PROXY_SOURCE.read_text()],
                name=proxy_name(session_id),
                labels={**labels, LABEL_PROXY_HOLDS: policy.proxy_fingerprint(hosts, credentials)},
                environment={"MANGO_EGRESS": policy.proxy_config(hosts, credentials=bool(credentials))},
                network=self._egress_network(),
                stdin_open=bool(credentials),
                **policy.proxy_spec(),
            )
        except APIError as exc:
            if exc.status_code != 409:
                raise SandboxError(f"could not create the egress proxy: {exc}") from exc
            return client.containers.get(proxy_name(session_id))  # made concurrently
        client.api.connect_container_to_network(proxy.id, network, ipv4_address=address)
        if credentials:
            # The secrets go in on stdin (not the environment or arguments, which `docker
            # inspect` shows and the engine keeps on disk), read once by the proxy at start.
            stdin = proxy.attach_socket(params={"stdin": 1, "stream": 1})
            proxy.start()
            data = memoryview(policy.proxy_secrets(credentials))
            while data:  # the attach stream is read-only as a file object: write to its socket
                data = data[os.write(stdin.fileno(), data) :]
            stdin.close()
        else:
            proxy.start()
        return proxy

    def _place_authority(self, session_id: str, authority: str) -> None:
        """The CA the sandbox trusts for its proxy: with the proxy image's system bundle, at
        policy.CA_DIRECTORY (root's; the environment's SSL_CERT_FILE and co. point there)."""
        client = self._docker()
        proxy = client.containers.get(proxy_name(session_id))
        stream, _stat = proxy.get_archive("/etc/ssl/certs/ca-certificates.crt")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            system = tar.extractfile(member).read() if member is not None and member.isfile() else b""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in (
                (policy.CA_FILE, authority.encode()),
                (policy.CA_BUNDLE_FILE, system.rstrip(b"\n") + b"\n" + authority.encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        self.put_archive(session_id=session_id, directory=policy.CA_DIRECTORY, chunks=[buffer.getvalue()])

    def _egress_network(self) -> str:
        """The network the egress proxies reach out from (MANGO_SANDBOX_EGRESS_NETWORK): made
        here when missing, a NAT bridge under BRIDGE_PREFIX with inter-container traffic off."""
        client = self._docker()
        name = settings.MANGO_SANDBOX_EGRESS_NETWORK
        if any(network.name == name for network in client.networks.list(names=[name])):  # names match parts
            return name
        try:
            client.networks.create(
                name,
                driver="bridge",
                options=policy.egress_network_options(),
                labels={"mango.egress": "1"},
                check_duplicate=True,
            )
        except APIError as exc:
            if exc.status_code != 409 and "already exists" not in str(exc):
                raise SandboxError(f"could not create the egress network: {exc}") from exc
        return name

    def _network(self, session_id: str, labels: dict, *, internal: bool = False, shared: bool = False) -> str:
        """The session's own bridge network (created once; a taken subnet moves to the next):
        a NAT bridge, or with `internal` one that routes nowhere (limited sandboxes). Its
        containers talk to each other only when it is internal or `shared` (the sandbox and its
        proxy: they are alone on it)."""
        client = self._docker()
        name = policy.network_name(session_id)
        if client.networks.list(names=[name], filters={"label": f"{LABEL_SESSION}={session_id}"}):
            return name
        last = None
        options = (
            policy.internal_network_options(session_id) if internal else policy.network_options(session_id, icc=shared)
        )
        for subnet in policy.subnet_candidates(session_id):
            try:
                client.networks.create(
                    name,
                    driver="bridge",
                    internal=internal,
                    options=options,
                    ipam=docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)]),
                    labels=labels,
                    check_duplicate=True,
                )
                return name
            except APIError as exc:
                if exc.status_code == 409 or "already exists" in str(exc):
                    return name
                # Two creators at once (a multiagent session's threads): dockerd may refuse the
                # second with "networks have same bridge name" rather than a 409.
                if client.networks.list(names=[name], filters={"label": f"{LABEL_SESSION}={session_id}"}):
                    return name
                if "overlaps" not in str(exc):
                    raise SandboxError(f"could not create the sandbox network: {exc}") from exc
                last = exc
        raise SandboxError(f"no free subnet for the sandbox network: {last}")

    @_translated
    def exec_command(
        self,
        *,
        session_id: str,
        command: str,
        timeout: float,
        should_cancel: Callable[[], bool],
        workdir: str | None = None,
    ) -> ExecResult:
        # By name, without reading the container first: a running sandbox's tool call is one exec
        # (create, start, inspect) and nothing else (issue 38, provision once).
        api = self._docker().api
        try:
            exec_id = api.exec_create(
                container_name(session_id),
                ["/bin/sh", "-c", _REAPED, "sh", command],
                stdout=True,
                stderr=True,
                environment={"MANGO_REAPER": REAPER_SOURCE},
                workdir=workdir or WORKDIR,
            )["Id"]
        except NotFound as exc:
            raise SandboxGone("the sandbox container is gone") from exc
        except APIError as exc:
            if exc.status_code == 409:  # not running
                raise SandboxGone(f"the sandbox container is not running: {exc.explanation}") from exc
            raise
        collector = OutputCollector()
        reader = reader_thread(api.exec_start(exec_id, stream=True), collector)

        def kill():
            self._kill_commands(self._require_container(session_id))
            reader.join(1.0)

        cancelled, timed_out = supervise(
            done=lambda: not reader.is_alive(), kill=kill, timeout=timeout, should_cancel=should_cancel
        )
        exit_code = None
        if not (cancelled or timed_out):
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        return ExecResult(
            collector.value(), exit_code, timed_out=timed_out, cancelled=cancelled, truncated=collector.truncated
        )

    def _kill_commands(self, container) -> None:
        """Kill every command of the sandbox (the one interrupted and what it left running), from
        an exec of its own: nothing the command wrote (a pid file, /tmp) decides what dies."""
        try:
            result = container.exec_run(["/bin/sh", "-c", _KILL_ALL], user=f"{settings.MANGO_SANDBOX_UID}")
            if result.exit_code == 0:
                return
            logger.warning("the kill exec failed: %s", result.output[:200])
        except APIError:
            logger.warning("could not start the kill exec", exc_info=True)
        # No exec can start (e.g. the commands hold every pid of MANGO_SANDBOX_PIDS): a container
        # of its own (its own pids cgroup) in the sandbox's pid namespace kills them, with
        # CAP_KILL alone. (Restarting the sandbox would lose its disks.)
        client = self._docker()
        killer = client.containers.run(
            settings.MANGO_SANDBOX_HELPER_IMAGE,
            command=["/bin/sh", "-c", _KILL_ALL],
            name=KILLER_NAME.format(f"{container.name}-{os.urandom(3).hex()}"),
            detach=True,
            labels=dict(container.labels),
            pid_mode=f"container:{container.id}",
            network_mode="none",
            user=ROOT,
            cap_drop=["ALL"],
            cap_add=["KILL"],
            security_opt=["no-new-privileges"],
            pids_limit=16,
            mem_limit="64m",
        )
        try:
            killer.wait(timeout=30)
        finally:
            killer.remove(force=True)

    def _exec_root(self, container, argv: list[str]) -> tuple[int, str]:
        """A server-side operation as root in the sandbox (no capabilities: owner rights only)."""
        result = container.exec_run(argv, user=ROOT)
        return result.exit_code, result.output.decode(errors="replace").strip()

    @_translated
    def write_file(self, *, session_id: str, path: str, data: bytes) -> None:
        """Written by the sandbox user (staged in /tmp through dockerd, then copied by an exec as
        that user), so the kernel applies the sandbox's permissions and quotas, not dockerd's."""
        container = self._require_container(session_id)
        staged = f".mango-write-{os.urandom(8).hex()}"
        uid = settings.MANGO_SANDBOX_UID
        if not container.put_archive(policy.TMP_PATH, _tar_one(staged, data, uid=uid)):
            raise SandboxError(f"could not write {path}")
        script = 'mkdir -p "$(dirname "$2")" && cat "$1" > "$2"; status=$?; rm -f "$1"; exit $status'
        result = container.exec_run(
            ["/bin/sh", "-c", script, "sh", f"{policy.TMP_PATH}/{staged}", path], user=f"{uid}:{uid}", workdir=WORKDIR
        )
        if result.exit_code != 0:
            message = result.output.decode(errors="replace").strip() or f"cannot write {path}"
            raise PermissionError(message)

    @_translated
    def read_file(self, *, session_id: str, path: str, max_bytes: int) -> bytes:
        container = self._require_container(session_id)
        try:
            stream, stat = container.get_archive(path)
        except NotFound:
            raise FileNotFoundError(path) from None
        if stat.get("size", 0) > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes} bytes")
        if stat.get("mode", 0) & (1 << 31):
            raise IsADirectoryError(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(path)
            return tar.extractfile(member).read()

    @_translated
    def remove(self, *, session_id: str) -> None:
        client = self._docker()
        by_session = {"label": f"{LABEL_SESSION}={session_id}"}
        for container in client.containers.list(all=True, filters=by_session, ignore_removed=True):
            try:
                container.remove(force=True, v=True)
            except NotFound:
                pass
        self._volumes_remove(session_id)
        for network in client.networks.list(filters=by_session):
            try:
                network.remove()
            except NotFound:
                pass

    @_translated
    def containers(self, *, session_id: str) -> list[dict]:
        found = self._docker().containers.list(
            all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
        )
        return [{"id": c.id, "name": c.name, "status": c.status, "labels": c.labels} for c in found]

    @_translated
    def sessions_present(self) -> list[str]:
        found = self._docker().containers.list(
            all=True, filters={"label": LABEL_SESSION, "name": "mango-sbx-"}, ignore_removed=True
        )
        return sorted(
            {c.labels[LABEL_SESSION] for c in found if c.name == container_name(c.labels.get(LABEL_SESSION, ""))}
        )

    @_translated
    def has_outputs_mount(self, *, session_id: str) -> bool:
        container = self._get_container(session_id)
        return container is not None and container.labels.get(LABEL_OUTPUTS_MOUNT) == OUTPUTS_MOUNT_VERSION

    @_translated
    def get_archive(self, *, session_id: str, path: str) -> tuple[Iterator[bytes], dict]:
        """The chunks come straight from dockerd; nothing is buffered whole."""
        container = self._get_container(session_id)
        if container is None or container.labels.get(LABEL_OUTPUTS_MOUNT) != OUTPUTS_MOUNT_VERSION:
            raise SandboxError("the session's sandbox has no outputs mount")
        try:
            stream, stat = container.get_archive(path, chunk_size=1024 * 1024)
        except NotFound as exc:
            raise SandboxError(f"{path} does not exist in the sandbox") from exc
        return _translated_stream(stream), stat

    def describe(self, *, session_id: str) -> str:
        try:
            found = self.containers(session_id=session_id)
        except SandboxError as exc:
            return f"docker unreachable: {exc}"
        if not found:
            return "no container"
        return "; ".join(f"{c['name']} {c['status']}" for c in found)

    @_translated
    def put_archive(self, *, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
        """The directory is created by root and must be root's all the way up (else the sandbox
        user could move the placed file away with its directory)."""
        container = self._require_container(session_id)
        status, output = self._exec_root(container, ["/bin/sh", "-c", _ROOT_DIRECTORY, "sh", directory])
        if status != 0:
            raise SandboxError(f"could not prepare {directory}: {output}")
        if not container.put_archive(directory, (bytes(chunk) for chunk in chunks)):
            raise SandboxError(f"could not write into {directory}")

    @_translated
    def remove_path(self, *, session_id: str, path: str) -> None:
        container = self._require_container(session_id)
        status, output = self._exec_root(container, ["rm", "-f", path])
        if status != 0:
            raise SandboxError(f"could not remove {path}: {output}")

    @_translated
    def remove_tree(self, *, session_id: str, path: str) -> None:
        """The tree is the sandbox user's (a repository's working tree): that user empties it
        (root here has no CAP_DAC_OVERRIDE), then root removes what is left in a root-owned
        parent. A link at `path` is removed, never followed."""
        container = self._require_container(session_id)
        uid = settings.MANGO_SANDBOX_UID
        container.exec_run(["rm", "-rf", "--", path], user=f"{uid}:{uid}")
        status, output = self._exec_root(container, ["rm", "-rf", "--", path])
        if status != 0:
            raise SandboxError(f"could not remove {path}: {output}")


def _last_lines(output: str, lines: int = 8, chars: int = 600) -> str:
    kept = "\n".join(line for line in output.strip().splitlines()[-lines:])
    return kept[-chars:] or "no output"


def _translated_stream(stream: Iterator[bytes]) -> Iterator[bytes]:
    """The archive is read lazily by the caller: errors while streaming are translated too."""
    try:
        yield from stream
    except (DockerException, requests.RequestException) as exc:
        raise SandboxError(str(exc)) from exc
