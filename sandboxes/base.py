"""The one interface every sandbox backend implements (STYLE.md 17), and what they share.

A backend is a stateless object; all methods take keyword arguments and raise SandboxError (never
a library's own exception) when the sandbox cannot be created or reached. ``read_file`` also
raises FileNotFoundError, IsADirectoryError or ValueError (too large), which the tools turn into
tool errors.
"""

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from processors.outputs import OUTPUTS_DIR

logger = logging.getLogger(__name__)

OUTPUTS_PATH = OUTPUTS_DIR  # where the sandbox's outputs mount sits (processors.outputs, the one constant)
WORKDIR = "/workspace"
# Owner of file resources placed in a sandbox ("nobody"): not the sandbox's user.
RESOURCE_OWNER_UID = 65534
MAX_OUTPUT_BYTES = 1024 * 1024
POLL_SECONDS = 0.1


class SandboxError(Exception):
    """The sandbox could not be created or reached."""


class SandboxGone(SandboxError):
    """The session's sandbox is not there (or not running) any more: nothing of the call ran. The
    caller provisions it again (runtime.sandbox_ready) and retries."""


_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def size_bytes(value: str | int) -> int:
    """`10g`, `512m`, `1048576` (Docker's and tmpfs's binary units) as bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(value).lower())
    if not match:
        raise SandboxError(f"not a size: {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass
class ExecResult:
    output: bytes
    exit_code: int | None
    timed_out: bool = False
    cancelled: bool = False
    truncated: bool = False


class OutputCollector:
    """Keeps the first MAX_OUTPUT_BYTES of a command's output and notes whether more came."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES):
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if room > 0:
            self.chunks.append(chunk[:room])
        self.truncated = self.truncated or len(chunk) > room
        self.size += min(len(chunk), max(room, 0))

    def value(self) -> bytes:
        return b"".join(self.chunks)


def supervise(
    *, done: Callable[[], bool], kill: Callable[[], None], timeout: float, should_cancel: Callable[[], bool]
) -> tuple[bool, bool]:
    """Wait until `done()`, polling `should_cancel` every POLL_SECONDS (sooner at first); on cancel or past the
    deadline call `kill()` (which must not return before the command is dead or unreachable).
    Returns (cancelled, timed_out)."""
    deadline = time.monotonic() + timeout
    interval = POLL_SECONDS / 16  # short commands are seen done within milliseconds
    while not done():
        time.sleep(interval)
        interval = min(POLL_SECONDS, interval * 2)
        if done():
            break
        cancelled = should_cancel()
        timed_out = not cancelled and time.monotonic() > deadline
        if cancelled or timed_out:
            kill()
            return cancelled, timed_out
    return False, False


def reader_thread(chunks: Iterable[bytes], collector: OutputCollector) -> threading.Thread:
    """Drain `chunks` into `collector` on a daemon thread; a stream that breaks (the command was
    killed, the connection dropped) just ends the output."""

    def read():
        try:
            for chunk in chunks:
                collector.add(chunk)
        except Exception:  # any transport error ends the output, as EOF does
            logger.debug("command output stream ended", exc_info=True)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


class SandboxBackend:
    """One sandbox per session. Subclasses implement every method."""

    name = "abstract"
    # Whether idle sandboxes are checkpointed and removed (sessions.runtime.sleep): they need
    # get_archive/put_archive of /workspace and the outputs tree, and sessions_present.
    sleeps = False

    def ensure(self, *, session_id: str, workspace_id: str, networking: dict | None, image: str | None = None) -> str:
        """Create the session's sandbox if needed (durable across turns) and start it, from
        `image` (default MANGO_SANDBOX_IMAGE); return its reference (container id or folder)."""
        raise NotImplementedError

    def prepare_image(
        self, *, session_id: str, workspace_id: str, networking: dict | None, packages_config: dict | None
    ) -> str:
        """The image holding the environment's packages (sandbox/packages.py); raises
        PackageInstallFailed when they cannot be installed."""
        raise NotImplementedError

    def exec_command(
        self,
        *,
        session_id: str,
        command: str,
        timeout: float,
        should_cancel: Callable[[], bool],
        workdir: str | None = None,
    ) -> ExecResult:
        """Run `command` with /bin/sh; combined stdout+stderr. Polls `should_cancel` every 100 ms
        and kills the command with its children when it says so (or on timeout)."""
        raise NotImplementedError

    def write_file(self, *, session_id: str, path: str, data: bytes) -> None:
        raise NotImplementedError

    def read_file(self, *, session_id: str, path: str, max_bytes: int) -> bytes:
        raise NotImplementedError

    def remove(self, *, session_id: str) -> None:
        """Stop and remove the session's sandbox and everything created with it. Idempotent."""
        raise NotImplementedError

    def proxy_remove(self, *, session_id: str) -> None:
        """Remove the session's egress proxy (and the secrets it holds), if it has one; the next
        ``ensure`` makes it again with the credentials it is given then. Idempotent."""
        raise NotImplementedError

    def containers(self, *, session_id: str) -> list[dict]:
        raise NotImplementedError

    def sessions_present(self) -> list[str]:
        """The ids of the sessions whose sandbox (container) this backend's host holds."""
        raise NotImplementedError

    def has_outputs_mount(self, *, session_id: str) -> bool:
        """True only when OUTPUTS_PATH is a mount this server made and can archive. Anything else
        must be treated as having no outputs mount: fail closed."""
        raise NotImplementedError

    def get_archive(self, *, session_id: str, path: str) -> tuple[Iterator[bytes], dict]:
        raise NotImplementedError

    def describe(self, *, session_id: str) -> str:
        raise NotImplementedError

    def put_archive(self, *, session_id: str, directory: str, chunks: Iterable[bytes]) -> None:
        raise NotImplementedError

    def remove_path(self, *, session_id: str, path: str) -> None:
        raise NotImplementedError

    def remove_tree(self, *, session_id: str, path: str) -> None:
        raise NotImplementedError
