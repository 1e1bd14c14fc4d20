"""What the Docker backend's modules share: the client (one per process, MANGO_SANDBOX's
DOCKER_HOST), the names and labels of a session's containers, and the translation of the
library's exceptions (DockerException, the transport's RequestException) into SandboxError.
"""

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import requests
from django.conf import settings
from docker.errors import DockerException, NotFound

from sandboxes.base import SandboxError, SandboxGone

OUTPUTS_MOUNT_VERSION = "1"
LABEL_SESSION = "mango.session"
# How long a sandbox another creator is making at once may take to become visible by name.
CONCURRENT_CREATE_SECONDS = 10.0
LABEL_WORKSPACE = "mango.workspace"
LABEL_OUTPUTS_MOUNT = "mango.outputs_mount_version"
LABEL_PROXY_HOLDS = "mango.proxy_holds"  # the egress proxy's policy.proxy_fingerprint
ROOT = "0:0"
# The programs the containers run (standard library only), next to the package.
PROGRAMS = Path(__file__).resolve().parent.parent


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


def _translated_stream(stream: Iterator[bytes]) -> Iterator[bytes]:
    """The archive is read lazily by the caller: errors while streaming are translated too."""
    try:
        yield from stream
    except (DockerException, requests.RequestException) as exc:
        raise SandboxError(str(exc)) from exc


class DockerClient:
    """The client and the lookups by name every part of the backend uses."""

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
