#!/usr/bin/env bash
# A dockerd of its own with gVisor's runsc registered, beside the machine's dockerd (which it
# leaves alone): for running the isolation and sandbox tests under gVisor (docs/sandboxes.md).
#
#   bash scripts/runsc_dockerd.sh start NAME   # prints the DOCKER_HOST to use
#   bash scripts/runsc_dockerd.sh stop NAME
#
# Its own --data-root (/var/tmp/mango-NAME-runsc, kept: the images load once), exec root and pid
# file (/run/mango-NAME-runsc), socket (/var/run/mango-NAME-runsc.sock), containerd namespaces and
# bridge. It does not touch iptables (--iptables=false): a second daemon that did would remove the
# first one's chains. The sandbox images are copied from the machine's dockerd.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

action="${1:?start|stop}"
name="${2:?a name, e.g. the environment name}"
data="/var/tmp/mango-$name-runsc"
run="/run/mango-$name-runsc"
sock="/var/run/mango-$name-runsc.sock"
bridge="mgr-${name:0:11}"
subnet="${MANGO_RUNSC_BRIDGE_CIDR:-10.252.0.1/24}"
host="unix://$sock"

stop() {
  if [ -f "$run/dockerd.pid" ] && kill -0 "$(cat "$run/dockerd.pid")" 2>/dev/null; then
    local pid; pid="$(cat "$run/dockerd.pid")"
    DOCKER_HOST="$host" docker rm -f $(DOCKER_HOST="$host" docker ps -aq) >/dev/null 2>&1 || true
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  ip link del "$bridge" 2>/dev/null || true
}

case "$action" in
  stop) stop ;;
  start)
    command -v runsc >/dev/null || die "runsc is not installed (apt-get install runsc)"
    if DOCKER_HOST="$host" docker info >/dev/null 2>&1; then echo "$host"; exit 0; fi
    mkdir -p "$data" "$run"
    ip link del "$bridge" 2>/dev/null || true
    ip link add name "$bridge" type bridge
    ip addr add "$subnet" dev "$bridge"
    ip link set "$bridge" up
    runsc_daemon_config "$data/daemon.json" /nonexistent
    setsid dockerd --config-file="$data/daemon.json" --data-root="$data/data" --exec-root="$run/exec" \
      --pidfile="$run/dockerd.pid" --host="$host" --bridge="$bridge" \
      --containerd-namespace="mango-$name-runsc" --containerd-plugins-namespace="mango-$name-runsc-plugins" \
      --iptables=false --ip-masq=false >"$data/dockerd.log" 2>&1 </dev/null 9>&- &
    for _ in $(seq 1 60); do DOCKER_HOST="$host" docker info >/dev/null 2>&1 && break; sleep 0.5; done
    DOCKER_HOST="$host" docker info >/dev/null 2>&1 || die "dockerd did not start; see $data/dockerd.log"
    for image in mango-sandbox:bookworm mango-sandbox:latest mango-busybox:static; do
      want="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" || continue
      have="$(DOCKER_HOST="$host" docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
      [ "$want" = "$have" ] || docker save "$image" | DOCKER_HOST="$host" docker load -q >&2
    done
    echo "$host"
    ;;
  *) die "start|stop" ;;
esac
