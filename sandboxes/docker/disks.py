"""A sandbox's on-disk filesystems (/workspace, /mnt/session/outputs): one ext4 filesystem each,
of the size its setting gives, in a sparse file on the Docker host's disk behind a loop device,
mounted by dockerd as a ``local`` volume (``type=ext4``, ``device=`` the loop's node). Made
through the Docker API alone: a short-lived helper container (``disk_helper.py``, root with
CAP_SYS_ADMIN and CAP_MKNOD, access to the loop devices only, no network) creates and attaches
them, and holds them until the sandbox container has started. See ``disk_helper.py`` for why
nothing leaks (autoclear, unlinked files) and why a stopped sandbox cannot be started again.

The helper never runs tenant code: it runs our program, with arguments of our own.
"""

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from docker.errors import APIError, NotFound

from sandboxes.base import SandboxError

logger = logging.getLogger(__name__)

HELPER_SOURCE = Path(__file__).resolve().parent.parent / "disk_helper.py"
SCRATCH_VOLUME = "mango-sandbox-disks"  # where the sparse files are made (and unlinked at once)
READY_SECONDS = 60
LABEL_ROLE = "mango.role"


def _scratch_root(client) -> str:
    """The host path of the scratch volume (made on first use): dockerd mounts the loop nodes
    the helper makes there."""
    try:
        volume = client.volumes.get(SCRATCH_VOLUME)
    except NotFound:
        volume = client.volumes.create(SCRATCH_VOLUME, labels={LABEL_ROLE: "disks"})
    return volume.attrs["Mountpoint"]


def helper_spec() -> dict:
    """Root in the helper, but only what attaching loop devices needs: CAP_SYS_ADMIN (the loop
    ioctls), CAP_MKNOD (the node dockerd mounts), the loop devices (block major 7) and
    /dev/loop-control in its device cgroup; no network, bounded memory and pids."""
    return {
        "user": "0:0",
        "cap_drop": ["ALL"],
        "cap_add": ["SYS_ADMIN", "MKNOD"],
        "security_opt": ["no-new-privileges"],
        "devices": ["/dev/loop-control:/dev/loop-control:rwm"],
        "device_cgroup_rules": ["b 7:* rwm", "c 10:237 rwm"],
        "network_mode": "none",
        "mem_limit": "256m",
        "memswap_limit": "256m",
        "pids_limit": 32,
    }


@contextlib.contextmanager
def attached(client, *, session_id: str, labels: dict, disks: list[tuple[str, int]]) -> Iterator[dict[str, str]]:
    """Within the block, {name: host path of the loop device node} of fresh filesystems of the
    given sizes; the caller creates and starts the container that mounts them inside it. On
    leaving, the helper lets go: what no started container mounted is freed."""
    incarnation = f"{session_id}-{os.urandom(4).hex()}"
    config = {
        "incarnation": incarnation,
        "host_root": _scratch_root(client),
        "disks": [{"name": name, "bytes": size} for name, size in disks],
    }
    helper = client.containers.create(
        settings.MANGO_SANDBOX_HELPER_IMAGE,
        command=["python3", "-c", HELPER_SOURCE.read_text()],
        name=f"mango-disks-{incarnation}",
        labels={**labels, LABEL_ROLE: "disks"},
        environment={"MANGO_DISKS": json.dumps(config)},
        volumes={SCRATCH_VOLUME: {"bind": "/disks", "mode": "rw"}},
        stdin_open=True,
        **helper_spec(),
    )
    stdin = None
    try:
        stdin = helper.attach_socket(params={"stdin": 1, "stream": 1})
        helper.start()
        yield _ready(helper)
    finally:
        if stdin is not None:
            # End of input (StdinOnce): the helper removes the nodes and exits; the mounts keep
            # the devices. A worker that dies here closes the connection, which does the same.
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(stdin.fileno())) as raw:
                raw.shutdown(socket.SHUT_WR)
            stdin.close()
        with contextlib.suppress(NotFound, APIError):
            helper.wait(timeout=10)
        with contextlib.suppress(NotFound, APIError):
            helper.remove(force=True)


def _ready(helper) -> dict[str, str]:
    deadline = time.monotonic() + READY_SECONDS
    while True:
        logs = helper.logs(stdout=True, stderr=False)
        if b"ready " in logs:
            return json.loads(logs.split(b"ready ", 1)[1].split(b"\n", 1)[0])
        helper.reload()
        if helper.status == "exited" or time.monotonic() > deadline:
            tail = helper.logs(tail=5).decode(errors="replace").strip()
            raise SandboxError(f"the sandbox's disks could not be made: {tail or helper.status}")
        time.sleep(0.02)
