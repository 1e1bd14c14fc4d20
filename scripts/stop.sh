#!/usr/bin/env bash
# `make stop`: stop the `make run` that var/run.pids describes, whether its script still runs
# (it is asked to stop, as Ctrl-C would) or was killed and left its components behind.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
PIDS_FILE="$VAR/run.pids"
[ -f "$PIDS_FILE" ] || { say "nothing to stop (no var/run.pids)"; exit 0; }
run="$(describe_run)"
runner="$(run_field pid)"
groups="$(grep -v '^#' "$PIDS_FILE" | xargs)"
if [ -n "$runner" ] && kill -0 "$runner" 2>/dev/null && grep -q "scripts/run.sh" "/proc/$runner/cmdline" 2>/dev/null; then
  say "stopping make run ($run)"
  kill -TERM "$runner"
  # It stops its components itself (up to 20 s, then SIGKILL) and removes var/run.pids.
  for _ in $(seq 1 60); do kill -0 "$runner" 2>/dev/null || break; sleep 0.5; done
fi
alive=""
for pgid in $groups; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
for _ in $(seq 1 40); do
  alive=""
  for pgid in $groups; do kill -0 -- "-$pgid" 2>/dev/null && alive="$alive $pgid"; done
  [ -z "$alive" ] && break
  sleep 0.5
done
for pgid in $alive; do kill -KILL -- "-$pgid" 2>/dev/null || true; done
rm -f "$PIDS_FILE"
say "stopped ($run)"
