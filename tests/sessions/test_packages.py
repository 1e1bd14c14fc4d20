"""Issue #22 item 2: environment packages installed into a derived image and reused, with real
Docker on the real image (mango-sandbox:bookworm) and the real registries this machine reaches
(PyPI, npm, Debian's mirror). Failures name the manager and the package and leave the session
usable; installs are bounded in time, disk and per workspace."""

import time

import pytest

import sandboxes as sandbox
from core import caps
from sandboxes import docker as docker_backend
from sandboxes import packages, registries
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REAL_IMAGE = "mango-sandbox:bookworm"
UNRESTRICTED = {"type": "unrestricted"}
PACKAGES = {"type": "packages", "apt": ["tree"], "pip": ["iniconfig==2.0.0"], "npm": ["is-number@7.0.0"]}
CHECK = (
    "tree --version && python3 -c 'import iniconfig; print(\"iniconfig\", iniconfig.__file__)' && "
    'node -e \'console.log("is-number", require("is-number")(5))\' && id -u'
)


@pytest.fixture
def real_image(settings, docker_client):
    settings.MANGO_SANDBOX = "docker"
    settings.MANGO_SANDBOX_IMAGE = REAL_IMAGE
    settings.MANGO_SANDBOX_PROXY_IMAGE = REAL_IMAGE
    workspaces = []
    yield workspaces
    for workspace_id in workspaces:
        for image in docker_client.images.list(
            name=packages.REPOSITORY, filters={"label": f"mango.workspace={workspace_id}"}
        ):
            docker_client.images.remove(image.id, force=True)


@pytest.fixture
def start(real_image):
    """start(packages, networking) -> (session id, image, seconds to prepare and start)."""
    made = []
    workspace_id = f"wrkspc_pkg{time.time_ns()}"
    real_image.append(workspace_id)

    def run(packages_config, networking=UNRESTRICTED):
        session_id = f"sesn_pkg{time.time_ns()}"
        made.append(session_id)
        began = time.monotonic()
        image = sandbox.prepare_image(
            session_id=session_id, workspace_id=workspace_id, networking=networking, packages_config=packages_config
        )
        sandbox.ensure(session_id=session_id, workspace_id=workspace_id, networking=networking, image=image)
        return session_id, image, time.monotonic() - began

    run.workspace_id = workspace_id
    yield run
    for session_id in made:
        sandbox.remove(session_id=session_id)


def sh(session_id: str, command: str) -> str:
    return sandbox.exec_command(session_id=session_id, command=command, timeout=60).output.decode(errors="replace")


def test_apt_pip_and_npm_packages_are_installed_then_served_from_the_cache(start, docker_client, settings):
    first, image, cold = start(PACKAGES)
    assert image.startswith(packages.REPOSITORY + ":")
    out = sh(first, CHECK)
    assert "tree v" in out and "iniconfig /usr/local/lib" in out and "is-number true" in out, out
    assert out.strip().endswith(str(settings.MANGO_SANDBOX_UID))  # installed as root, used as the sandbox user
    built = docker_client.images.get(image)
    assert built.labels["mango.workspace"] == start.workspace_id
    assert "HTTP_PROXY" not in " ".join(built.attrs["Config"]["Env"])  # the build's settings stay out
    assert not docker_client.containers.list(all=True, filters={"name": docker_backend.install_name(first)})

    # The next session of the environment: same image, no build container, the packages there.
    second, again, cached = start(PACKAGES)
    assert again == image
    assert "iniconfig /usr/local/lib" in sh(second, CHECK)
    _plain, base, plain = start(None)
    assert base == settings.MANGO_SANDBOX_IMAGE
    print(f"cold start: build {cold:.1f} s, cached {cached:.2f} s, plain {plain:.2f} s")
    assert cached < cold


def test_an_uninstallable_package_is_named_and_nothing_is_cached(start, docker_client):
    missing = "mango-no-such-package-3f9c"
    with pytest.raises(sandbox.PackageInstallFailed) as failed:
        start({"pip": ["iniconfig", missing]})
    assert (failed.value.manager, failed.value.package) == ("pip", missing)
    assert missing in failed.value.describe() and "pip" in failed.value.describe()
    with pytest.raises(sandbox.PackageInstallFailed) as failed:
        start({"apt": ["tree", "mango-no-such-deb"]})
    assert (failed.value.manager, failed.value.package) == ("apt", "mango-no-such-deb")
    with pytest.raises(sandbox.PackageInstallFailed) as failed:
        start({"npm": ["is-number", "mango-no-such-npm-3f9c"]})
    assert (failed.value.manager, failed.value.package) == ("npm", "mango-no-such-npm-3f9c")
    assert not docker_client.images.list(
        name=packages.REPOSITORY, filters={"label": f"mango.workspace={start.workspace_id}"}
    )
    assert not docker_client.containers.list(all=True, filters={"name": "mango-install-"})


