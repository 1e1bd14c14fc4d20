"""The tool-host seam (issue 38, point 6): a session's tool host is chosen in one place
(sessions/toolhost.py) and every question about it is asked of that object."""

import pathlib
import re

from sessions import toolhost

SESSIONS = pathlib.Path(__file__).resolve().parents[2] / "sessions"


def test_tool_host_is_chosen_from_the_environment_and_the_deployment(settings):
    settings.MANGO_SANDBOX = "docker"
    assert toolhost.tool_host({"type": "cloud", "networking": {"type": "limited"}}) is toolhost.DOCKER
    assert toolhost.tool_host(None) is toolhost.DOCKER
    assert toolhost.tool_host({"type": "self_hosted"}) is toolhost.CLIENT
    settings.MANGO_SANDBOX = "local_process"
    assert toolhost.tool_host({"type": "cloud"}) is toolhost.LOCAL_PROCESS
    assert toolhost.tool_host({"type": "self_hosted"}) is toolhost.CLIENT
    # What each host answers.
    assert (toolhost.DOCKER.client_runs_tools, toolhost.DOCKER.has_sandbox, toolhost.DOCKER.docker_sandbox) == (
        False,
        True,
        True,
    )
    assert (toolhost.LOCAL_PROCESS.has_sandbox, toolhost.LOCAL_PROCESS.docker_sandbox) == (True, False)
    assert (toolhost.CLIENT.client_runs_tools, toolhost.CLIENT.has_sandbox) == (True, False)


def test_no_module_of_sessions_asks_the_question_itself():
    """Neither MANGO_SANDBOX nor an environment's "self_hosted" type is read outside toolhost.py."""
    asked = re.compile(r"settings\.MANGO_SANDBOX\b(?!_)|[\"']self_hosted[\"']")
    found = [
        f"{path.relative_to(SESSIONS)}:{number}"
        for path in SESSIONS.rglob("*.py")
        if path.name != "toolhost.py" and "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asked.search(line)
    ]
    assert found == []
