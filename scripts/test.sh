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
  [ $# -eq 0 ] && [ "${MANGO_SANDBOX_RUNTIME:-runc}" = runc ] \
    && docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'
}

set +e
"$VENV/bin/pytest" "$@"
status=$?
if gvisor_pass "$@"; then
  say "the sandbox and isolation tests again, under gVisor (MANGO_SANDBOX_RUNTIME=runsc)"
  MANGO_SANDBOX_RUNTIME=runsc "$VENV/bin/pytest" -p no:cacheprovider "${GVISOR_TESTS[@]}"
  gvisor_status=$?
  [ $status -eq 0 ] && status=$gvisor_status
fi
set -e
exit $status
