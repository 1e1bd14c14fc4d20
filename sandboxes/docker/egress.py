"""A sandbox's networks and egress proxy: its own bridge (a NAT bridge for ``unrestricted``, an
internal one for ``limited``), the proxy that holds the allow-list and substitutes vault
credentials (``sandboxes/egress_proxy.py`` in a container on MANGO_SANDBOX_EGRESS_NETWORK), and
the CA certificate the sandbox trusts for it.
"""

import io
import os
import tarfile
import time

import docker
from django.conf import settings
from docker.errors import APIError, NotFound

from sandboxes import firewall, policy
from sandboxes.base import SandboxError
from sandboxes.docker.common import (
    LABEL_PROXY_HOLDS,
    LABEL_SESSION,
    LABEL_WORKSPACE,
    PROGRAMS,
    DockerClient,
    _labels,
    _translated,
    proxy_name,
)

# The egress proxy's program (standard library only), run by the proxy image's python3.
PROXY_SOURCE = PROGRAMS / "egress_proxy.py"
PROXY_READY_SECONDS = 15


class EgressMixin(DockerClient):
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
