"""Sandbox isolation with real Docker (issue #10): networks, privileges, disk quota and
tamper-proof control. Sandboxes are made directly through the adapter; each test removes its own."""

import hashlib
import ipaddress
import pathlib
import platform
import socket
import subprocess
import threading
import time

import anthropic
import pytest

import sandboxes as sandbox
from files.models import File
from sandboxes import policy
from sessions.models import Session, SessionResource
from sessions.services.resources import resources_place
from tests.scripted_model import text, tool_use
from tests.sessions.conftest import not_under_gvisor, wait_for

pytestmark = pytest.mark.docker

SECRET = b"HOST-SECRET-7f3a"


@pytest.fixture
def sandboxes(settings):
    """make(workspace_id, networking) -> session id; all removed afterwards."""
    settings.MANGO_SANDBOX = "docker"
    made = []

    def make(workspace_id: str = "wrkspc_iso_a", networking: dict | None = None, image: str | None = None) -> str:
        session_id = f"sesn_iso{time.time_ns()}"
        made.append(session_id)
        sandbox.ensure(session_id=session_id, workspace_id=workspace_id, networking=networking, image=image)
        return session_id

    yield make
    for session_id in made:
        sandbox.remove(session_id=session_id)


def sh(session_id: str, command: str, timeout: float = 30) -> sandbox.ExecResult:
    return sandbox.exec_command(session_id=session_id, command=command, timeout=timeout)


@pytest.fixture
def host_listener():
    """A service of the host bound to every address (as an API started with 0.0.0.0 would be):
    it answers SECRET to whoever connects. Yields its port."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for port in range(18200, 18300):
        try:
            server.bind(("0.0.0.0", port))
            break
        except OSError:
            continue
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(SECRET + b"\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(1)
    server.close()


def probe(session_id: str, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Try every target at once from inside the sandbox (3 s each); what each connection got."""
    parts = [
        f'(timeout 3 nc -w 2 {host} {port} </dev/null > /tmp/p{n} 2>&1; echo " rc=$?" >> /tmp/p{n}) &'
        for n, (host, port) in enumerate(targets)
    ]
    script = " ".join(parts) + " wait; " + "; ".join(f"echo '@@{n}'; cat /tmp/p{n}" for n in range(len(targets)))
    output = sh(session_id, script, timeout=20).output.decode(errors="replace")
    chunks = output.split("@@")[1:]
    return {targets[int(chunk.split("\n", 1)[0])]: chunk.split("\n", 1)[1] for chunk in chunks}


def _gateway(session_id: str) -> str:
    route = sh(session_id, "ip route").output.decode()
    return next(line.split()[2] for line in route.splitlines() if line.startswith("default via"))


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if " lo " not in line]


def test_sandboxes_reach_neither_each_other_nor_the_host(sandboxes, host_listener, docker_client):
    a = sandboxes("wrkspc_iso_a", {"type": "unrestricted"})
    same_workspace = sandboxes("wrkspc_iso_a", {"type": "unrestricted"})
    other_workspace = sandboxes("wrkspc_iso_b", {"type": "unrestricted"})
    sh(other_workspace, "printf '#!/bin/sh\\necho B-SECRET\\n' > /tmp/s && chmod +x /tmp/s")
    sh(other_workspace, "nc -ll -p 9999 -e /tmp/s </dev/null >/dev/null 2>&1 &")
    sh(same_workspace, "printf '#!/bin/sh\\necho B-SECRET\\n' > /tmp/s && chmod +x /tmp/s")
    sh(same_workspace, "nc -ll -p 9999 -e /tmp/s </dev/null >/dev/null 2>&1 &")
    time.sleep(0.3)
    # Control: the listeners answer, the probe would see a connection.
    assert b"B-SECRET" in sh(other_workspace, "nc -w 2 127.0.0.1 9999 </dev/null").output
    with socket.create_connection(("127.0.0.1", host_listener), timeout=2) as conn:
        assert conn.recv(100).startswith(SECRET)

    def address(session_id):
        container = docker_client.containers.get(sandbox.container_name(session_id))
        (settings,) = container.attrs["NetworkSettings"]["Networks"].values()
        return settings["IPAddress"]

    gateway = _gateway(a)
    targets = [(address(other_workspace), 9999), (address(same_workspace), 9999)]
    for host in {gateway, *_host_addresses()}:  # the host's addresses include docker0's
        targets += [(host, host_listener), (host, 5432), (host, 6379), (host, 8333), (host, 2375)]
    results = probe(a, targets)
    assert len(results) == len(targets)
    # Another run's sandbox bridge may vanish during the probe: its address then routes off the
    # host (this machine's network accepts any outbound TCP), which says nothing about the host.
    still_here = set(_host_addresses()) | {gateway, address(other_workspace), address(same_workspace)}
    for target, seen in results.items():
        if target[0] not in still_here:
            continue
        assert "SECRET" not in seen, (target, seen)
        assert "rc=0" not in seen, (target, seen)
    # Each session has a bridge of its own, a /29, inter-container traffic off.
    networks = {docker_client.networks.get(policy.network_name(s)) for s in (a, same_workspace, other_workspace)}
    assert len({n.attrs["IPAM"]["Config"][0]["Subnet"] for n in networks}) == 3
    for network in networks:
        assert network.attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
        assert ipaddress.ip_network(network.attrs["IPAM"]["Config"][0]["Subnet"]).prefixlen == 29
    assert sh(a, "test -e /var/run/docker.sock").exit_code != 0


