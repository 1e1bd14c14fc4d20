#!/usr/bin/env bash
# `make base-image`: a Debian bookworm base with python3.11 for the app image, built from Debian's
# packages (debootstrap) and `docker import`, for machines that reach a Debian mirror but no image
# registry. Then: docker build --build-arg PYTHON_IMAGE=mango-base:python3.11-bookworm -t mango .
# When this machine's TLS goes through a proxy with its own CA (PIP_CERT or SSL_CERT_FILE set),
# that CA bundle is copied in so pip in the build can reach the package index.
source "$(dirname "$0")/lib.sh"
set -euo pipefail
TAG="${1:-mango-base:python3.11-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
ROOTFS="$(mktemp -d)"
trap 'rm -rf "$ROOTFS"' EXIT
say "debootstrap bookworm (python3, python3-venv) from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOTFS" "$MIRROR" >/dev/null
CHANGES=()
CA="${PIP_CERT:-${SSL_CERT_FILE:-}}"
if [ -n "$CA" ] && [ -f "$CA" ]; then
  cp "$CA" "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  CHANGES+=(--change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
fi
tar -C "$ROOTFS" -c . | docker import "${CHANGES[@]}" - "$TAG" >/dev/null
say "built $TAG ($(docker run --rm "$TAG" python3 --version))"
