#!/usr/bin/env bash
# The default session sandbox image (deploy/sandbox-debian.Dockerfile) from Debian's packages, for
# machines that reach a Debian mirror but no image registry: the shared debootstrap root, then
# apt-get. Built once and reused while it exists (`docker rmi` it to rebuild).
source "$(dirname "$0")/lib.sh"
TAG="${1:-${MANGO_SANDBOX_IMAGE:-mango-sandbox:bookworm}}"
RECIPE="$(sha256sum "$ROOT/deploy/sandbox-debian.Dockerfile" | cut -c1-16)"
# Reused while it was built from this recipe (its label says which); a changed recipe rebuilds.
if [ "$(docker image inspect -f '{{index .Config.Labels "mango.recipe"}}' "$TAG" 2>/dev/null)" = "$RECIPE" ]; then exit 0; fi
started=$SECONDS
say "building the sandbox image $TAG from Debian's packages (first time only: a few minutes)"
ensure_debian_image
say "installing python3, pip, git, curl, nodejs, npm, ripgrep, jq, procps and gcc into $TAG"
docker_build --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" --label "mango.recipe=$RECIPE" -t "$TAG" -f "$ROOT/deploy/sandbox-debian.Dockerfile" \
  "$ROOT/deploy" || die "building $TAG failed"
size=$(docker image inspect -f '{{.Size}}' "$TAG")
say "built $TAG: $((size / 1024 / 1024)) MiB in $((SECONDS - started)) s"
