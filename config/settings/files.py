"""Settings, part 2: the Files store, API behaviour and limits, serving and per-workspace caps."""

from botocore.config import Config as BotoConfig

from config.settings.base import DATA_UPLOAD_MAX_MEMORY_SIZE, env

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
