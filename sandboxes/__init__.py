"""Session sandboxes, behind one interface (``base.SandboxBackend``), chosen once by MANGO_SANDBOX:

* ``docker`` (default, the ``docker/`` package): one isolated container per session.
* ``local_process`` (``local.py``): a folder and plain child processes. **Development only: not
  isolated.**

Callers use the module functions (``sandbox.exec_command(...)``, all keyword-only); they delegate
to the chosen backend and raise SandboxError, never a library's exception.
"""

import shlex
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from sandboxes.base import (
    MAX_OUTPUT_BYTES,
    OUTPUTS_PATH,
    RESOURCE_OWNER_UID,
    WORKDIR,
    ExecResult,
    SandboxBackend,
    SandboxError,
    SandboxGone,
)
from sandboxes.docker import DockerBackend, container_name
from sandboxes.local import LocalProcessBackend
from sandboxes.packages import PackageInstallFailed

__all__ = [
    "MAX_OUTPUT_BYTES",
    "OUTPUTS_PATH",
    "RESOURCE_OWNER_UID",
    "WORKDIR",
    "ExecResult",
    "PackageInstallFailed",
    "SandboxBackend",
    "SandboxError",
    "SandboxGone",
    "container_name",
    "containers",
    "describe",
    "ensure",
    "exec_argv",
    "exec_command",
    "get_archive",
    "get_backend",
    "has_outputs_mount",
    "prepare_image",
    "proxy_remove",
    "put_archive",
    "read_file",
    "remove",
    "remove_path",
    "remove_tree",
    "write_file",
]

BACKENDS: dict[str, type[SandboxBackend]] = {"docker": DockerBackend, "local_process": LocalProcessBackend}
_backend: SandboxBackend | None = None


def get_backend() -> SandboxBackend:
    """The backend MANGO_SANDBOX names, built on first use and kept (STYLE.md 17)."""
    global _backend
    if _backend is None:
        kind = settings.MANGO_SANDBOX
        if kind not in BACKENDS:
            raise SandboxError(f"unknown MANGO_SANDBOX {kind!r} (docker | local_process)")
        _backend = BACKENDS[kind]()
    return _backend


@receiver(setting_changed)
def _reset_backend(*, setting, **kwargs):
    # Tests switch backends with pytest-django's `settings`; the choice is made again.
    global _backend
    if setting == "MANGO_SANDBOX" or setting == "DOCKER_HOST":
        _backend = None


def ensure(*, session_id: str, workspace_id: str, networking: dict | None, image: str | None = None) -> str:
    """Create the session's sandbox if needed (from `image`, default MANGO_SANDBOX_IMAGE) and
    return its reference (container id or folder)."""
    return get_backend().ensure(session_id=session_id, workspace_id=workspace_id, networking=networking, image=image)


def prepare_image(*, session_id: str, workspace_id: str, networking: dict | None, packages_config: dict | None) -> str:
    """The image with the environment's packages installed (cached by package set); raises
    PackageInstallFailed (manager, package) when they cannot be."""
    return get_backend().prepare_image(
        session_id=session_id, workspace_id=workspace_id, networking=networking, packages_config=packages_config
    )


def exec_command(
    *,
    session_id: str,
    command: str,
    timeout: float,
    should_cancel: Callable[[], bool] = lambda: False,
    workdir: str | None = None,
) -> ExecResult:
    """Run `command` with /bin/sh in the sandbox; combined stdout+stderr. Polls `should_cancel`
    every 100 ms and kills the command with its children when it says so (or on timeout)."""
    return get_backend().exec_command(
        session_id=session_id, command=command, timeout=timeout, should_cancel=should_cancel, workdir=workdir
    )


def exec_argv(*, session_id: str, argv: list[str], timeout: float = 60) -> ExecResult:
    return exec_command(session_id=session_id, command=shlex.join(argv), timeout=timeout)


def write_file(*, session_id: str, path: str, data: bytes) -> None:
    get_backend().write_file(session_id=session_id, path=path, data=data)


def read_file(*, session_id: str, path: str, max_bytes: int = 10 * 1024 * 1024) -> bytes:
    """Raises FileNotFoundError, IsADirectoryError or ValueError (too large)."""
    return get_backend().read_file(session_id=session_id, path=path, max_bytes=max_bytes)


def remove(*, session_id: str) -> None:
    """Stop and remove the session's sandbox and everything created with it. Idempotent."""
    get_backend().remove(session_id=session_id)


def proxy_remove(*, session_id: str) -> None:
    """Remove the session's egress proxy with the secrets it holds (a credential was revoked or
    changed); the next ``ensure`` makes it again with the current ones. Idempotent."""
    get_backend().proxy_remove(session_id=session_id)


def containers(*, session_id: str) -> list[dict]:
    """The docker containers labelled with this session (empty for local_process)."""
    return get_backend().containers(session_id=session_id)


def has_outputs_mount(*, session_id: str) -> bool:
    """True only for a sandbox whose outputs mount this server made. Anything else (no
    container, an older container, local_process) has no outputs mount: fail closed."""
    return get_backend().has_outputs_mount(session_id=session_id)


def get_archive(*, session_id: str, path: str = OUTPUTS_PATH) -> tuple[Iterator[bytes], dict]:
    """Stream a tar archive of `path` in the session's sandbox: (chunks, stat). Raises
    SandboxError when there is no sandbox or it lacks the outputs mount (fail closed)."""
    return get_backend().get_archive(session_id=session_id, path=path)


def describe(*, session_id: str) -> str:
    """A one-line state for the admin."""
    return get_backend().describe(session_id=session_id)


def put_archive(*, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
    """Extract a tar stream (an iterable of chunks, sent as it is produced: bounded memory) at
    `directory` in the session's sandbox, creating the directory first."""
    get_backend().put_archive(session_id=session_id, directory=directory, chunks=chunks)


def remove_path(*, session_id: str, path: str) -> None:
    get_backend().remove_path(session_id=session_id, path=path)


def remove_tree(*, session_id: str, path: str) -> None:
    """Remove a directory and everything below it (a repository's working tree). Idempotent."""
    get_backend().remove_tree(session_id=session_id, path=path)
