#!/usr/bin/env bash
# `make test`: install and start what the tests need, then run the whole suite.
# Extra arguments go to pytest (e.g. `make test ARGS="-k files -x"`).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_venv
check_database_and_redis

# Tests always use the embedded store (bucket $MANGO_TEST_BUCKET, default mango-test; see
# pyproject.toml), never a configured production bucket.
unset MANGO_FILE_S3_ENDPOINT_URL
export MANGO_TEST_BUCKET="${MANGO_TEST_BUCKET:-mango-test}"
export MANGO_FILE_S3_BUCKET="$MANGO_TEST_BUCKET"
export_embedded_s3_env
EMBEDDED_S3_PID=""
start_embedded_s3
cleanup() { [ -n "$EMBEDDED_S3_PID" ] && kill -- "-$EMBEDDED_S3_PID" 2>/dev/null || true; }
trap cleanup EXIT

if ensure_dockerd; then
  # Most tests use the busybox image; the sandbox-image tests and every egress proxy use the real one.
  ensure_sandbox_image "${MANGO_SANDBOX_IMAGE:-mango-sandbox:latest}"
  ensure_sandbox_image mango-sandbox:bookworm
fi

# The sandbox and isolation tests again under gVisor, when the whole suite runs and the dockerd has
# runsc registered (ensure_dockerd registers it whenever it is installed; docs/sandboxes.md#gvisor).
GVISOR_TESTS=(tests/sessions/test_isolation.py tests/sessions/test_sandbox.py tests/sessions/test_sandbox_image.py)
gvisor_pass() {
  [ -n "$side_pid" ] && [ "${MANGO_SANDBOX_RUNTIME:-runc}" = runc ] \
    && docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'
}

# Tests that mostly wait on the clock (a cron minute's turn, three times) run beside the rest when
# the whole suite runs, in a pytest of their own with their own test database, Redis database and
# bucket, so that their minutes overlap the rest instead of adding to it.
SIDE_TESTS=(tests/deployments/test_fleet.py)
side_pid=""
if [ $# -eq 0 ]; then
  mkdir -p "$VAR/log"
  say "beside the suite: ${SIDE_TESTS[*]} (var/log/test-side.log)"
  base_db="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mango}"
  base_redis="${REDIS_URL:-redis://127.0.0.1:6379/14}"  # pyproject.toml's default
  side_redis="${base_redis%/}/1"
  [[ "$base_redis" =~ ^(.*)/([0-9]+)$ ]] && side_redis="${BASH_REMATCH[1]}/$((BASH_REMATCH[2] + 1))"
  DATABASE_URL="${base_db%%\?*}_side" REDIS_URL="$side_redis" \
    MANGO_TEST_BUCKET="$MANGO_TEST_BUCKET-side" MANGO_FILE_S3_BUCKET="$MANGO_TEST_BUCKET-side" \
    "$VENV/bin/pytest" -p no:cacheprovider "${SIDE_TESTS[@]}" >"$VAR/log/test-side.log" 2>&1 &
  side_pid=$!
  set -- "${SIDE_TESTS[@]/#/--ignore=}"
fi

set +e
"$VENV/bin/pytest" "$@"
status=$?
if [ -n "$side_pid" ]; then
  wait "$side_pid"
  side_status=$?
  say "the tests run beside the suite (${SIDE_TESTS[*]}):"
  tail -n 30 "$VAR/log/test-side.log"
  [ $status -eq 0 ] && status=$side_status
fi
if gvisor_pass "$@"; then
  say "the sandbox and isolation tests again, under gVisor (MANGO_SANDBOX_RUNTIME=runsc)"
  MANGO_SANDBOX_RUNTIME=runsc "$VENV/bin/pytest" -p no:cacheprovider "${GVISOR_TESTS[@]}"
  gvisor_status=$?
  [ $status -eq 0 ] && status=$gvisor_status
fi
set -e
exit $status
