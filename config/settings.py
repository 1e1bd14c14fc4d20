"""Mango settings: the one env-driven module. Every value that varies comes from the environment.

Each variable is documented, with its default, in docs/configuration.md.
"""

import logging
from datetime import timedelta
from pathlib import Path

import environ
from botocore.config import Config as BotoConfig

from core.logging import json_logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# `make run` writes .env (the embedded store's endpoint and credentials, …) so that every
# management command started from another shell sees the same defaults. Variables already in
# the environment win over the file.
ENV_FILE = env.str("MANGO_ENV_FILE", default=str(BASE_DIR / ".env"))
if ENV_FILE and Path(ENV_FILE).is_file():
    environ.Env.read_env(ENV_FILE)

DEBUG = env.bool("DJANGO_DEBUG", default=False)
# No secret default outside DEBUG: a deployment that forgot the key must not sign sessions and
# CSRF tokens with a value published in this file. One line, not a traceback (`make run` writes
# a random key into its .env; the tests set their own in pyproject.toml).
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise SystemExit(
            "[mango] DJANGO_SECRET_KEY is not set: set it to a long random value"
            " (or DJANGO_DEBUG=true for a development-only default)."
        )
    SECRET_KEY = "mango-dev-insecure-secret-key-debug-only"
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["*"])
PORT = env.int("PORT", default=8000)

# Behind a TLS-terminating proxy: trust its X-Forwarded-Proto (only when the proxy always sets
# it), list the admin's public origin(s) for CSRF, and send cookies over HTTPS only.
if env.bool("DJANGO_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=False)

INSTALLED_APPS = [
    "core.apps.MangoAdminConfig",  # django.contrib.admin, with the operator dashboard
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "core",
    "files",
    "agents",
    "vaults",
    "memory",
    "skills",
    "sessions.apps.SessionsConfig",
    "webhooks",
    "deployments",
    "processors",
]

MIDDLEWARE = [
    "core.metrics.MetricsMiddleware",
    "core.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS/JS) from the app process itself, in every layout.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/mango"),
}
# Each process takes connections from a bounded psycopg pool (Django's native one): at most
# MANGO_DB_POOL_MAX_SIZE at once, a request waits up to MANGO_DB_POOL_TIMEOUT_SECONDS for one
# (then 503), and connections above MANGO_DB_POOL_MIN_SIZE are closed one per
# MANGO_DB_POOL_MAX_IDLE_SECONDS of disuse. With the pool, a connection goes back to it at the end
# of every request (Django requires CONN_MAX_AGE=0 then; DATABASE_CONN_MAX_AGE applies only
# without the pool). docs/operating.md "Database connections" gives the worst-case total.
MANGO_DB_POOL = env.bool("MANGO_DB_POOL", default=True)
MANGO_DB_POOL_MIN_SIZE = env.int("MANGO_DB_POOL_MIN_SIZE", default=1)
MANGO_DB_POOL_MAX_SIZE = env.int("MANGO_DB_POOL_MAX_SIZE", default=8)
MANGO_DB_POOL_TIMEOUT_SECONDS = env.float("MANGO_DB_POOL_TIMEOUT_SECONDS", default=10.0)
MANGO_DB_POOL_MAX_IDLE_SECONDS = env.float("MANGO_DB_POOL_MAX_IDLE_SECONDS", default=5.0)
if MANGO_DB_POOL:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": MANGO_DB_POOL_MIN_SIZE,
        "max_size": MANGO_DB_POOL_MAX_SIZE,
        "timeout": MANGO_DB_POOL_TIMEOUT_SECONDS,
        "max_idle": MANGO_DB_POOL_MAX_IDLE_SECONDS,
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
# Also serve app static files that collectstatic has not copied yet (tests, a fresh checkout).
WHITENOISE_USE_FINDERS = True

# JSON bodies (events, agents, ...) are small; file uploads stream through files.uploads and
# are bounded by MANGO_FILE_MAX_BYTES instead.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("MANGO_MAX_JSON_BODY_BYTES", default=32 * 1024 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

