"""Prometheus metrics: the instruments every app records into, the scrape-time collectors each
app registers (computed from PostgreSQL and Redis when /metrics is read), and the /metrics view.

Several processes (gunicorn workers, the Celery worker, management commands) share one
directory when PROMETHEUS_MULTIPROC_DIR is set (`make run`, the image): /metrics then sums
what every process recorded (prometheus-client's multiprocess mode). Without it, /metrics shows
this process only.

Names are the vocabulary: apps call e.g. `metrics.FILE_UPLOAD_BYTES.inc(n)`, never define their
own. `core` imports no other app: scrape-time collectors are registered from AppConfig.ready().
"""

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

HTTP_REQUEST_SECONDS = Histogram(
    "mango_http_request_duration_seconds",
    "Time from request to response start, by route pattern, method and status.",
    ["route", "method", "status"],
    buckets=_LATENCY_BUCKETS,
)
FILE_UPLOAD_BYTES = Counter("mango_file_upload_bytes", "Bytes of Files stored through uploads.")
FILE_UPLOAD_BODIES = Counter(
    "mango_file_upload_bodies",
    "Upload request bodies by how they were read: socket (the upload's thread reads the client's socket "
    "under config.asgi), gunicorn_socket, asgi_messages (through the event loop), wsgi_input.",
    ["reader"],
)
FILE_DOWNLOAD_BYTES = Counter("mango_file_download_bytes", "Bytes of File content responses started.")
RECONCILE_ACTIONS = Counter("mango_reconcile_actions", "Storage reconciliation actions taken, by action.", ["action"])
MODEL_CALL_SECONDS = Histogram(
    "mango_model_call_duration_seconds",
    "Upstream model calls (Messages API), by outcome (ok or the error type).",
    ["outcome"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
MODEL_CALL_ERRORS = Counter("mango_model_call_errors", "Failed upstream model calls, by error type.", ["error_type"])
EVENT_STREAMS_OPEN = Gauge(
    "mango_event_streams_open", "Session event streams (SSE) open now.", multiprocess_mode="livesum"
)

# name -> callable yielding Metric families, run at scrape time (reads PostgreSQL / Redis).
_collectors: dict[str, Callable[[], Iterable[Metric]]] = {}


def register_collector(name: str, collect: Callable[[], Iterable[Metric]]) -> None:
    _collectors[name] = collect


def gauge(name: str, documentation: str, *, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class _ScrapeTimeCollector:
    def collect(self):
        for name, collect in _collectors.items():
            started = time.monotonic()
            try:
                yield from collect()
            except Exception:
                # One unreachable dependency must not blank the whole scrape.
                logger.warning("metrics collector failed", extra={"collector": name}, exc_info=True)
                failed = gauge("mango_metrics_collector_up", "1 when the collector answered.", labels=["collector"])
                failed.add_metric([name], 0)
                yield failed
            else:
                up = gauge("mango_metrics_collector_up", "1 when the collector answered.", labels=["collector"])
                up.add_metric([name], 1)
                yield up
            seconds = gauge("mango_metrics_collector_seconds", "Time the collector took.", labels=["collector"])
            seconds.add_metric([name], time.monotonic() - started)
            yield seconds


def exposition() -> bytes:
    """Everything recorded (all processes in multiprocess mode) plus the scrape-time metrics."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        recorded = CollectorRegistry()
        multiprocess.MultiProcessCollector(recorded)
    else:
        recorded = REGISTRY
    scraped = CollectorRegistry()
    scraped.register(_ScrapeTimeCollector())
    return generate_latest(recorded) + _merge_families(generate_latest(scraped))


def _merge_families(text: bytes) -> bytes:
    # The per-collector up/seconds gauges are yielded once per collector: keep one HELP/TYPE.
    seen, lines = set(), []
    for line in text.splitlines():
        if line.startswith((b"# HELP", b"# TYPE")):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
    return b"\n".join(lines) + b"\n"


def metrics_view(request):
    token = settings.MANGO_METRICS_TOKEN
    if token:
        supplied = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), token.encode()):
            return HttpResponse("metrics: bearer token required\n", status=401, content_type="text/plain")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    """Request latency by route pattern (not the raw path: ids would explode the label set)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        if request.path.startswith(settings.STATIC_URL if settings.STATIC_URL.startswith("/") else "/static/"):
            route = "static"
        HTTP_REQUEST_SECONDS.labels(route, request.method, str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response


def celery_collect():
    """Queue depth (the broker's Redis lists), live workers and beat's last heartbeat."""
    import redis

    from core import heartbeats

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        queues = sorted({"celery", settings.MANGO_SESSIONS_QUEUE})
        depths = [client.llen(queue) for queue in queues]
    finally:
        client.close()
    depth = gauge("mango_queue_depth", "Tasks waiting in a Celery queue.", labels=["queue"])
    for queue, n in zip(queues, depths, strict=True):
        depth.add_metric([queue], n)
    yield depth
    workers = gauge("mango_celery_workers_live", "Celery workers whose heartbeat is fresh.")
    workers.add_metric([], len(heartbeats.live_workers()))
    yield workers
    age = heartbeats.beat_age_seconds()
    beat = gauge("mango_celery_beat_heartbeat_age_seconds", "Seconds since beat's last heartbeat (-1: none).")
    beat.add_metric([], -1 if age is None else age)
    yield beat


def timed_model_call(call):
    """Decorator for the one function that calls the model upstream: latency by outcome, and
    errors by type (the exception's `error_type`, else its class name)."""
    import functools

    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        started = time.monotonic()
        try:
            result = call(*args, **kwargs)
        except Exception as exc:
            error_type = getattr(exc, "error_type", None) or type(exc).__name__
            MODEL_CALL_ERRORS.labels(error_type).inc()
            MODEL_CALL_SECONDS.labels(error_type).observe(time.monotonic() - started)
            raise
        MODEL_CALL_SECONDS.labels("ok").observe(time.monotonic() - started)
        return result

    return wrapper
