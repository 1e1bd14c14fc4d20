# The Mango app image: API (gunicorn), Celery worker and beat all run from it.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=config.settings \
    PORT=8000

WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .
RUN useradd --system --uid 10001 --home-dir /app mango \
    && mkdir -p /app/var \
    && DJANGO_SECRET_KEY=build python manage.py collectstatic --noinput -v 0 \
    && chown -R mango /app/var

USER mango
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import os,urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ.get(\"PORT\",\"8000\")}/healthz')"
# uvicorn workers serving config.asgi on one port (README "Serving"); WEB_CONCURRENCY workers.
CMD ["sh", "-c", "exec gunicorn -c config/gunicorn.conf.py --bind 0.0.0.0:${PORT} config.asgi:application"]
