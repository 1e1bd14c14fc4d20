#!/usr/bin/env bash
# `make run`: set everything up on a fresh machine and serve the API. Ctrl-C stops it all.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
started=$SECONDS

# One run per checkout: the runs would share var/ (the store's data, beat's schedule, the pids
# `make stop` reads). The lock is held on fd 9 for this script's life (its components get no copy
# of it); var/run.pids names the run (pid, port) and its components' process groups.
PIDS_FILE="$VAR/run.pids"
exec 9>>"$VAR/run.lock"
if ! flock -n 9; then
  die "make run is already running in this checkout ($(describe_run)); stop it first (Ctrl-C in its terminal, or make stop)."
fi
if live_run_groups >/dev/null; then
  die "a make run that did not exit left processes running ($(describe_run), process groups $(live_run_groups | xargs)); run make stop."
fi
rm -f "$PIDS_FILE"  # a dead run's: nothing of it lives

# The embedded store is decided from what the user set, not from the endpoint a previous run
# wrote to .env (marked MANGO_EMBEDDED_S3=true there): that one is started again.
user_s3_endpoint="${MANGO_FILE_S3_ENDPOINT_URL:-}"
load_env_file
# (A .env from before the mark: its endpoint is the embedded store's when it is the default one.)
if [ -z "$user_s3_endpoint" ] && [ -z "${MANGO_EMBEDDED_S3:-}" ] && env_file_is_ours \
  && [ "${MANGO_FILE_S3_ENDPOINT_URL:-}" = "http://127.0.0.1:${MANGO_EMBEDDED_S3_PORT:-8333}" ]; then
  MANGO_EMBEDDED_S3=true
fi
if [ -z "$user_s3_endpoint" ] && [ "${MANGO_EMBEDDED_S3:-}" = true ]; then unset MANGO_FILE_S3_ENDPOINT_URL; fi
ensure_venv
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mango}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
check_database_and_redis
export PORT="${PORT:-8000}"
if port_open 127.0.0.1 "$PORT"; then
  die "port $PORT on 127.0.0.1 is already in use by another program; set PORT to a free one (PORT=8001 make run)."
fi
# The server refuses to start without a secret key (config/settings/): a first run makes a
# random one, which .env keeps for the next runs and for manage.py in other shells.
export DJANGO_SECRET_KEY="${DJANGO_SECRET_KEY:-$("$PY" -c 'import secrets; print(secrets.token_urlsafe(48))')}"
# Likewise the key that encrypts secrets at rest (vault credentials, repository tokens).
export MANGO_VAULT_KEY="${MANGO_VAULT_KEY:-$("$PY" -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')}"

# Ctrl-C stops everything, also under `make run | tee log`: the components run in their own
# sessions (so each can be stopped as a group), output to a closed pipe must not kill this
# script before it has stopped them, and a component that ignores SIGTERM is killed after 20 s.
# Their process groups are recorded in var/run.pids as each starts, for `make stop`.
pids=()
names=()
logs=()
trap '' PIPE
record_run() { write_run_pids "$PORT" "${pids[@]}"; }
# Each component's output goes to its own log in var/log/ (`make logs` follows them), so that
# this terminal keeps the banner; a component that exits has its log's end shown here.
started_component() { pids+=("$1"); names+=("$2"); logs+=("${3:-}"); record_run; }
component_name() {
  local i
  for i in "${!pids[@]}"; do [ "${pids[$i]}" = "$1" ] && { echo "${names[$i]}"; return; }; done
  echo "a component"
}
component_log() {
  local i
  for i in "${!pids[@]}"; do [ "${pids[$i]}" = "$1" ] && { echo "${logs[$i]}"; return; }; done
}
cleanup() {
  trap - INT TERM HUP EXIT
  trap '' INT TERM HUP
  say "stopping (${#pids[@]} components)" || true
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 40); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  rm -f "$PIDS_FILE"
  say "stopped" || true
  exit "${1:-0}"
}
trap cleanup INT TERM HUP
trap 'cleanup $?' EXIT
record_run

