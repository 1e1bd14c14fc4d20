#!/usr/bin/env bash
# Build the session sandbox image from deploy/sandbox.Dockerfile (the one recipe) where no image
# registry is reachable: the Dockerfile's busybox stage comes from Debian's static busybox,
# `docker import`ed as a one-file image, instead of the registry's busybox image.
set -euo pipefail
image="${1:-mango-sandbox:latest}"
here="$(cd "$(dirname "$0")/.." && pwd)"
busybox="${BUSYBOX:-/bin/busybox}"
[ -x "$busybox" ] || { echo "busybox-static is required (apt-get install busybox-static)" >&2; exit 1; }
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin"
cp "$busybox" "$root/bin/busybox"
tar -C "$root" -c . | docker import - mango-busybox:static >/dev/null
log="$root/build.log"
docker build -q --build-arg BUSYBOX_IMAGE=mango-busybox:static -t "$image" -f "$here/deploy/sandbox.Dockerfile" \
  "$here/deploy" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
echo "built sandbox image $image" >&2
