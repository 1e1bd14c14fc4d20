#!/usr/bin/env bash
# `make scripted-model`: the offline stand-in for the model upstream (tests/scripted_model.py
# `offline`), on 127.0.0.1:$SCRIPTED_MODEL_PORT (8099). Works on a fresh clone: it makes .venv first.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
ensure_venv
exec "$PY" -m tests.scripted_model --port "${SCRIPTED_MODEL_PORT:-8099}"
