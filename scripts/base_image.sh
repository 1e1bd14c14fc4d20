#!/usr/bin/env bash
# `make base-image`: a Debian bookworm base with python3.11 for the app image, built from Debian's
# packages (the shared debootstrap root, then apt-get), for machines that reach a Debian mirror
# but no image registry. Then: docker build --build-arg PYTHON_IMAGE=mango-base:python3.11-bookworm -t mango .
source "$(dirname "$0")/lib.sh"
TAG="${1:-mango-base:python3.11-bookworm}"
ensure_debian_image
docker_build --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" -t "$TAG" -f "$ROOT/deploy/images/python.Dockerfile" \
  "$ROOT/deploy/images" || die "building $TAG failed"
say "built $TAG ($(docker run --rm "$TAG" python3 --version))"
