"""Day two with `make run`, from a fresh checkout (tests/ops/checkout.py): `make` alone explains
itself and starts nothing; `make run` serves Files and sessions, the README's quickstarts run
against it as written; a second `make run` is refused, naming the first; `make stop` stops it; a
restart (the .env the first run wrote now in place) serves Files again, with the first run's file;
and `make stop` also stops a run whose script was killed."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import boto3
import httpx
import pytest

from tests.mcp_server import McpTestServer
from tests.ops.checkout import Checkout, alive, free_port, free_store_port, group_alive
from tests.scripted_model import ScriptedModel, echo, offline

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://127.0.0.1:8000"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def readme_snippet(name: str) -> str:
    """The ```python block that follows `<!-- test: NAME -->` in README.md."""
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- test: {re.escape(name)} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"README.md has no block marked <!-- test: {name} -->"
    return match.group(1)


def run_snippet(
    name: str, *, url: str, key: str, cwd: Path, replace: dict[str, str] | None = None, shell: dict | None = None
) -> subprocess.CompletedProcess:
    """`shell`: the environment of a new shell in the checkout (its manage.py reads the .env
    `make run` wrote), for a snippet that runs one; else this process's."""
    code = readme_snippet(name)
    assert README_URL in code
    for written, actual in (replace or {}).items():
        assert written in code, written
        code = code.replace(written, actual)
    env = {k: v for k, v in (shell or os.environ).items() if not k.startswith("ANTHROPIC_")}
    return subprocess.run(
        [sys.executable, "-c", code.replace(README_URL, url)], cwd=cwd, env={**env, "MANGO_API_KEY": key},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout: float, message) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message() if callable(message) else message
        time.sleep(0.25)


def test_make_run_twice_from_a_fresh_checkout(tmp_path):
    snippets = tmp_path / "snippets"
    snippets.mkdir()
    with Checkout(tmp_path) as checkout:
        # `make` alone: the targets, one line each, and nothing started.
        plain = checkout.make()
        assert plain.returncode == 0, plain.stderr
        listed = re.findall(r"^  make ([a-z-]+) ", plain.stdout, re.M)
        declared = re.findall(r"^([a-z][a-z-]*):", (checkout.path / "Makefile").read_text(), re.M)
        assert listed[:3] == ["help", "run", "stop"] and sorted(listed) == sorted(declared)
        assert not (checkout.path / "var").exists() and not (checkout.path / ".env").exists()

        # First run, with an upstream that cannot be reached: one warning, in the turn's words.
        unreachable = f"http://127.0.0.1:{closed_port()}"
        env = checkout.run_env(
            PORT=str(free_port()), MANGO_EMBEDDED_S3_PORT=str(free_store_port()),
            ANTHROPIC_BASE_URL=unreachable, MANGO_MODEL_MAX_RETRIES="0",
        )  # fmt: skip
        first = checkout.make_run(env)
        ready = first.banner_then_ready()
        assert ready.status_code == 200, ready.text  # the banner comes once /readyz is 200
        first.wait_ready()
        header, groups = checkout.run_pids()
        assert header["port"] == env["PORT"] and alive(int(header["pid"])) and len(groups) >= 4
        log = first.text()
        assert log.count("could not be reached") == 1, log
        warning = next(line for line in log.splitlines() if "could not be reached" in line)
        assert unreachable in warning and "ANTHROPIC_API_KEY" in warning
        assert "mango.W001" not in log  # printed once, as the banner's warning, not by each command
        # The components' output is in var/log/, not between the user and the banner.
        assert "celery@" not in log and "[tasks]" not in log, log
        assert "celery.apps.worker" in (checkout.path / "var" / "log" / "worker-1.log").read_text()
        after_banner = log.split("Ctrl-C stops everything started here.", 1)[1]
        assert "could not be reached" in after_banner and "INFO" not in after_banner, after_banner
        dotenv = (checkout.path / ".env").read_text()
        assert "MANGO_EMBEDDED_S3=true" in dotenv and f"PORT={env['PORT']}" in dotenv

        # The key from a new shell (it reads .env), then the README's Files quickstart.
        created = checkout.manage("create_api_key", "--workspace", "default")
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip().splitlines()[-1]
        files = run_snippet("files-quickstart", url=first.url, key=key, cwd=snippets)
        assert files.returncode == 0, files.stderr
        assert "notes.md" in files.stdout and "text/markdown" in files.stdout
        client = anthropic.Anthropic(base_url=first.url, api_key=key, max_retries=0)
        [kept] = client.beta.files.list().data

        # A turn then fails with the message the warning quoted (the reason is the same refusal).
        agent = client.beta.agents.create(name="a", model="claude-sonnet-4-5")
        environment = client.beta.environments.create(name="e")
        session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )
        errors = []
        wait_until(
            lambda: errors.extend(
                e for e in client.beta.sessions.events.list(session.id).data if e.type == "session.error"
            ) or errors,
            60, "no session.error",
        )  # fmt: skip
        assert errors[0].error.message in warning, (errors[0].error.message, warning)

        # A second `make run` of the same checkout is refused and names the first.
        second = checkout.make("run", env=checkout.run_env(PORT=str(free_port())), timeout=60)
        assert second.returncode != 0
        assert f"pid {header['pid']}" in second.stderr and f"port {env['PORT']}" in second.stderr
        assert checkout.run_pids() == (header, groups) and all(group_alive(g) for g in groups)

        # `make stop` stops it all.
        stopped = checkout.make("stop")
        assert stopped.returncode == 0, stopped.stderr
        assert first.wait_exit(60) == 0
        assert not [g for g in groups if group_alive(g)]
        assert not (checkout.path / "var" / "run.pids").exists()
        assert "stopping (" in first.text() and "stopped" in first.text()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{first.url}/healthz", timeout=2)

        # Day two: the same command, .env in place, now with the scripted upstream. Files work
        # (the first run's file too), and the README's session quickstart runs as written.
        model = ScriptedModel(default=echo)
        # The README's MCP quickstart: the tests' MCP server (`python -m tests.mcp_server`), on
        # loopback and so allowed by name, as the README says.
        mcp = McpTestServer().start()
        mcp.accepted.add("team-token")
        try:
            # Docker sandboxes this time (the first run's were local processes): the tools
            # quickstart's command runs in one.
            env2 = {
                **env, "ANTHROPIC_BASE_URL": model.url, "MANGO_SANDBOX": "docker",
                "MANGO_OUTBOUND_PRIVATE_HOSTS": mcp.host,
            }  # fmt: skip
            again = checkout.make_run(env2)
            again.wait_ready()
            assert "not usable" not in again.text() and "starting SeaweedFS" in again.text(), again.text()
            files = run_snippet("files-quickstart", url=again.url, key=key, cwd=snippets)
            assert files.returncode == 0, files.stderr
            assert client.beta.files.retrieve_metadata(kept.id).size_bytes == kept.size_bytes
            assert len(client.beta.files.list().data) == 2
            # Both files' bytes are in the embedded store the restart started again.
            store = boto3.client(
                "s3", endpoint_url=f"http://127.0.0.1:{env['MANGO_EMBEDDED_S3_PORT']}", region_name="us-east-1",
                aws_access_key_id="mango", aws_secret_access_key="mango-dev-secret",
            )  # fmt: skip
            objects = store.list_objects_v2(Bucket="mango-files").get("Contents", [])
            assert sorted(o["Size"] for o in objects) == [kept.size_bytes] * 2
            chat = run_snippet("session-quickstart", url=again.url, key=key, cwd=snippets)
            assert chat.returncode == 0, chat.stderr
            assert "(scripted model) You said:" in chat.stdout, chat.stdout
            assert model.requests, "the turn never reached the scripted upstream"
            # The offline model of `make scripted-model` drives the tools: the README's tools
            # quickstart runs a command in a sandbox and downloads the File it wrote.
            model.default = offline
            tools = run_snippet("tools-quickstart", url=again.url, key=key, cwd=snippets)
            assert tools.returncode == 0, tools.stderr
            assert "tool use: echo 'made in the sandbox'" in tools.stdout, tools.stdout
            assert "(scripted model) The tools answered:\nmade in the sandbox" in tools.stdout, tools.stdout
            assert "hello.txt made in the sandbox" in tools.stdout, tools.stdout
            # The self_hosted quickstart (run from the checkout: it makes its environment key with
            # manage.py): the SDK's own worker runs the bash line in its workdir.
            hosted = run_snippet(
                "self-hosted-quickstart", url=again.url, key=key, cwd=checkout.path, shell=checkout.base_env()
            )
            assert hosted.returncode == 0, hosted.stderr
            assert "(scripted model) The tools answered:\n" in hosted.stdout, hosted.stdout
            assert "/agent-workdir" in hosted.stdout and "(error)" not in hosted.stdout, hosted.stdout
            # The MCP quickstart: the vault's token reaches the server, the tool's answer the model.
            team = run_snippet(
                "mcp-quickstart", url=again.url, key=key, cwd=snippets, replace={"127.0.0.1:8765": mcp.host}
            )
            assert team.returncode == 0, team.stderr
            assert "(scripted model) The tools answered:\n5" in team.stdout, team.stdout
            assert mcp.calls and mcp.calls[-1] == ("add", {"a": 2, "b": 3}), mcp.calls
            assert set(mcp.seen_tokens) == {"team-token"}, mcp.seen_tokens

            # A run whose script was killed: the next `make run` names what it left, `make
            # stop` stops that too.
            header, groups = checkout.run_pids()
            os.kill(int(header["pid"]), signal.SIGKILL)
            again.wait_exit(30)
            refused = checkout.make("run", env=env2, timeout=60)
            assert refused.returncode != 0 and "make stop" in refused.stderr, refused.stderr
            assert all(group_alive(g) for g in groups)
            stopped = checkout.make("stop")
            assert stopped.returncode == 0, stopped.stderr
            assert not [g for g in groups if group_alive(g)]

            # A .env written before the embedded store was marked: its default endpoint is still
            # taken for the embedded store, and the rewritten .env carries the mark.
            dotenv = checkout.path / ".env"
            dotenv.write_text(
                "".join(line for line in dotenv.read_text().splitlines(True) if "EMBEDDED_S3=" not in line)
            )
            third = checkout.make_run(env2)
            third.wait_ready()
            assert "starting SeaweedFS" in third.text() and "MANGO_EMBEDDED_S3=true" in dotenv.read_text()
            client.beta.files.upload(file=("third.txt", b"third run\n", "text/plain"))
            assert len(client.beta.files.list().data) == 4  # two uploads, the tools quickstart's output, this one
            assert checkout.make("stop").returncode == 0 and third.wait_exit(60) == 0
        finally:
            model.close()
            mcp.stop()


