"""Settings, part 4: the REST framework, Celery and beat, webhooks, deployments, dreams and logging."""

import logging
from datetime import timedelta

from config.settings.base import REDIS_URL, env
from core.logging import json_logging_config

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
CELERY_TASK_ROUTES = (
    "sessions.dispatch.route_task",
    "webhooks.routing.route_task",
    "deployments.routing.route_task",
    "dreams.routing.route_task",
)
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
# hold at most this many delivery slots (and never every thread of a run), never another tenant's.
MANGO_WEBHOOK_INFLIGHT_MAX = env.int("MANGO_WEBHOOK_INFLIGHT_MAX", default=4)
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
# Live (unarchived) deployments a workspace may hold: each fires sessions on its schedule.
MANGO_WORKSPACE_MAX_DEPLOYMENTS = env.int("MANGO_WORKSPACE_MAX_DEPLOYMENTS", default=100)
CELERY_BEAT_SCHEDULE["deployments-fire-due"] = {
    "task": "deployments.fire_due",
    "schedule": timedelta(seconds=MANGO_DEPLOYMENTS_POLL_SECONDS),
}

# --- Dreams (dreams/): jobs that reorganize a memory store from past sessions (docs/dreams.md) -
MANGO_DREAMS_BETA = "dreaming-2026-04-21"
# Characters of the input sessions' transcripts given to a dream (the most recent are kept).
MANGO_DREAM_TRANSCRIPT_MAX_CHARS = env.int("MANGO_DREAM_TRANSCRIPT_MAX_CHARS", default=200_000)
# Dreams a workspace may have pending or running at once (each is a session at work): past it, 429.
MANGO_WORKSPACE_MAX_DREAMS = env.int("MANGO_WORKSPACE_MAX_DREAMS", default=4)
# The list cost a dream may spend, in US cents (its session's budget, taken at create): at the cap
# it makes no more model requests and fails with budget_reached. 0: no budget.
MANGO_DREAM_MAX_LIST_COST_CENTS = env.int("MANGO_DREAM_MAX_LIST_COST_CENTS", default=500)
# A dream running longer than this fails (type timeout) and its session is interrupted.
MANGO_DREAM_TIMEOUT_SECONDS = env.int("MANGO_DREAM_TIMEOUT_SECONDS", default=3600)
# A dream still pending after this long has its start sent again (its task was lost).
MANGO_DREAM_START_RETRY_SECONDS = env.int("MANGO_DREAM_START_RETRY_SECONDS", default=60)
MANGO_DREAMS_POLL_SECONDS = env.float("MANGO_DREAMS_POLL_SECONDS", default=10.0)
CELERY_BEAT_SCHEDULE["dreams-sweep"] = {
    "task": "dreams.sweep",
    "schedule": timedelta(seconds=MANGO_DREAMS_POLL_SECONDS),
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