# --- Files storage --------------------------------------------------------------------------
MANGO_FILE_S3_BUCKET = env.str("MANGO_FILE_S3_BUCKET", default="") or None
MANGO_FILE_S3_ENDPOINT_URL = env.str("MANGO_FILE_S3_ENDPOINT_URL", default="") or None
MANGO_FILE_S3_REGION = env.str("MANGO_FILE_S3_REGION", default="us-east-1")
MANGO_FILE_S3_ACCESS_KEY_ID = env.str("MANGO_FILE_S3_ACCESS_KEY_ID", default="") or None
MANGO_FILE_S3_SECRET_ACCESS_KEY = env.str("MANGO_FILE_S3_SECRET_ACCESS_KEY", default="") or None
# SHA-256 in the signature of every request body sent to the store. Off: bodies are covered by
# the CRC32C checksum header sent with each (files/storage/base.py) and verified by the store, which
# spares a second SHA-256 pass over every uploaded byte.
MANGO_FILE_S3_SIGN_PAYLOAD = env.bool("MANGO_FILE_S3_SIGN_PAYLOAD", default=False)
# The object store's backend (files/storage/__init__.py), chosen once per process: on, upload
# parts and object GETs go as one signed request each on kept-alive connections
# (files/storage/signed.py) instead of through botocore's request pipeline, when the store is
# reached over plain http; off, every request goes through boto3 (files/storage/boto.py).
MANGO_FILE_S3_RAW_REQUESTS = env.bool("MANGO_FILE_S3_RAW_REQUESTS", default=True)
# Downloads under config.asgi move the body from the store's socket to the client's with
# splice(2) (config/downloads.py) when the store is reached over plain http; off: read in chunks.
MANGO_FILE_DOWNLOAD_SPLICE = env.bool("MANGO_FILE_DOWNLOAD_SPLICE", default=True)
MANGO_FILE_MAX_BYTES = env.int("MANGO_FILE_MAX_BYTES", default=500_000_000)
# Per-workspace Files quota (files/quotas.py): bytes and count of ready Files, all origins.
MANGO_WORKSPACE_FILES_MAX_BYTES = env.int("MANGO_WORKSPACE_FILES_MAX_BYTES", default=100 * 1000**3)
MANGO_WORKSPACE_FILES_MAX_COUNT = env.int("MANGO_WORKSPACE_FILES_MAX_COUNT", default=100_000)
# An intent younger than this is presumed live (another process may still be streaming it).
MANGO_RECONCILE_GRACE_SECONDS = env.int("MANGO_RECONCILE_GRACE_SECONDS", default=3600)

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    "files": {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": MANGO_FILE_S3_BUCKET,
            "endpoint_url": MANGO_FILE_S3_ENDPOINT_URL,
            "region_name": MANGO_FILE_S3_REGION,
            "access_key": MANGO_FILE_S3_ACCESS_KEY_ID,
            "secret_key": MANGO_FILE_S3_SECRET_ACCESS_KEY,
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": False,
            "addressing_style": "path",
            "signature_version": "s3v4",
            "client_config": BotoConfig(
                connect_timeout=5,
                read_timeout=60,
                retries={"max_attempts": 3, "mode": "standard"},
                max_pool_connections=64,
                s3={"addressing_style": "path", "payload_signing_enabled": MANGO_FILE_S3_SIGN_PAYLOAD},
                signature_version="s3v4",
            ),
        },
    },
}

# --- API behaviour --------------------------------------------------------------------------
MANGO_STRICT = env.bool("MANGO_STRICT", default=False)
MANGO_FILES_BETA = "files-api-2025-04-14"
MANGO_AGENTS_BETA = "managed-agents-2026-04-01"
MANGO_SKILLS_BETA = "skills-2025-10-02"

# PDFs and images from Files sent to the model as base64 (processors/media.py): the upstream's
# per-image limit, and a PDF size whose base64 fits the Messages API's 32 MB request limit.
MANGO_MODEL_IMAGE_MAX_BYTES = env.int("MANGO_MODEL_IMAGE_MAX_BYTES", default=5 * 1024 * 1024)
MANGO_MODEL_PDF_MAX_BYTES = env.int("MANGO_MODEL_PDF_MAX_BYTES", default=24 * 1024 * 1024)
# What one turn loads of them (all a request carries): the Messages API's 32 MB request limit.
MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES = env.int("MANGO_MODEL_REQUEST_MEDIA_MAX_BYTES", default=32 * 1024 * 1024)
# List prices for budgets beyond (or instead of) sessions/pricing.py's table: JSON
# {"model id": [input, 5m cache write, 1h cache write, cache read, output]} in USD per MTok.
MANGO_MODEL_LIST_PRICES = env.str("MANGO_MODEL_LIST_PRICES", default="")
# The toolset's web_search / web_fetch are the upstream's server tools; an upstream without them
# (a stand-in, a gateway) sets this false and they are not offered at all.
MANGO_MODEL_SERVER_WEB_TOOLS = env.bool("MANGO_MODEL_SERVER_WEB_TOOLS", default=True)
# Input tokens past which a session's conversation is compacted (a summarizing call) before the
# next model call; 0: the default, 150,000 (below every named model's window).
MANGO_CONTEXT_COMPACT_TOKENS = env.int("MANGO_CONTEXT_COMPACT_TOKENS", default=0)