def _as_from_a_terminal() -> None:
    """SIGINT and SIGQUIT as a terminal's shell leaves them to its commands: default. A suite run
    started in the background of a non-interactive shell (`.ci/run &`, nohup) inherits them
    ignored, and bash can neither trap nor reset a signal ignored when it starts: the script's
    Ctrl-C trap would silently do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class _Receiver:
    """A webhook receiver on loopback: answers 204, keeps each delivery's event type."""

    def __init__(self):
        types = self.types = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                types.append(json.loads(body)["data"]["type"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_ctrl_c_stops_everything_when_output_is_piped(tmp_path):
    """`make run | tee log` in a terminal: Ctrl-C is SIGINT to the whole foreground process group
    (make, the script, tee); the script must outlive tee's pipe, stop every component and say so
    on the terminal (stderr). Run with MANGO_WEBHOOKS_QUEUE set, so its components include the
    webhooks worker of their own (under nice), which delivers an event to a receiver first."""
    receiver = _Receiver()
    with Checkout(tmp_path) as checkout:
        env = checkout.run_env(
            PORT=str(free_port()), MANGO_EMBEDDED_S3_PORT=str(free_store_port()), MANGO_WEBHOOKS_QUEUE="webhooks",
            MANGO_OUTBOUND_PRIVATE_HOSTS=receiver.url.split("/")[2],
        )  # fmt: skip
        out, err = tmp_path / "out.log", tmp_path / "terminal.log"
        err.touch()
        shell = subprocess.Popen(
            ["bash", "-c", f"make run 2>{err} | tee {out} >/dev/null"], cwd=checkout.path, env=env,
            start_new_session=True, preexec_fn=_as_from_a_terminal,
        )  # fmt: skip
        checkout.shells.append(shell)
        url = f"http://127.0.0.1:{env['PORT']}"
        wait_until(lambda: "Mango is serving" in err.read_text(errors="replace"), 180, lambda: err.read_text()[-3000:])
        assert httpx.get(f"{url}/static/admin/css/base.css", timeout=60).status_code == 200
        _, groups = checkout.run_pids()
        assert len(groups) >= 5 and all(group_alive(g) for g in groups)
        assert (checkout.path / ".env").read_text().startswith("# Written by make run")

        # The webhooks worker (nice 19, queue "webhooks") delivers; the turn workers do not.
        key = checkout.manage("create_api_key", "--workspace", "default").stdout.strip().splitlines()[-1]
        made = checkout.manage(
            "create_webhook_endpoint", "--workspace", "default", "--url", receiver.url,
            env=checkout.base_env(MANGO_OUTBOUND_PRIVATE_HOSTS=env["MANGO_OUTBOUND_PRIVATE_HOSTS"]),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        anthropic.Anthropic(base_url=url, api_key=key).beta.environments.create(name="hooked")
        wait_until(lambda: "environment.created" in receiver.types, 60, lambda: receiver.types)
        logs = checkout.path / "var" / "log"
        ran = re.compile(r"Task webhooks\.deliver_due\[[^]]+\] received")
        assert ran.search((logs / "webhooks.log").read_text())
        assert not ran.search((logs / "worker-1.log").read_text())
        niceness = [os.getpriority(os.PRIO_PGRP, group) for group in groups if group_alive(group)]
        assert 19 in niceness and 0 in niceness, niceness

        os.killpg(shell.pid, signal.SIGINT)
        try:  # the script gives its components 20 s to stop before it kills them
            shell.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make run still running 60 s after Ctrl-C; its terminal:\n{err.read_text()[-3000:]}")
        wait_until(lambda: not [g for g in groups if group_alive(g)], 30, lambda: err.read_text()[-3000:])
        terminal = err.read_text(errors="replace")
        assert "stopping (" in terminal and "stopped" in terminal
        assert "Bad file descriptor" not in terminal + out.read_text(errors="replace")
        assert not (checkout.path / "var" / "run.pids").exists()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/healthz", timeout=2)
    receiver.close()


def _store_script(tmp_path: Path, port: int, bucket: str, body: str) -> subprocess.CompletedProcess:
    """`body` run after scripts/lib.sh is sourced with the embedded store's settings (var/ in
    `tmp_path`, S3 on `port`); it must succeed."""
    script = f"""
source scripts/lib.sh
VAR="{tmp_path}"; mkdir -p "$VAR/log"
export MANGO_EMBEDDED_S3_PORT={port} MANGO_FILE_S3_BUCKET={bucket}
export_embedded_s3_env
{body}"""
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240)
    log = tmp_path / "log" / "seaweedfs.log"
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}\n"
        f"seaweedfs.log: {log.read_text()[-3000:] if log.exists() else '(none: no store was started)'}"
    )
    return done