def test_unrestricted_routes_outside_and_limited_has_no_network(sandboxes, docker_client):
    """There is no internet here: what can be shown is that an unrestricted sandbox has a default
    route through NAT and reaches the host's own next hop outside, and a limited one that allows
    no host has no network at all (one with an allow-list reaches only its egress proxy:
    tests/sessions/test_sandbox_image.py)."""
    open_box = sandboxes("wrkspc_iso_a", {"type": "unrestricted"})
    closed_box = sandboxes("wrkspc_iso_a", {"type": "limited", "allowed_hosts": []})
    assert "default via" in sh(open_box, "ip route").output.decode()
    assert "default" not in sh(closed_box, "ip route").output.decode()
    assert "Network unreachable" in sh(closed_box, "nc -w 2 192.0.2.1 80 </dev/null").output.decode() or (
        sh(closed_box, "nc -w 2 192.0.2.1 80 </dev/null").exit_code != 0
    )
    subnet = docker_client.networks.get(policy.network_name(open_box)).attrs["IPAM"]["Config"][0]["Subnet"]
    nat = subprocess.run(["iptables", "-t", "nat", "-S", "POSTROUTING"], capture_output=True, text=True)
    if nat.returncode == 0:
        assert f"-s {subnet}" in nat.stdout and "MASQUERADE" in nat.stdout
    # The host's default gateway answers the host (refused or accepted): it must answer the
    # sandbox the same way, through NAT, instead of timing out.
    route = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True).stdout.split()
    if "via" not in route:
        pytest.skip("the host has no default gateway to reach")
    next_hop = route[route.index("via") + 1]
    try:
        socket.create_connection((next_hop, 80), timeout=2).close()
    except ConnectionRefusedError:
        pass
    except OSError:
        pytest.skip(f"the host's next hop {next_hop} does not answer on port 80")
    seen = sh(open_box, f"nc -w 3 {next_hop} 80 </dev/null; echo rc=$?").output.decode()
    assert "refused" in seen or "rc=0" in seen, seen


def test_sandboxes_and_proxies_run_under_the_configured_runtime(sandboxes, docker_client, settings):
    """MANGO_SANDBOX_RUNTIME decides the OCI runtime of the sandbox and of its egress proxy; under
    runsc the commands see gVisor's kernel (its uname and dmesg), not the host's."""
    box = sandboxes("wrkspc_iso_a", {"type": "limited", "allowed_hosts": ["example.com"]})
    runtime = settings.MANGO_SANDBOX_RUNTIME
    for name in (sandbox.container_name(box), f"mango-egress-{box}"):
        assert docker_client.containers.get(name).attrs["HostConfig"]["Runtime"] == runtime, name
    kernel = sh(box, "uname -r").output.decode().strip()
    if runtime == "runsc":
        assert kernel == "4.4.0"  # what gVisor reports
        assert "gVisor" in sh(box, "dmesg 2>&1 | head -3").output.decode()
    else:
        assert kernel == platform.release()


