"""The ``docker`` backend: the only package that imports ``docker`` (STYLE.md 8).

One durable container per session, created lazily on the first tool call, from
MANGO_SANDBOX_IMAGE (it needs nothing but /bin/sh; python3 for ``call_reaper.py``), with the
privileges, writable mounts and network that ``policy.py`` states (issue #10) and its disks
(``disks.py``). A container that is not running is never started again: its disks went when it
stopped, so it is removed and made anew. Labels: ``mango.session``, ``mango.workspace`` and
``mango.outputs_mount_version`` on the container, its volumes and its network. Containers
without that label predate the outputs mount and are treated as having no outputs (fail closed).

Control stays on the host side: interrupt and tool timeouts kill from a separate exec that the
command cannot redirect (``operations.py``); the server's file operations go through dockerd
(put_archive/get_archive) or through execs whose arguments the sandbox cannot influence.

Every public method translates the library's exceptions (DockerException, and the transport's
RequestException) into SandboxError.

By role: ``common.py`` (the client, names, labels, exception translation), ``containers.py``
(the backend: the container, made, found and removed), ``operations.py`` (commands and files
inside it), ``egress.py`` (its networks and egress proxy), ``images.py`` (the image with the
environment's packages), ``disks.py`` (its on-disk /workspace and outputs).
"""

from sandboxes.docker.common import container_name, install_name, proxy_name
from sandboxes.docker.containers import DockerBackend

__all__ = ["DockerBackend", "container_name", "install_name", "proxy_name"]
