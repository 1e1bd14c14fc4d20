"""The session's sandbox container: made on the first tool call from its image, with the
privileges, writable mounts and network ``policy.py`` states, its disks (``disks.py``), and the
proxy and networks of ``egress.py``; found, described and removed with everything labelled with
its session.
"""

import logging
import os

import docker
from django.conf import settings
from docker.errors import APIError, NotFound

from sandboxes import policy
from sandboxes.base import SandboxBackend, SandboxError
from sandboxes.docker import disks
from sandboxes.docker.common import (
    LABEL_OUTPUTS_MOUNT,
    LABEL_SESSION,
    OUTPUTS_MOUNT_VERSION,
    _labels,
    _translated,
    container_name,
)
from sandboxes.docker.egress import EgressMixin
from sandboxes.docker.images import ImagesMixin
from sandboxes.docker.operations import OperationsMixin

logger = logging.getLogger(__name__)


class DockerBackend(OperationsMixin, EgressMixin, ImagesMixin, SandboxBackend):
    name = "docker"
    sleeps = True

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

    def describe(self, *, session_id: str) -> str:
        try:
            found = self.containers(session_id=session_id)
        except SandboxError as exc:
            return f"docker unreachable: {exc}"
        if not found:
            return "no container"
        return "; ".join(f"{c['name']} {c['status']}" for c in found)
