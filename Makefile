.PHONY: run stop test lint bench sandbox-image base-image image

run:  ## set everything up and serve the API on 127.0.0.1:$PORT (default 8000)
	@bash scripts/run.sh

stop:  ## stop what a `make run` that did not exit cleanly left running (var/run.pids)
	@if [ -f var/run.pids ]; then while read -r pid; do kill -TERM -- "-$$pid" 2>/dev/null || true; done < var/run.pids; rm -f var/run.pids; fi

test:  ## run the whole test suite, starting what it needs
	@bash scripts/test.sh $(ARGS)

lint:
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .

sandbox-image:
	@bash sandbox/build.sh $${MANGO_SANDBOX_IMAGE:-mango-sandbox:latest}

base-image:  ## a python3.11 base image from Debian's packages, when no image registry is reachable
	@bash scripts/base_image.sh

image:  ## the app image mango:latest (PYTHON_IMAGE=mango-base:python3.11-bookworm after make base-image)
	@docker build $${PYTHON_IMAGE:+--build-arg PYTHON_IMAGE=$$PYTHON_IMAGE} -t mango:latest .

bench:  ## benchmarks (need the services `make test` starts); each prints ratios measured side by side
	@.venv/bin/python bench/files_throughput.py
	@.venv/bin/python bench/files_list.py
	@.venv/bin/python bench/outputs_publish.py
	@.venv/bin/python bench/memory_writeback.py
	@.venv/bin/python bench/sessions_sse.py
	@.venv/bin/python bench/crash_campaign.py --points 100
	@.venv/bin/python bench/sandbox_start.py
