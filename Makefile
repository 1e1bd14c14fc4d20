# `make` alone prints the targets (make help); `make run` serves, `make test` tests.
.DEFAULT_GOAL := help
.PHONY: help run stop logs test lint scripted-model bench sandbox-image base-image image compose-images

help:  ## list the targets (this)
	@echo "Mango: a self-hosted Files API and Managed Agents server (README.md)."
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run:  ## set everything up and serve the API on 127.0.0.1:$PORT (default 8000); Ctrl-C stops it
	@bash scripts/run.sh

stop:  ## stop the `make run` of this checkout (the one var/run.pids describes)
	@bash scripts/stop.sh

logs:  ## follow the logs of the `make run` of this checkout (var/log/: API, workers, beat, store, dockerd)
	@tail -n 50 -F var/log/api.log var/log/worker-*.log var/log/beat.log var/log/seaweedfs.log 2>/dev/null

test:  ## run the whole test suite, starting what it needs (ARGS="tests/files -x" for a part)
	@bash scripts/test.sh $(ARGS)

lint:  ## ruff check and format check
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .

scripted-model:  ## the offline model on 127.0.0.1:$SCRIPTED_MODEL_PORT (8099): `bash: <command>` lines run as tool uses
	@bash scripts/scripted_model.sh

BENCHES = files_throughput.py files_list.py outputs_publish.py memory_writeback.py sessions_sse.py tenancy.py sessions_turns.py \
  "crash_campaign.py --points 100" sandbox_start.py sandbox_sleep.py webhooks_delivery.py webhooks_sessions.py
bench:  ## the benchmarks (docs/benchmarks.md; need the services `make test` starts), ratios side by side
	@for bench in $(BENCHES); do .venv/bin/python bench/$$bench || exit 1; done

sandbox-image:  ## the session sandbox images from Debian's packages (mango-sandbox:bookworm) and a static busybox (:latest)
	@bash scripts/sandbox_image.sh mango-sandbox:bookworm && bash scripts/sandbox_busybox_image.sh mango-sandbox:latest

base-image:  ## a python3.11 base image from Debian's packages, when no image registry is reachable
	@bash scripts/base_image.sh

image:  ## the app image mango:latest (PYTHON_IMAGE=mango-base:python3.11-bookworm after make base-image)
	@docker build $${PYTHON_IMAGE:+--build-arg PYTHON_IMAGE=$$PYTHON_IMAGE} -t mango:latest .

compose-images:  ## every image the compose stack needs, built from Debian's packages (no registry)
	@bash scripts/compose_images.sh
