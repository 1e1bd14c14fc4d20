"""Settings, part 1: the environment (.env), Django itself, the database, Redis and the apps."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent

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
    "dreams",
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