# Skills (skills/services.py; docs/configuration.md): what one upload may hold, checked while
# it streams and again before anything is stored; versions per skill and skills per workspace.
MANGO_SKILL_MAX_FILES = env.int("MANGO_SKILL_MAX_FILES", default=500)
MANGO_SKILL_FILE_MAX_BYTES = env.int("MANGO_SKILL_FILE_MAX_BYTES", default=8 * 1024 * 1024)
MANGO_SKILL_MAX_BYTES = env.int("MANGO_SKILL_MAX_BYTES", default=32 * 1024 * 1024)
MANGO_SKILL_MAX_VERSIONS = env.int("MANGO_SKILL_MAX_VERSIONS", default=100)
MANGO_WORKSPACE_MAX_SKILLS = env.int("MANGO_WORKSPACE_MAX_SKILLS", default=1000)
# Bytes of all the workspace's skill versions (their files also count toward the storage quota,
# MANGO_WORKSPACE_FILES_MAX_BYTES).
MANGO_WORKSPACE_SKILLS_MAX_BYTES = env.int("MANGO_WORKSPACE_SKILLS_MAX_BYTES", default=1024 * 1024 * 1024)
# Memory stores (memory/services.py): the beta header the SDK sends for them, stores per
# workspace and memories per store. A memory's content (100 kB) and path (1,024 bytes) limits are
# the SDK's, in processors/memory.py.
MANGO_MEMORY_BETA = "agent-memory-2026-07-22"
MANGO_WORKSPACE_MAX_MEMORY_STORES = env.int("MANGO_WORKSPACE_MAX_MEMORY_STORES", default=100)
MANGO_MEMORY_STORE_MAX_MEMORIES = env.int("MANGO_MEMORY_STORE_MAX_MEMORIES", default=2000)
# Bytes of current memory content a workspace holds, over all its stores (versions not counted).
MANGO_WORKSPACE_MEMORY_MAX_BYTES = env.int("MANGO_WORKSPACE_MEMORY_MAX_BYTES", default=1024 * 1024 * 1024)
# Write-back at idle commits this many files per transaction (each file in its own savepoint).
MANGO_MEMORY_WRITEBACK_BATCH_FILES = env.int("MANGO_MEMORY_WRITEBACK_BATCH_FILES", default=100)
# Django counts a multipart request's files before our own skill limit does: let ours speak.
DATA_UPLOAD_MAX_NUMBER_FILES = max(100, MANGO_SKILL_MAX_FILES + 1)

