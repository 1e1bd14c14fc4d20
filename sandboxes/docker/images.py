"""The image a session's sandbox starts from: MANGO_SANDBOX_IMAGE, or one derived from it with the
environment's packages installed (``sandboxes/packages.py``), built in an install container and
cached by package set, at most MANGO_WORKSPACE_MAX_PACKAGE_IMAGES per workspace.
"""

import json
import logging
import time

from django.conf import settings
from docker.errors import APIError, NotFound

from core import caps
from core.errors import RateLimited
from sandboxes import packages, policy
from sandboxes.base import OutputCollector, reader_thread, supervise
from sandboxes.docker.common import LABEL_WORKSPACE, DockerClient, _labels, _translated, install_name

logger = logging.getLogger(__name__)

INSTALL_OUTPUT_BYTES = 256 * 1024
INSTALL_DISK_CHECK_SECONDS = 2.0
INSTALL_SLOT_WAIT_SECONDS = 2.0


class ImagesMixin(DockerClient):
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


def _last_lines(output: str, lines: int = 8, chars: int = 600) -> str:
    kept = "\n".join(line for line in output.strip().splitlines()[-lines:])
    return kept[-chars:] or "no output"
