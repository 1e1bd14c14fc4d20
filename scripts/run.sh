#!/usr/bin/env bash
# `make run`: set everything up on a fresh machine and serve the API. Ctrl-C stops it all.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
started=$SECONDS

ensure_venv
check_database_and_redis
export PORT="${PORT:-8000}"

pids=()
cleanup() {
  trap - INT TERM EXIT
  say "stopping"
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

if [ -z "${MANGO_FILE_S3_ENDPOINT_URL:-}" ]; then
  export_embedded_s3_env
  EMBEDDED_S3_PID=""
  start_embedded_s3
  [ -n "$EMBEDDED_S3_PID" ] && pids+=("$EMBEDDED_S3_PID")
fi

if [ "${MANGO_SANDBOX:-docker}" = docker ]; then
  if ensure_dockerd; then ensure_sandbox_image || say "could not build the sandbox image"; fi
fi

ensure_database
# Prometheus multiprocess mode: gunicorn workers, Celery and commands record into one directory,
# emptied at each start (README, "Operating").
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$VAR/prometheus}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py collectstatic --noinput -v 0
"$PY" manage.py reconcile_files

# One public port: uvicorn workers serving config.asgi (README "Serving"); logging, timeouts and
# worker recycling: config/gunicorn.conf.py.
setsid "$VENV/bin/gunicorn" -c config/gunicorn.conf.py config.asgi:application --bind "127.0.0.1:$PORT" &
pids+=($!)
# Worker and beat processes take at most MANGO_WORKER_DB_POOL_MAX_SIZE database connections each
# (README "Database connections" adds them up).
MANGO_DB_POOL_MAX_SIZE="${MANGO_WORKER_DB_POOL_MAX_SIZE:-3}" \
  setsid "$VENV/bin/celery" -A config worker --loglevel INFO --concurrency 2 &
pids+=($!)
MANGO_DB_POOL_MAX_SIZE="${MANGO_WORKER_DB_POOL_MAX_SIZE:-3}" \
  setsid "$VENV/bin/celery" -A config beat --loglevel INFO --schedule "$VAR/celerybeat-schedule" &
pids+=($!)

for _ in $(seq 1 120); do port_open 127.0.0.1 "$PORT" && break; sleep 0.25; done
elapsed=$((SECONDS - started))
cat >&2 <<MSG

  Mango is serving at http://127.0.0.1:$PORT  (ready in ${elapsed}s)

  Get an API key:   .venv/bin/python manage.py create_api_key --workspace default
  Use it:           anthropic.Anthropic(base_url="http://127.0.0.1:$PORT", api_key=KEY)
  Admin:            http://127.0.0.1:$PORT/admin/  (.venv/bin/python manage.py createsuperuser)

  Ctrl-C stops everything started here.
MSG
wait -n "${pids[@]}"
say "a component exited; shutting down"