def test_least_privilege(sandboxes, docker_client, settings):
    box = sandboxes()
    assert sh(box, "id -u").output.decode().strip() == str(settings.MANGO_SANDBOX_UID) != "0"
    status = sh(box, "cat /proc/self/status").output.decode()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == int(fields["CapBnd"], 16) == 0
    if settings.MANGO_SANDBOX_RUNTIME != "runsc":  # gVisor's /proc/self/status has neither field
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"  # filter mode: Docker's default profile
    limits = sh(box, "ulimit -n; ulimit -f").output.decode().split()
    assert limits == [str(settings.MANGO_SANDBOX_NOFILE), "unlimited"]  # every writable mount is bounded
    settings.MANGO_SANDBOX_FSIZE_BYTES = 1024 * 1024
    bounded = sandboxes()
    assert sh(bounded, "ulimit -f").output.decode().strip() == "2048"  # the shell counts 512-byte blocks
    host_config = docker_client.containers.get(sandbox.container_name(box)).attrs["HostConfig"]
    assert host_config["MemorySwap"] == host_config["Memory"] > 0
    assert host_config["CapDrop"] == ["ALL"] and not host_config["CapAdd"]
    assert host_config["Privileged"] is False
    for path in ("/etc/x", "/x", "/bin/x", "/mnt/session/uploads/x", "/mnt/x", "/root/x"):
        assert sh(box, f"echo x > {path}").exit_code != 0, path
    for path in ("/workspace/x", "/tmp/x", "/mnt/session/outputs/x"):
        assert sh(box, f"echo x > {path} && cat {path}").output == b"x\n", path
    # The server's write tool writes as the sandbox user too: not into the read-only places.
    with pytest.raises(PermissionError):
        sandbox.write_file(session_id=box, path="/etc/passwd", data=b"root::0:0::/:/bin/sh\n")
    sandbox.write_file(session_id=box, path="/workspace/sub/new.txt", data=b"mine")
    assert sh(box, "stat -c %u /workspace/sub/new.txt").output.decode().strip() == str(settings.MANGO_SANDBOX_UID)


def test_writes_beyond_the_disk_quota_fail_inside(sandboxes, settings):
    settings.MANGO_SANDBOX_WORKDIR_SIZE = "8m"
    settings.MANGO_SANDBOX_OUTPUTS_SIZE = "4m"
    box = sandboxes()
    full = sh(box, "dd if=/dev/zero of=/workspace/big bs=1M count=20")
    assert full.exit_code != 0 and b"No space left on device" in full.output
    full = sh(box, "dd if=/dev/zero of=/mnt/session/outputs/big bs=1M count=20")
    assert full.exit_code != 0 and b"No space left on device" in full.output
    total_kib = int(sh(box, "df -k /workspace | tail -1").output.split()[1])
    assert 7000 < total_kib <= 8192, total_kib  # the filesystem's own blocks come off the size
    # The sandbox goes on: what fits is written, and the outputs archive still streams.
    assert sh(box, "rm /workspace/big && echo ok > /workspace/small && cat /workspace/small").output == b"ok\n"
    size = int(sh(box, "wc -c < /mnt/session/outputs/big").output)
    assert size >= 3 * 1024 * 1024  # what the 4 MiB filesystem holds past its own blocks
    chunks, _ = sandbox.get_archive(session_id=box)
    assert sum(map(len, chunks)) > size


def test_interrupt_kills_a_command_that_tampers_with_tmp_and_pid_files(sandboxes):
    box = sandboxes()
    tamper = (
        "rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null; "
        "(while :; do echo 1 > /tmp/.mango-exec-fake.pid; sleep 0.05; done) & "
        "setsid sh -c 'sleep 31' & "
        "sleep 32; echo survived"
    )
    for how in ("interrupt", "timeout"):
        flag = threading.Event()
        if how == "interrupt":
            threading.Timer(0.5, flag.set).start()
        started = time.monotonic()
        result = sandbox.exec_command(
            session_id=box, command=tamper, timeout=60 if how == "interrupt" else 0.5, should_cancel=flag.is_set
        )
        assert time.monotonic() - started < 2.5, how  # 0.5 s before the stop, then under 2 s
        assert result.cancelled if how == "interrupt" else result.timed_out, how
        assert b"survived" not in result.output
        left = sh(box, "ps -o args").output.decode()
        assert "sleep 31" not in left and "sleep 32" not in left and "mango-exec-fake" not in left, left
    assert sh(box, "echo alive").output == b"alive\n"  # the sandbox itself was not stopped


