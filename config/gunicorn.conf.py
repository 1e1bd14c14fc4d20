"""gunicorn settings shared by `make run` and the image (`gunicorn -c config/gunicorn.conf.py`).
Command-line flags override these. Values from the environment are documented in docs/configuration.md."""

import os

from core.logging import json_logging_config

# uvicorn workers running config.asgi (docs/operating.md "Serving"): event streams on the event loop, the rest
# of the API on two thread pools per worker (MANGO_API_THREADS, MANGO_UPLOAD_THREADS).
worker_class = "config.uvicorn.MangoUvicornWorker"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))

# JSON lines for gunicorn's own logs and access lines (with the response's request-id).
logconfig_dict = json_logging_config(os.environ.get("MANGO_LOG_LEVEL", "INFO"))
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(B)s %(D)sus %({request-id}o)s'

# A worker that stops answering its arbiter for this long is replaced (uvicorn workers heartbeat
# from their event loop, so long streams and uploads do not trip it).
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "120"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Worker recycling after this many requests is off by default: an event-loop worker holds its event
# streams for hours, and recycling ends every one of them (cleanly: config/uvicorn.py ends them as
# complete responses, and clients resume from the events list, but each recycle still makes all of
# them reconnect). Set it to bound a slow memory growth; jitter keeps workers from restarting together.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "0"))
max_requests_jitter = int(os.environ.get("GUNICORN_MAX_REQUESTS_JITTER", "200"))
# Worker heartbeat files in memory, not on a container's overlay filesystem.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"
control_socket_disable = True


def child_exit(server, worker):
    # Prometheus multiprocess mode: drop the live gauges of a worker that exited.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