def _second_store_ready_and_gone(stdout: str) -> None:
    """The script's second store (its pid printed after the first's) served, and is gone."""
    assert stdout.splitlines()[-1] == "ready", stdout
    first, second = (int(pid) for pid in re.search(r"first=(\d+) second=(\d+)", stdout).groups())
    assert second != first
    deadline = time.monotonic() + 60
    while group_alive(second) and time.monotonic() < deadline:  # leave nothing running
        time.sleep(0.5)
    assert not group_alive(second)


def test_the_embedded_store_starts_again_right_after_a_stop(tmp_path):
    """`make test` (or `make run`) right after the last one stopped: the SeaweedFS it stopped takes
    ~12 s to exit and holds its master, volume and filer ports until then, so the new start waits
    for them (scripts/lib.sh start_embedded_s3) instead of failing with "SeaweedFS exited"."""
    started = time.monotonic()
    done = _store_script(
        tmp_path,
        free_store_port(),
        "mango-restart",
        """start_embedded_s3
first=$EMBEDDED_S3_PID
kill -- "-$first"
EMBEDDED_S3_PID=""
start_embedded_s3
echo "first=$first second=$EMBEDDED_S3_PID"
s3_bucket_ready && echo ready
kill -- "-$EMBEDDED_S3_PID"
""",
    )
    assert "shutting down" in done.stderr, done.stderr  # it waited, and then started its own
    _second_store_ready_and_gone(done.stdout)
    print(f"second start ready {time.monotonic() - started:.1f} s after the first began")