# --- file resources --------------------------------------------------------------------------


@pytest.fixture
def agent_env(sdk):
    agent = sdk.beta.agents.create(name="iso", model="claude-sonnet-4-5", tools=[{"type": "agent_toolset_20260401"}])
    environment = sdk.beta.environments.create(name="cloud", config={"type": "cloud"})
    return agent, environment


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "mount_path",
    [
        "/",
        "/tmp",
        "/proc",
        "/sys",
        "/dev",
        "/etc",
        "/bin",
        "/usr",
        "/lib",
        "/workspace",
        "/mnt/session/outputs",
        "/mnt/session/outputs/a.txt",
        "/mnt/session/uploads",
        "/mnt/session",
        "/mnt",
        "/etc/passwd",
        "/proc/1/environ",
        "/workspace/../etc/x",
        "/workspace/./x",
        "workspace/x",
        "/tmp/",
    ],
)
def test_forbidden_mount_paths_are_400_and_nothing_is_stored(sdk, agent_env, mount_path):
    agent, environment = agent_env
    source = sdk.beta.files.upload(file=("s.txt", b"s", "text/plain"))
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    counts = (File.objects.count(), SessionResource.objects.count(), Session.objects.count())
    param = {"type": "file", "file_id": source.id, "mount_path": mount_path}
    with pytest.raises(anthropic.BadRequestError) as raised:
        sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, resources=[param])
    assert raised.value.body["error"]["details"]["error_code"] == "invalid_mount_path"
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.resources.add(session.id, **param)
    assert (File.objects.count(), SessionResource.objects.count(), Session.objects.count()) == counts


@pytest.mark.django_db(transaction=True)
def test_a_resource_cannot_be_removed_renamed_or_replaced(sdk, agent_env, api_key):
    agent, environment = agent_env
    data = b"id,secret\n1,keep\n"
    source = sdk.beta.files.upload(file=("data.csv", data, "text/csv"))
    session = sdk.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        resources=[
            {"type": "file", "file_id": source.id},
            {"type": "file", "file_id": source.id, "mount_path": "/workspace/in/data.csv"},
            {"type": "file", "file_id": source.id, "mount_path": "/workspace/top.csv"},
        ],
    )
    ref = sandbox.ensure(session_id=session.id, workspace_id=api_key.workspace.id, networking=None)
    Session.objects.filter(pk=session.id).update(sandbox_state=Session.SandboxState.RUNNING, sandbox_ref=ref)
    assert resources_place(session=Session.objects.get(pk=session.id)) == 3
    digest = hashlib.sha256(data).hexdigest()
    for path in (f"/mnt/session/uploads/{source.id}", "/workspace/in/data.csv", "/workspace/top.csv"):
        parent = path.rsplit("/", 1)[0]
        attempts = [
            f"rm -f {path}",
            f"mv {path} /tmp/moved",
            f"mv {parent} /tmp/moved-dir",
            f"ln -sf /etc/passwd {path}",
            f"echo x > /tmp/other && mv -f /tmp/other {path}",
            f"cp /etc/passwd {path}",
            f"echo x >> {path}",
            f"chmod 666 {path}",
            f"touch {path}",
        ]
        for attempt in attempts:
            sh(session.id, attempt)
        listing = sh(session.id, f"ls -ln {path}; sha256sum {path}").output.decode()
        assert listing.startswith("-r--r--r--") and digest in listing, (path, listing)
    # A directory the sandbox user owns would let it move the resource away: placing is refused.
    sh(session.id, "mkdir /workspace/mine")
    added = sdk.beta.sessions.resources.add(
        session.id, type="file", file_id=source.id, mount_path="/workspace/mine/data.csv"
    )
    assert SessionResource.objects.get(pk=added.id).placed_ref is None
    assert sh(session.id, "test -e /workspace/mine/data.csv").exit_code != 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_full_disk_fails_inside_while_the_api_and_the_next_turn_work(sdk, model, celery_worker, agent_env):
    agent, environment = agent_env
    fill = "dd if=/dev/zero of=/workspace/fill bs=1M count=400; echo status=$?"
    model.script(
        [
            tool_use("bash", {"command": fill}),
            text("full"),
            tool_use("bash", {"command": "rm /workspace/fill && echo next > /workspace/n && cat /workspace/n"}),
            text("done"),
        ]
    )
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    user = {"type": "user.message", "content": [{"type": "text", "text": "go"}]}

    def results(count):
        def ready():
            events = list(sdk.beta.sessions.events.list(session.id))
            done = [e for e in events if e.type == "agent.tool_result"]
            return done if len(done) >= count and events[-1].type == "session.status_idle" else None

        return ready

    sdk.beta.sessions.events.send(session.id, events=[user])
    first = wait_for(results(1), 60)[0].content[0].text
    assert "No space left on device" in first and "status=1" in first
    assert sdk.beta.sessions.retrieve(session.id).status == "idle"
    sdk.beta.files.upload(file=("after.txt", b"the API still works", "text/plain"))
    sdk.beta.sessions.events.send(session.id, events=[user])
    second = wait_for(results(2), 60)[1]
    assert not second.is_error and "next" in second.content[0].text


