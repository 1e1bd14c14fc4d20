"""A session's tool host: where its built-in tools (bash, the file tools) run. Chosen once, here,
from the environment the session was created with and the deployment's MANGO_SANDBOX; every
question about it (does this worker run a confirmed tool, is there a sandbox to clone into, are
outputs published from a Docker mount) is a property of the one object ``tool_host`` returns.

* ``DOCKER`` — a Docker sandbox of ours per session (``sandboxes.docker``): a cloud environment
  with MANGO_SANDBOX=docker. Outputs are published from its mount, memory stores written back
  from it, and it sleeps when idle.
* ``LOCAL_PROCESS`` — a folder and child processes on the worker (``sandboxes.local``): a cloud
  environment with MANGO_SANDBOX=local_process. Development only: not isolated.
* ``CLIENT`` — the client's machine: a ``self_hosted`` environment. The SDK's EnvironmentWorker
  takes the session's work items and answers its built-in tool uses with user.tool_result; this
  server never runs them (MCP tools are still called here, on every host).

The sandbox calls themselves go through ``sandboxes`` (its backend is MANGO_SANDBOX's, chosen once
per process); this module says whether a session has one.
"""

from dataclasses import dataclass

from django.conf import settings

SELF_HOSTED = "self_hosted"


@dataclass(frozen=True)
class ToolHost:
    name: str
    # The client runs the session's built-in tools (self_hosted): its work items are queued for the
    # EnvironmentWorker, a built-in tool use is handed to it, and it answers dangling ones.
    client_runs_tools: bool
    # This server keeps a sandbox for the session (Docker or a local folder): repositories are
    # cloned into it.
    has_sandbox: bool
    # That sandbox is a Docker container of ours with the outputs and memory mounts: outputs are
    # published and memory stores written back from it at idle.
    docker_sandbox: bool


DOCKER = ToolHost("docker", client_runs_tools=False, has_sandbox=True, docker_sandbox=True)
LOCAL_PROCESS = ToolHost("local_process", client_runs_tools=False, has_sandbox=True, docker_sandbox=False)
CLIENT = ToolHost(SELF_HOSTED, client_runs_tools=True, has_sandbox=False, docker_sandbox=False)


def tool_host(environment_config: dict | None) -> ToolHost:
    """The tool host of a session created with `environment_config` (an environment's config, or
    the snapshot the session keeps) on this deployment."""
    if (environment_config or {}).get("type") == SELF_HOSTED:
        return CLIENT
    return DOCKER if settings.MANGO_SANDBOX == "docker" else LOCAL_PROCESS