# --- Serving (config/asgi.py) and per-workspace caps ---------------------------------------
MANGO_SSE_HEARTBEAT_SECONDS = env.float("MANGO_SSE_HEARTBEAT_SECONDS", default=15.0)
# Threads per API process that run Django views for everything but event streams; uploads
# (POST /v1/files) have threads of their own so slow uploads cannot starve other requests.
MANGO_API_THREADS = env.int("MANGO_API_THREADS", default=32)
MANGO_UPLOAD_THREADS = env.int("MANGO_UPLOAD_THREADS", default=32)
# A request body that sends no byte for this long ends with a 408 (an upload is rolled back).
MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS = env.float("MANGO_UPLOAD_IDLE_TIMEOUT_SECONDS", default=30.0)
# A connection's request line and headers must arrive within this (config/uvicorn.py), else 408.
MANGO_HEADER_TIMEOUT_SECONDS = env.float("MANGO_HEADER_TIMEOUT_SECONDS", default=30.0)
# Concurrent uploads / event streams per workspace (over all API processes); beyond: 429.
MANGO_WORKSPACE_MAX_UPLOADS = env.int("MANGO_WORKSPACE_MAX_UPLOADS", default=8)
MANGO_WORKSPACE_MAX_STREAMS = env.int("MANGO_WORKSPACE_MAX_STREAMS", default=100)
# Event-log storage per workspace (JSON bytes of all its sessions' events, deleted sessions'
# logs are purged): a client event beyond it gets 400 storage_quota_exceeded. 0: no quota.
MANGO_WORKSPACE_EVENTS_MAX_BYTES = env.int("MANGO_WORKSPACE_EVENTS_MAX_BYTES", default=10 * 1000**3)
# Requests of one workspace on one API process's threads at once (core.shares; 0: no share); the
# rest wait on the event loop, at most MANGO_WORKSPACE_MAX_WAITING_REQUESTS of them for at most
# MANGO_WORKSPACE_REQUEST_WAIT_SECONDS, then 429. Below MANGO_API_THREADS, so others always get one.
MANGO_WORKSPACE_MAX_REQUESTS = env.int("MANGO_WORKSPACE_MAX_REQUESTS", default=max(1, MANGO_API_THREADS // 2))
MANGO_WORKSPACE_MAX_WAITING_REQUESTS = env.int("MANGO_WORKSPACE_MAX_WAITING_REQUESTS", default=256)
MANGO_WORKSPACE_REQUEST_WAIT_SECONDS = env.float("MANGO_WORKSPACE_REQUEST_WAIT_SECONDS", default=10.0)
# Bytes of large (> 1 MiB) JSON bodies one API process holds at once (core.shares); 0: no budget.
# Default: one body of the largest size at a time (a 26 MB event POST peaks at ~400 MB of memory).
MANGO_LARGE_BODIES_BUDGET_BYTES = env.int("MANGO_LARGE_BODIES_BUDGET_BYTES", default=DATA_UPLOAD_MAX_MEMORY_SIZE)
# Runners (turns) of one workspace at once across the worker fleet; the rest wait, holding no
# thread, and start as the workspace's own turns end (sessions.runtime.fairness). 0: no cap.
MANGO_WORKSPACE_MAX_RUNNING_TURNS = env.int("MANGO_WORKSPACE_MAX_RUNNING_TURNS", default=64)

# --- Sessions runtime -----------------------------------------------------------------------
MANGO_SANDBOX = env.str("MANGO_SANDBOX", default="docker")  # docker | local_process
# The default image is Debian with python3, pip, git, node, npm, curl, ripgrep, jq and gcc
# (deploy/sandbox-debian.Dockerfile; make run builds it); mango-sandbox:latest is the busybox one.
MANGO_SANDBOX_IMAGE = env.str("MANGO_SANDBOX_IMAGE", default="mango-sandbox:bookworm")
MANGO_SANDBOX_LOCAL_ROOT = env.path("MANGO_SANDBOX_LOCAL_ROOT", default=BASE_DIR / "var" / "sandboxes")
DOCKER_HOST = env.str("DOCKER_HOST", default="") or None
# The OCI runtime of every sandbox, egress proxy and package install container, as registered with
# dockerd: runc (Docker's default) or runsc (gVisor; docs/sandboxes.md says how to register it).
# The disk helper and the fallback killer stay runc (they need the host's loop devices and the
# sandbox's pid namespace; neither runs tenant code).
MANGO_SANDBOX_RUNTIME = env.str("MANGO_SANDBOX_RUNTIME", default="runc")
ANTHROPIC_BASE_URL = env.str("ANTHROPIC_BASE_URL", default="https://api.anthropic.com")
ANTHROPIC_API_KEY = env.str("ANTHROPIC_API_KEY", default="") or None
# A list response ends early (with a next page) once its rows reach this many bytes, whatever
# `limit` is: one request's memory does not grow with what tenants chose to store.
MANGO_LIST_RESPONSE_MAX_BYTES = env.int("MANGO_LIST_RESPONSE_MAX_BYTES", default=8 * 1024 * 1024)
MANGO_SANDBOX_CPUS = env.float("MANGO_SANDBOX_CPUS", default=1.0)
MANGO_SANDBOX_MEMORY = env.str("MANGO_SANDBOX_MEMORY", default="1g")
MANGO_SANDBOX_PIDS = env.int("MANGO_SANDBOX_PIDS", default=256)
# Live sandboxes (containers, each up to MANGO_SANDBOX_MEMORY with its tmpfs) per workspace;
# a session's first tool call beyond it gets an error result. 0: no cap.
MANGO_WORKSPACE_MAX_SANDBOXES = env.int("MANGO_WORKSPACE_MAX_SANDBOXES", default=32)
# Isolation of docker sandboxes (sandboxes/policy.py). Commands run as this fixed
# unprivileged uid:gid with no capabilities. /workspace and /mnt/session/outputs are ext4
# filesystems of these sizes on the Docker host's disk (sparse: only what is written takes
# space; ENOSPC beyond; not the sandbox's memory; sandboxes/docker/disks.py). /tmp, /var/tmp, the memory
# stores and the skills are tmpfs of these sizes (ENOSPC beyond; what the sandbox writes to /tmp
# and /var/tmp counts toward MANGO_SANDBOX_MEMORY). The number of processes is bounded by
# MANGO_SANDBOX_PIDS alone (a uid's RLIMIT_NPROC counts it on the whole host: not set).
MANGO_SANDBOX_UID = env.int("MANGO_SANDBOX_UID", default=10001)
MANGO_SANDBOX_WORKDIR_SIZE = env.str("MANGO_SANDBOX_WORKDIR_SIZE", default="10g")
MANGO_SANDBOX_TMP_SIZE = env.str("MANGO_SANDBOX_TMP_SIZE", default="64m")
MANGO_SANDBOX_OUTPUTS_SIZE = env.str("MANGO_SANDBOX_OUTPUTS_SIZE", default="2g")
MANGO_SANDBOX_MEMORY_STORES_SIZE = env.str("MANGO_SANDBOX_MEMORY_STORES_SIZE", default="256m")
MANGO_SANDBOX_SKILLS_SIZE = env.str("MANGO_SANDBOX_SKILLS_SIZE", default="256m")
# The image of the short-lived helper containers (root with CAP_SYS_ADMIN and the loop devices
# only: they make a sandbox's disks; with CAP_KILL only: they stop a sandbox's processes when no
# exec can start). Needs python3, mkfs.ext4 and debugfs; it never runs tenant code.
MANGO_SANDBOX_HELPER_IMAGE = env.str("MANGO_SANDBOX_HELPER_IMAGE", default="mango-sandbox:bookworm")
# A session idle this long has its sandbox checkpointed into the object store and removed; the
# next tool call restores it on whichever worker runs it (sessions/runtime/sleep.py). 0: never.
MANGO_SANDBOX_SLEEP_SECONDS = env.float("MANGO_SANDBOX_SLEEP_SECONDS", default=600.0)
MANGO_SANDBOX_NOFILE = env.int("MANGO_SANDBOX_NOFILE", default=1024)
# The largest file a sandbox command may write (RLIMIT_FSIZE); 0: none beyond the size of the
# mount it is written to (every writable path of a sandbox is a bounded mount).
MANGO_SANDBOX_FSIZE_BYTES = env.int("MANGO_SANDBOX_FSIZE_BYTES", default=0)
# `unrestricted` sandboxes get a bridge network of their own, a /29 from this pool; the host
# firewall rule that keeps them away from the host is installed by the worker (`iptables`, needs
# root) or by the operator (`external`, see docs/operating.md).
MANGO_SANDBOX_NETWORK_POOL = env.str("MANGO_SANDBOX_NETWORK_POOL", default="10.213.0.0/16")
MANGO_SANDBOX_FIREWALL = env.str("MANGO_SANDBOX_FIREWALL", default="iptables")  # iptables | external
# --- Outbound connections and secrets (core/outbound.py, core/secrets.py) ---------------------
# The worker connects for tenants (MCP servers, OAuth token endpoints, git hosts) only to public
# addresses, after DNS and on every redirect; these host or host:port entries may be private.
MANGO_OUTBOUND_PRIVATE_HOSTS = env.list("MANGO_OUTBOUND_PRIVATE_HOSTS", default=[])
# The most bytes of one response body (an MCP reply, a token endpoint's answer) the worker reads
# from a tenant's server; past it the response fails. Keep it above MANGO_MCP_RESULT_MAX_BYTES
# (a tool result's JSON-RPC reply carries the result, escaped, plus its framing).
MANGO_OUTBOUND_RESPONSE_MAX_BYTES = env.int("MANGO_OUTBOUND_RESPONSE_MAX_BYTES", default=16 * 1024 * 1024)
# Fernet keys for secrets at rest, comma-separated: the first encrypts, all decrypt (rotation).
MANGO_VAULT_KEY = env.list("MANGO_VAULT_KEY", default=[])
# `limited` networking (sandboxes/policy.py): each such sandbox with an allow-list gets an
# egress proxy (sandboxes/egress_proxy.py) in a container of this image (it needs python3), reaching
# out from this network (created when missing), with at most this many tunnels at once.
MANGO_SANDBOX_PROXY_IMAGE = env.str("MANGO_SANDBOX_PROXY_IMAGE", default="mango-sandbox:bookworm")
MANGO_SANDBOX_EGRESS_NETWORK = env.str("MANGO_SANDBOX_EGRESS_NETWORK", default="mango-egress")
MANGO_SANDBOX_PROXY_MAX_CONNECTIONS = env.int("MANGO_SANDBOX_PROXY_MAX_CONNECTIONS", default=64)
# Host or host:port entries a sandbox's egress proxy may reach on a private address (tenant code
# reaches them: keep it to what every tenant may use). Separate from MANGO_OUTBOUND_PRIVATE_HOSTS,
# which is the worker's own (an internal git server, a local MCP server).
MANGO_SANDBOX_PRIVATE_HOSTS = env.list("MANGO_SANDBOX_PRIVATE_HOSTS", default=[])
# PEM file of extra CAs the egress proxy trusts upstream when it substitutes credentials (an
# internal CA); the public ones of the proxy image are always trusted.
MANGO_OUTBOUND_CA_FILE = env.str("MANGO_OUTBOUND_CA_FILE", default="")
MANGO_SANDBOX_PROXY_IDLE_SECONDS = env.float("MANGO_SANDBOX_PROXY_IDLE_SECONDS", default=300.0)
# Environment packages (sandboxes/packages.py): the managers the image serves (others are a
# 400 at environment create), the registries `allow_package_managers` opens (empty: the ones this
# machine's apt, pip and npm are configured with, sandboxes/registries.py), and the bounds.
MANGO_SANDBOX_PACKAGE_MANAGERS = env.list("MANGO_SANDBOX_PACKAGE_MANAGERS", default=["apt", "pip", "npm"])
MANGO_SANDBOX_PACKAGE_REGISTRIES = env.list("MANGO_SANDBOX_PACKAGE_REGISTRIES", default=[])
MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS = env.float("MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS", default=600.0)
MANGO_SANDBOX_INSTALL_MAX_BYTES = env.int("MANGO_SANDBOX_INSTALL_MAX_BYTES", default=2 * 1024**3)
MANGO_WORKSPACE_MAX_INSTALLS = env.int("MANGO_WORKSPACE_MAX_INSTALLS", default=2)
MANGO_WORKSPACE_MAX_PACKAGE_IMAGES = env.int("MANGO_WORKSPACE_MAX_PACKAGE_IMAGES", default=8)
# --- Repository resources (integrations/git.py, sessions/runtime/repositories.py) ------------------
# The worker clones (never the sandbox) into a scratch directory of its own, bounded in bytes
# (the directory, received pack included) and time, then streams the tree into the sandbox and
# removes the scratch. Per workspace: at most MANGO_WORKSPACE_REPOSITORY_CLONES clones at once on
# the fleet, and each one is bounded by MANGO_WORKSPACE_REPOSITORY_DISK_BYTES / that count, so a
# workspace never makes a worker hold more than MANGO_WORKSPACE_REPOSITORY_DISK_BYTES of clones.
MANGO_REPOSITORY_MAX_BYTES = env.int("MANGO_REPOSITORY_MAX_BYTES", default=256 * 1024 * 1024)
MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS = env.float("MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS", default=300.0)
MANGO_WORKSPACE_REPOSITORY_CLONES = env.int("MANGO_WORKSPACE_REPOSITORY_CLONES", default=2)
MANGO_WORKSPACE_REPOSITORY_DISK_BYTES = env.int("MANGO_WORKSPACE_REPOSITORY_DISK_BYTES", default=512 * 1024 * 1024)
MANGO_REPOSITORY_SCRATCH_DIR = env.str("MANGO_REPOSITORY_SCRATCH_DIR", default="")
# Vaults (vaults/services.py): per workspace, and credentials per vault.
MANGO_WORKSPACE_MAX_VAULTS = env.int("MANGO_WORKSPACE_MAX_VAULTS", default=100)
MANGO_VAULT_MAX_CREDENTIALS = env.int("MANGO_VAULT_MAX_CREDENTIALS", default=100)
# An OAuth access token is refreshed this long before its expiry (and on a 401).
MANGO_OAUTH_REFRESH_MARGIN_SECONDS = env.float("MANGO_OAUTH_REFRESH_MARGIN_SECONDS", default=60.0)
# The worker's MCP client (sessions/runtime/mcp.py): connect/list and call timeouts, the bytes of
# one tool result it keeps, and per workspace the MCP connections open and calls in flight.
MANGO_MCP_CONNECT_TIMEOUT_SECONDS = env.float("MANGO_MCP_CONNECT_TIMEOUT_SECONDS", default=15.0)
MANGO_MCP_CALL_TIMEOUT_SECONDS = env.float("MANGO_MCP_CALL_TIMEOUT_SECONDS", default=120.0)
MANGO_MCP_RESULT_MAX_BYTES = env.int("MANGO_MCP_RESULT_MAX_BYTES", default=1024 * 1024)
MANGO_WORKSPACE_MAX_MCP_CONNECTIONS = env.int("MANGO_WORKSPACE_MAX_MCP_CONNECTIONS", default=64)
MANGO_WORKSPACE_MAX_MCP_CALLS = env.int("MANGO_WORKSPACE_MAX_MCP_CALLS", default=32)
MANGO_TOOL_TIMEOUT_SECONDS = env.float("MANGO_TOOL_TIMEOUT_SECONDS", default=600.0)
MANGO_MODEL_MAX_TOKENS = env.int("MANGO_MODEL_MAX_TOKENS", default=8192)
# Thinking on every turn's model call (sessions/runtime/model.py thinking_config): adaptive where
# the model takes it, else a budget (enabled); `enabled` always budgets; `off` sends none.
MANGO_MODEL_THINKING = env.str("MANGO_MODEL_THINKING", default="adaptive")
if MANGO_MODEL_THINKING not in ("adaptive", "enabled", "off"):
    raise SystemExit(f"[mango] MANGO_MODEL_THINKING={MANGO_MODEL_THINKING!r}: one of adaptive, enabled, off.")
MANGO_MODEL_THINKING_BUDGET_TOKENS = env.int("MANGO_MODEL_THINKING_BUDGET_TOKENS", default=4096)
# The model that judges each tool use under the `auto` permission policy (sessions/runtime/judge.py);
# empty: the agent's own model.
MANGO_AUTO_PERMISSION_MODEL = env.str("MANGO_AUTO_PERMISSION_MODEL", default="")
# While an outcome's grader call runs, span.outcome_evaluation_ongoing every this many seconds.
MANGO_OUTCOME_HEARTBEAT_SECONDS = env.float("MANGO_OUTCOME_HEARTBEAT_SECONDS", default=10.0)
MANGO_MODEL_TIMEOUT_SECONDS = env.float("MANGO_MODEL_TIMEOUT_SECONDS", default=600.0)
# Upstream 429/5xx/529 are retried this many times (each a `session.error` with retry_status
# "retrying") before the turn ends with retry_status "exhausted".
MANGO_MODEL_MAX_RETRIES = env.int("MANGO_MODEL_MAX_RETRIES", default=2)
MANGO_MODEL_RETRY_BACKOFF_SECONDS = env.float("MANGO_MODEL_RETRY_BACKOFF_SECONDS", default=2.0)
# A runner renews its lease on a session every few seconds; one silent this long is presumed dead
# and sessions.recover_stuck hands the session to another worker.
MANGO_SESSION_LEASE_SECONDS = env.int("MANGO_SESSION_LEASE_SECONDS", default=60)
# A turn that ends waiting on the client (requires_action: a self_hosted worker's tool results,
# custom tools, confirmations) keeps its runner, lease and thread this long for the answer, so
# the answer continues the turn without a new task (0: the runner lets the session go at once).
# At most half of a threads-pool worker's threads wait so at a time (prefork and solo: none).
MANGO_RUNNER_LINGER_SECONDS = env.float("MANGO_RUNNER_LINGER_SECONDS", default=5.0)
# A multiagent session's threads, its primary counted: a coordinator's spawn past it is an error
# result for its model (docs/multiagent.md).
MANGO_SESSION_THREADS_MAX = env.int("MANGO_SESSION_THREADS_MAX", default=25)
# A multiagent coordinator whose turn is done but whose threads still work waits for their reports
# in its worker thread this long at most (and only as a lingering thread: at most half the pool);
# past it the turn ends idle, and a thread's report starts its next turn.
MANGO_COORDINATOR_WAIT_SECONDS = env.float("MANGO_COORDINATOR_WAIT_SECONDS", default=600.0)
# Self-hosted work queue (sessions/queue/services.py): a work item's lease when a heartbeat asks
# for no TTL, and the most a heartbeat's desired_ttl_seconds may ask for.
MANGO_WORK_LEASE_SECONDS = env.int("MANGO_WORK_LEASE_SECONDS", default=60)
MANGO_WORK_LEASE_MAX_SECONDS = env.int("MANGO_WORK_LEASE_MAX_SECONDS", default=600)
# Each worker looks for turns whose runner died this often (0: only beat's sessions.recover_stuck).
MANGO_SESSION_REAPER_SECONDS = env.float("MANGO_SESSION_REAPER_SECONDS", default=10.0)
# Worker layout: a turn waits on the model and on commands without holding a process, so one
# worker process runs MANGO_WORKER_CONCURRENCY turns at once in threads, sharing the process's
# database pool (MANGO_DB_POOL_MAX_SIZE; no connection is held while a turn waits).
CELERY_WORKER_POOL = env.str("MANGO_WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY = env.int("MANGO_WORKER_CONCURRENCY", default=200)

# --- Django REST framework ------------------------------------------------------------------
REST_FRAMEWORK = {
    # Worker credentials of self-hosted environments first (sessions/queue/auth.py: None for anything else).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "sessions.queue.auth.WorkerCredentialAuthentication",
        "core.auth.ApiKeyAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "core.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Mango",
    "DESCRIPTION": "Self-hosted Files API and Managed Agents sessions.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": ["sessions.schema.add_event_stream", "core.schema.add_error_responses"],
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("MANGO_TASK_SOFT_TIME_LIMIT", default=1800)
CELERY_TASK_TIME_LIMIT = env.int("MANGO_TASK_TIME_LIMIT", default=1900)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Session tasks (sessions.*) go to this queue; the router reads the setting at send time, so a
# test run can use a queue of its own on a shared Redis.
MANGO_SESSIONS_QUEUE = env.str("MANGO_SESSIONS_QUEUE", default="celery")
CELERY_TASK_ROUTES = ("sessions.dispatch.route_task", "webhooks.routing.route_task", "deployments.routing.route_task")
CELERY_BEAT_SCHEDULE = {
    "files-reconcile": {"task": "files.reconcile", "schedule": timedelta(minutes=5)},
    "files-reconcile-given-up": {"task": "files.reconcile_given_up", "schedule": timedelta(seconds=10)},
    "files-expire": {"task": "files.expire", "schedule": timedelta(minutes=1)},
    "sessions-recover": {"task": "sessions.recover_stuck", "schedule": timedelta(minutes=1)},
    "sessions-orphan-files": {"task": "sessions.orphan_files_sweep", "schedule": timedelta(minutes=10)},
    "skills-unfinished": {"task": "sessions.skills_unfinished_sweep", "schedule": timedelta(minutes=10)},
}

# --- Webhooks (webhooks/): delivery of a workspace's events to its endpoints ------------------
# The queue of webhooks.* tasks (webhooks/routing.py); a worker must consume it.
MANGO_WEBHOOKS_QUEUE = env.str("MANGO_WEBHOOKS_QUEUE", default="celery")
MANGO_WEBHOOK_ENDPOINTS_MAX = env.int("MANGO_WEBHOOK_ENDPOINTS_MAX", default=20)
# Deliveries of one workspace leased at once (across the fleet): one tenant's dead endpoints
# hold at most this many delivery slots, never another tenant's.
MANGO_WEBHOOK_INFLIGHT_MAX = env.int("MANGO_WEBHOOK_INFLIGHT_MAX", default=8)
MANGO_WEBHOOK_DELIVERY_THREADS = env.int("MANGO_WEBHOOK_DELIVERY_THREADS", default=8)
MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS = env.float("MANGO_WEBHOOK_CONNECT_TIMEOUT_SECONDS", default=5.0)
MANGO_WEBHOOK_TIMEOUT_SECONDS = env.float("MANGO_WEBHOOK_TIMEOUT_SECONDS", default=15.0)
MANGO_WEBHOOK_RESPONSE_MAX_BYTES = env.int("MANGO_WEBHOOK_RESPONSE_MAX_BYTES", default=64 * 1024)
# A claimed delivery's lease: past it (its worker died) another worker takes it. Above the timeout.
MANGO_WEBHOOK_LEASE_SECONDS = env.float("MANGO_WEBHOOK_LEASE_SECONDS", default=60.0)
# Retries: base * 2**(n-1) after the nth failure, at most the max delay, for RETRY_SECONDS (3 days).
MANGO_WEBHOOK_RETRY_BASE_SECONDS = env.float("MANGO_WEBHOOK_RETRY_BASE_SECONDS", default=5.0)
MANGO_WEBHOOK_RETRY_MAX_DELAY_SECONDS = env.float("MANGO_WEBHOOK_RETRY_MAX_DELAY_SECONDS", default=3600.0)
MANGO_WEBHOOK_RETRY_SECONDS = env.int("MANGO_WEBHOOK_RETRY_SECONDS", default=3 * 86400)
# After rotate_secret, the previous secret also signs for this long.
MANGO_WEBHOOK_SECRET_OVERLAP_SECONDS = env.int("MANGO_WEBHOOK_SECRET_OVERLAP_SECONDS", default=86400)
MANGO_WEBHOOK_POLL_SECONDS = env.float("MANGO_WEBHOOK_POLL_SECONDS", default=5.0)
CELERY_BEAT_SCHEDULE["webhooks-deliver-due"] = {
    "task": "webhooks.deliver_due",
    "schedule": timedelta(seconds=MANGO_WEBHOOK_POLL_SECONDS),
}

# --- Deployments (deployments/): cron schedules, fired by beat's deployments.fire_due ----------
MANGO_DEPLOYMENTS_QUEUE = env.str("MANGO_DEPLOYMENTS_QUEUE", default="celery")
MANGO_DEPLOYMENTS_POLL_SECONDS = env.float("MANGO_DEPLOYMENTS_POLL_SECONDS", default=5.0)
CELERY_BEAT_SCHEDULE["deployments-fire-due"] = {
    "task": "deployments.fire_due",
    "schedule": timedelta(seconds=MANGO_DEPLOYMENTS_POLL_SECONDS),
}

# Worker/beat liveness (core/heartbeats.py): renewed every MANGO_HEARTBEAT_SECONDS, gone after
# MANGO_HEARTBEAT_STALE_SECONDS without renewal. /readyz needs a live worker on the sessions queue
# unless MANGO_READYZ_REQUIRE_WORKER is false.
MANGO_HEARTBEAT_SECONDS = env.float("MANGO_HEARTBEAT_SECONDS", default=10.0)
MANGO_HEARTBEAT_STALE_SECONDS = env.int("MANGO_HEARTBEAT_STALE_SECONDS", default=30)
MANGO_READYZ_REQUIRE_WORKER = env.bool("MANGO_READYZ_REQUIRE_WORKER", default=True)
# /readyz answers within this, whatever hangs; a check that has not answered by then is down.
MANGO_READYZ_TIMEOUT_SECONDS = env.float("MANGO_READYZ_TIMEOUT_SECONDS", default=2.0)

# /metrics (core/metrics.py) asks for `Authorization: Bearer <token>` when this is set.
MANGO_METRICS_TOKEN = env.str("MANGO_METRICS_TOKEN", default="") or None

# --- Logging: one JSON object per line, every process (core/logging.py) -------------------
LOGGING = json_logging_config(env.str("MANGO_LOG_LEVEL", default="INFO"))
logging.captureWarnings(True)  # Python warnings become JSON lines too (logger py.warnings)