MANGO_EMBEDDED_S3=false
if [ -z "${MANGO_FILE_S3_ENDPOINT_URL:-}" ]; then
  MANGO_EMBEDDED_S3=true
  export_embedded_s3_env
  export MANGO_EMBEDDED_S3_PORT="$EMBEDDED_S3_PORT"
  EMBEDDED_S3_PID=""
  start_embedded_s3
  if [ -n "$EMBEDDED_S3_PID" ]; then started_component "$EMBEDDED_S3_PID" SeaweedFS; fi
fi

if [ "${MANGO_SANDBOX:-docker}" = docker ]; then
  if ensure_dockerd; then ensure_sandbox_image || say "could not build the sandbox image"; fi
fi

ensure_database
# Prometheus multiprocess mode: gunicorn workers, Celery and commands record into one directory,
# emptied at each start (docs/operating.md).
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$VAR/prometheus}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py collectstatic --noinput -v 0
"$PY" manage.py reconcile_files

write_env_file DJANGO_SECRET_KEY MANGO_VAULT_KEY DATABASE_URL REDIS_URL PORT MANGO_FILE_S3_ENDPOINT_URL MANGO_FILE_S3_BUCKET \
  MANGO_FILE_S3_REGION MANGO_FILE_S3_ACCESS_KEY_ID MANGO_FILE_S3_SECRET_ACCESS_KEY MANGO_EMBEDDED_S3 \
  MANGO_EMBEDDED_S3_PORT PROMETHEUS_MULTIPROC_DIR ANTHROPIC_BASE_URL
upstream_warning="$("$PY" manage.py check --deploy --tag model_upstream 2>&1 | grep -A1 'mango.W001' \
  | sed 's/^?: (mango.W001) //; s/^\tHINT: /  /' || true)"

# One public port: uvicorn workers serving config.asgi (docs/operating.md "Serving"); logging, timeouts and
# worker recycling: config/gunicorn.conf.py.
setsid "$VENV/bin/gunicorn" -c config/gunicorn.conf.py config.asgi:application --bind "127.0.0.1:$PORT" \
  >>"$VAR/log/api.log" 2>&1 9>&- &
started_component $! "the API (gunicorn)" "$VAR/log/api.log"
# Turns run in threads (MANGO_WORKER_POOL=threads): one worker process runs
# MANGO_WORKER_CONCURRENCY turns at once; a process is bound to one core by Python's interpreter
# lock, so the node runs MANGO_WORKER_PROCESSES of them (default 2 x 100 = 200 turns). Worker and
# beat processes take at most MANGO_WORKER_DB_POOL_MAX_SIZE (4) database connections each
# (docs/operating.md "Database connections" adds them up; "Workers"). Workers find each other
# through Redis heartbeats (core/heartbeats.py), not Celery's gossip, mingle and event heartbeats,
# which are off: Gossip's restart after a Redis outage fails (AttributeError, celery/kombu#582).
#
# Webhook deliveries: by the turn workers (MANGO_WEBHOOKS_QUEUE's default is the sessions' queue),
# or, with MANGO_WEBHOOKS_QUEUE set to another queue (for every process started here), by a worker
# of their own on it under `nice -n MANGO_WEBHOOKS_WORKER_NICE` (19). Measured with 100 sessions
# into 10 endpoints (bench/webhooks_sessions.py, docs/benchmarks.md) the sessions' wall grew less
# with the deliveries in the turn workers (+8 %) than in a process of their own (+13 % at nice 19,
# +16 % at 10), hence the default.
worker_processes="${MANGO_WORKER_PROCESSES:-2}"
for index in $(seq 1 "$worker_processes"); do
  MANGO_DB_POOL_MAX_SIZE="${MANGO_WORKER_DB_POOL_MAX_SIZE:-4}" \
    MANGO_WORKER_CONCURRENCY="${MANGO_WORKER_CONCURRENCY:-100}" \
    setsid "$VENV/bin/celery" -A config worker --loglevel INFO -n "worker$index-$$@%h" \
      --without-gossip --without-mingle --without-heartbeat >>"$VAR/log/worker-$index.log" 2>&1 9>&- &
  started_component $! "Celery worker $index" "$VAR/log/worker-$index.log"