def test_a_store_on_another_port_waits_for_the_data_directory(tmp_path):
    """A store on another S3 port of the same checkout (say `make test` with
    MANGO_EMBEDDED_S3_PORT right after `make run` stopped) shares var/seaweedfs, which weed locks:
    the new start waits for the old store to exit (it used to die with "SeaweedFS exited"), and
    while that store keeps running it stops with a message naming it."""
    first_port, second_port = free_store_port(), free_store_port()
    done = _store_script(
        tmp_path,
        first_port,
        "mango-handover",
        f"""start_embedded_s3
first=$EMBEDDED_S3_PID
(
  export MANGO_EMBEDDED_S3_PORT={second_port}; export_embedded_s3_env; EMBEDDED_S3_PID=""
  WEED_EXIT_WAIT_SECONDS=2 start_embedded_s3
) && echo "second started beside the first" || echo "refused while the first runs"
kill -- "-$first"
export MANGO_EMBEDDED_S3_PORT={second_port}
export_embedded_s3_env
EMBEDDED_S3_PID=""
start_embedded_s3
echo "first=$first second=$EMBEDDED_S3_PID"
s3_bucket_ready && echo ready
kill -- "-$EMBEDDED_S3_PID"
""",
    )
    assert "refused while the first runs" in done.stdout, done.stdout
    assert "var/seaweedfs is in use by another SeaweedFS (pid " in done.stderr, done.stderr
    assert f"-s3.port={first_port}" in done.stderr, done.stderr
    assert "holds var/seaweedfs" in done.stderr, done.stderr  # the start after the stop waited
    _second_store_ready_and_gone(done.stdout)