# --- disks, bounded writable paths, processes (issue 38 step 1; issue 44 findings 3 and 4) -----

DEBIAN_IMAGE = "mango-sandbox:bookworm"  # python3: each command runs under sandboxes/call_reaper.py


def test_a_gibibyte_fits_in_the_workspace_of_a_sandbox_with_a_gibibyte_of_memory(sandboxes, settings, docker_client):
    """/workspace is a filesystem on the host's disk, not tmpfs in the sandbox's memory."""
    settings.MANGO_SANDBOX_MEMORY = "1g"
    settings.MANGO_SANDBOX_WORKDIR_SIZE = "1200m"
    box = sandboxes()
    started = time.monotonic()
    written = sh(box, "dd if=/dev/zero of=/workspace/big bs=1M count=1024 conv=fsync 2>&1; echo status=$?", 300)
    seconds = time.monotonic() - started
    assert b"status=0" in written.output, written.output
    assert sh(box, "wc -c < /workspace/big").output.strip() == str(1024**3).encode()
    assert sh(box, "echo small > /workspace/small && cat /workspace/small").output == b"small\n"
    state = docker_client.containers.get(sandbox.container_name(box)).attrs["State"]
    assert state["Running"] and not state["OOMKilled"]
    print(f"1 GiB to /workspace with fsync: {seconds:.1f} s ({1024 / seconds:.0f} MiB/s)")


def test_writes_past_the_workspace_quota_fail_with_enospc_and_nothing_else_fills(sandboxes, settings):
    """The quota is the disk's, whatever the sandbox's memory: a workspace larger than the
    memory fills up to its size and then fails with ENOSPC (a tmpfs would stop at the memory)."""
    settings.MANGO_SANDBOX_MEMORY = "256m"
    settings.MANGO_SANDBOX_WORKDIR_SIZE = "400m"
    box = sandboxes()
    full = sh(box, "dd if=/dev/zero of=/workspace/big bs=1M count=500; echo status=$?", 120)
    assert b"No space left on device" in full.output and b"status=1" in full.output, full.output
    written = int(sh(box, "wc -c < /workspace/big").output)
    assert 350 * 1024**2 < written <= 400 * 1024**2
    # The next sandbox of another session starts empty with its own quota.
    other = sandboxes()
    assert sh(other, "ls -A /workspace").output == b""
    # Removed, a sandbox leaves no loop device (nor the blocks of its file) behind.
    sandbox.remove(session_id=box)
    backing = [p.read_text() for p in pathlib.Path("/sys/block").glob("loop*/loop/backing_file")]
    assert not [name for name in backing if box in name], backing