done
if [ "${MANGO_WEBHOOKS_QUEUE:-celery}" != "${MANGO_SESSIONS_QUEUE:-celery}" ]; then
  MANGO_DB_POOL_MAX_SIZE="${MANGO_WORKER_DB_POOL_MAX_SIZE:-4}" \
    setsid nice -n "${MANGO_WEBHOOKS_WORKER_NICE:-19}" "$VENV/bin/celery" -A config worker --loglevel INFO \
      -Q "$MANGO_WEBHOOKS_QUEUE" --concurrency 4 -n "webhooks-$$@%h" \
      --without-gossip --without-mingle --without-heartbeat >>"$VAR/log/webhooks.log" 2>&1 9>&- &
  started_component $! "Celery webhooks worker" "$VAR/log/webhooks.log"
fi
MANGO_DB_POOL_MAX_SIZE="${MANGO_WORKER_DB_POOL_MAX_SIZE:-4}" \
  setsid "$VENV/bin/celery" -A config beat --loglevel INFO --schedule "$VAR/celerybeat-schedule" \
    >>"$VAR/log/beat.log" 2>&1 9>&- &
started_component $! "Celery beat" "$VAR/log/beat.log"

# Ready is /readyz answering 200 (the database, Redis, the store and a live worker), not the
# port opening: requests before that wait on a worker or the pool.
component_gone() {
  local pid
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { echo "$pid"; return 0; }; done
  return 1
}
ready_deadline=$((SECONDS + ${MANGO_RUN_READY_SECONDS:-180}))
until "$PY" - "$PORT" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=5) as answer:
    sys.exit(0 if answer.status == 200 else 1)
PY
do
  if gone="$(component_gone)"; then
    log="$(component_log "$gone")"
    say "$(component_name "$gone") exited before Mango was ready; the end of ${log#"$ROOT/"}:"
    [ -n "$log" ] && tail -n 20 "$log" >&2
    exit 1
  fi
  [ "$SECONDS" -lt "$ready_deadline" ] || die "not ready after ${MANGO_RUN_READY_SECONDS:-180}s: see /readyz and var/log/ (make logs)"
  sleep 0.25
done
elapsed=$((SECONDS - started))
model_line="Anthropic's API (ANTHROPIC_API_KEY)"
[ -n "${ANTHROPIC_BASE_URL:-}" ] && model_line="$ANTHROPIC_BASE_URL"
cat >&2 <<MSG

  Mango is serving at http://127.0.0.1:$PORT  (ready in ${elapsed}s)

  Get an API key:   .venv/bin/python manage.py create_api_key --workspace default
  Use it:           anthropic.Anthropic(base_url="http://127.0.0.1:$PORT", api_key=KEY)
  Admin:            http://127.0.0.1:$PORT/admin/  (.venv/bin/python manage.py createsuperuser)
  Model upstream:   $model_line
  Logs:             var/log/ (make logs)

  Ctrl-C stops everything started here.
MSG
if [ -n "$upstream_warning" ]; then
  printf '\033[1;33m[mango] warning:\033[0m %s\n\n' "$upstream_warning" >&2
fi
set +e
wait -n -p exited "${pids[@]}"
status=$?
set -e
log="$(component_log "$exited")"
say "$(component_name "$exited") exited (status $status); shutting down${log:+ (the end of ${log#"$ROOT/"} follows)}"
[ -n "$log" ] && tail -n 20 "$log" >&2
true
exit 1
