#!/bin/sh
# `redis-server [options]`: Debian's build keeps protected mode on, which refuses every other
# container; the registry's image turns it off. Any other command runs as given.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server --protected-mode no --bind 0.0.0.0 --dir /data "$@"
fi
exec "$@"