def test_limited_installs_go_through_the_proxy_to_the_registries_only(start, settings):
    # pip's registries as this machine is configured (sandboxes/registries.py), npm's left out.
    settings.MANGO_SANDBOX_PACKAGE_REGISTRIES = registries.machine_registries()["pip"]
    (npm_registry,) = registries.machine_registries()["npm"]
    pip_index = registries.pip_indexes()[0].rstrip("/")
    networking = {"type": "limited", "allowed_hosts": [], "allow_package_managers": True}
    box, image, _ = start({"pip": ["iniconfig==2.0.0"]}, networking)
    assert image.startswith(packages.REPOSITORY)
    assert "iniconfig /usr/local/lib" in sh(
        box, "python3 -c 'import iniconfig; print(\"iniconfig\", iniconfig.__file__)'"
    )
    # The registries are reachable from the sandbox too, nothing else is.
    assert "200" in sh(box, f"curl -s -o /dev/null -w '%{{http_code}}' {pip_index}/six/")
    assert "403" in sh(box, f"curl -s -o /dev/null -w '%{{http_code}}' http://{npm_registry}/ 2>&1")
    with pytest.raises(sandbox.PackageInstallFailed, match="npm"):  # npm's registry is not listed
        start({"npm": ["is-number"]}, {**networking, "allowed_hosts": ["example.com"]})


def test_installs_are_bounded_in_time_disk_and_per_workspace(start, settings):
    # Half a second: pip's own start in the build container takes about that; numpy's download
    # and install took under 2 s on a fast mirror (the bound once here did not trip).
    settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS = 0.5
    with pytest.raises(sandbox.PackageInstallFailed, match="MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS"):
        start({"pip": ["numpy"]})
    settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS = 300
    settings.MANGO_SANDBOX_INSTALL_MAX_BYTES = 5 * 1024 * 1024
    with pytest.raises(sandbox.PackageInstallFailed, match="MANGO_SANDBOX_INSTALL_MAX_BYTES"):
        start({"apt": ["python3-numpy"]})  # about 30 MB unpacked
    # A workspace at its cap of concurrent installs waits, then gives up (here after 1 s).
    settings.MANGO_SANDBOX_INSTALL_MAX_BYTES = 2 * 1024**3
    settings.MANGO_WORKSPACE_MAX_INSTALLS = 1
    settings.MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS = 1
    gate = caps.thread_gate()
    held = gate.take(kind="installs", workspace_id=start.workspace_id, limit=1)
    try:
        with pytest.raises(sandbox.PackageInstallFailed, match="already runs 1 package installs"):
            start({"pip": ["iniconfig"]})
    finally:
        gate.release(held)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_session_error_names_the_package_and_the_session_stays_usable(
    sdk, api_key, model, celery_worker, docker_client
):
    env = sdk.beta.environments.create(
        name="pkgs", config={"type": "cloud", "networking": UNRESTRICTED, "packages": {"pip": ["mango-no-such-pkg-77"]}}
    )
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    celery_worker.current.stop()
    celery_worker.start_new(MANGO_SANDBOX_IMAGE=REAL_IMAGE, MANGO_SANDBOX_PROXY_IMAGE=REAL_IMAGE)
    try:
        model.script([tool_use("bash", {"command": "python3 --version"}), text("done")])
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
        )

        def idle():
            events = list(sdk.beta.sessions.events.list(session.id))
            return events if events and events[-1].type == "session.status_idle" else None

        events = wait_for(idle, 240)
    finally:
        celery_worker.current.stop()
        celery_worker.start_new()
        for image in docker_client.images.list(
            name=packages.REPOSITORY, filters={"label": f"mango.workspace={api_key.workspace.id}"}
        ):
            docker_client.images.remove(image.id, force=True)
    errors = [e for e in events if e.type == "session.error"]
    assert len(errors) == 1
    assert errors[0].error.type == "unknown_error"
    assert "pip package 'mango-no-such-pkg-77'" in errors[0].error.message
    types = [e.type for e in events]
    assert types.index("session.error") < types.index("agent.tool_result")
    result = next(e for e in events if e.type == "agent.tool_result")
    assert "Python 3.11" in result.content[0].text and not result.is_error


def test_environment_create_refuses_what_cannot_be_installed(sdk):
    import anthropic

    for packages_config, named in (
        ({"cargo": ["ripgrep"]}, "config.packages.cargo"),
        ({"gem": ["rails"]}, "config.packages.gem"),
        ({"go": ["golang.org/x/tools/gopls@latest"]}, "config.packages.go"),
        ({"pip": ["--index-url=https://evil.example/simple"]}, "config.packages.pip"),
        ({"pip": ["six; rm -rf /"]}, "config.packages.pip"),
        ({"npm": ["https://evil.example/x.tgz"]}, "config.packages.npm"),
        ({"apt": ["-o=APT::Get::AllowUnauthenticated=1"]}, "config.packages.apt"),
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            sdk.beta.environments.create(
                name="x", config={"type": "cloud", "networking": UNRESTRICTED, "packages": packages_config}
            )
        assert named in refused.value.message, refused.value.message
    with pytest.raises(anthropic.BadRequestError, match="allow_package_managers"):
        sdk.beta.environments.create(
            name="x", config={"type": "cloud", "networking": {"type": "limited"}, "packages": {"pip": ["six"]}}
        )
    ok = sdk.beta.environments.create(
        name="ok",
        config={
            "type": "cloud",
            "networking": UNRESTRICTED,
            "packages": {"pip": ["six==1.16.0", "requests[socks]>=2"], "npm": ["@types/node@^20"], "apt": ["tree"]},
        },
    )
    assert ok.config.packages.pip == ["six==1.16.0", "requests[socks]>=2"]