def test_every_path_the_sandbox_can_write_is_a_bounded_mount(sandboxes, settings, docker_client):
    """Audit 3: /var/tmp and /run/lock were world-writable on the container's root filesystem
    (which grew without bound on the host's disk); skills landed there too."""
    settings.MANGO_SANDBOX_TMP_SIZE = "16m"
    box = sandboxes(image=DEBIAN_IMAGE)
    # Nothing on the root filesystem is writable by the sandbox user: what find lists without
    # crossing into other filesystems are the mount points themselves.
    writable = sh(box, "find / -xdev \\( -type d -o -type f \\) -writable 2>/dev/null").output.decode().split()
    mounts = sh(box, "cat /proc/mounts").output.decode()
    targets = {line.split()[1]: line.split()[2] for line in mounts.splitlines()}
    assert writable and all(path in targets for path in writable), (writable, targets)
    for path in ("/workspace", "/mnt/session/outputs", "/tmp", "/var/tmp", "/run/lock", "/mnt/skills", "/mnt/memory"):
        assert path in targets, path
    # Under gVisor every mount the container is given reaches it through its file proxy (9p); the
    # disks are ext4 on the host all the same (their quota is the ENOSPC below and the tests above).
    disk = "9p" if settings.MANGO_SANDBOX_RUNTIME == "runsc" else "ext4"
    assert targets["/workspace"] == targets["/mnt/session/outputs"] == disk
    for path in ("/var/tmp", "/run/lock", "/tmp"):
        full = sh(box, f"dd if=/dev/zero of={path}/fill bs=1M count=40; echo status=$?")
        assert b"No space left on device" in full.output and b"status=1" in full.output, path
        sh(box, f"rm -f {path}/fill")
    assert sh(box, "touch /mnt/skills/x").exit_code != 0  # the server's to place, read-only to the user
    (found,) = docker_client.api.containers(all=True, filters={"name": sandbox.container_name(box)}, size=True)
    size_rw = found.get("SizeRw", 0)  # left out when 0
    assert size_rw < 1024**2, size_rw  # the container's own layer did not grow


def test_one_sandbox_holding_many_processes_does_not_stop_another_from_forking(sandboxes, settings):
    """Audit 4: every sandbox ran as uid 10001 with an RLIMIT_NPROC, which counts that uid on
    the whole host: one workspace's processes made another's fork fail. The audit ran with the
    limit at 400; the setting is no longer read, and the pids cgroup is the only bound."""
    settings.MANGO_SANDBOX_NPROC = 400
    settings.MANGO_SANDBOX_PIDS = 300
    a = sandboxes("wrkspc_iso_a")
    b = sandboxes("wrkspc_iso_b")
    # RLIMIT_NPROC can never be reached before the host runs out of pids (the test runs on the
    # Docker host: its pid_max is the host's; the sandbox's pid namespace may show another).
    if settings.MANGO_SANDBOX_RUNTIME != "runsc":  # gVisor's /proc/self/limits is its own
        limit = sh(b, "grep 'Max processes' /proc/self/limits").output.split()[2]
        pid_max = int(pathlib.Path("/proc/sys/kernel/pid_max").read_text())
        assert limit == b"unlimited" or int(limit) >= pid_max, (limit, pid_max)
    holder = threading.Thread(
        target=sh, args=(a, "for i in $(seq 240); do sleep 20 & done; sleep 15"), kwargs={"timeout": 30}
    )
    holder.start()
    try:
        wait_for(lambda: int(sh(a, "ps -o pid | wc -l").output) > 240, 15, 0.2)
        forked = sh(b, "for i in $(seq 200); do sleep 5 & done; wait; echo forked")
        assert forked.output.strip() == b"forked", forked.output[-300:]
    finally:
        sandbox.exec_command(session_id=a, command="true", timeout=5, should_cancel=lambda: True)
        holder.join(30)


@not_under_gvisor("the bomb reaches the pids limit on gVisor's own threads, which takes the sandbox kernel down")
def test_a_fork_bombs_orphans_die_with_its_tool_call(sandboxes):
    """Audit 4: a fork bomb's orphans kept spinning after its tool call returned."""
    box = sandboxes(image=DEBIAN_IMAGE)
    started = time.monotonic()
    result = sh(box, "bomb() { bomb | bomb & }; bomb; sleep 2; echo launched", timeout=60)
    assert time.monotonic() - started < 30
    assert b"launched" in result.output or result.exit_code is not None
    left = sh(box, "ps -e -o pid=,args=").output.decode().strip().splitlines()
    # pid 1, its sleep and this ps (under its own reaper and shell): nothing of the bomb.
    assert not any("bomb" in line or "sh -c bomb" in line for line in left), left
    assert len(left) <= 6, left
    # What a call starts in the background ends with it as well, setsid or not.
    sh(box, "sleep 300 & setsid sleep 301 & (sleep 302 &) ; echo started")
    left = sh(box, "ps -e -o args=").output.decode()
    assert "sleep 30" not in left, left
    assert sh(box, "echo alive").output == b"alive\n"
