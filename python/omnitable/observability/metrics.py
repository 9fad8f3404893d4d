"""Prometheus metrics, off by default (docs/observability.md, "Metrics").

The process keeps a few counters and gauges in memory (updating them costs a lock and a dict
lookup); nothing listens and nothing is sent unless asked: :func:`serve` exposes them in the
Prometheus text format (0.0.4) on an HTTP endpoint, :func:`push` sends them once to a
Pushgateway (HTTP PUT). The text format is written here: no client library is needed.

Metrics (``kind`` is the run kind: ``ingest``, ``backfill``, ``upsert``, ...):

- ``omnitable_runs_started_total{kind}``, ``omnitable_runs_succeeded_total{kind}``,
  ``omnitable_runs_failed_total{kind,status}`` (``status``: ``failed`` or ``aborted``);
- ``omnitable_runs_running{kind}`` (gauge);
- ``omnitable_backfill_rows_total``, ``omnitable_backfill_fragments_total``,
  ``omnitable_backfill_seconds_total`` (rows and fragments computed and committed, time spent
  in backfill steps).
"""

from __future__ import annotations

import threading
import urllib.parse
import urllib.request
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from omnitable.exceptions import ValidationError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]


class _Metric:
    """A named family of samples, one per label set."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Iterable[str] = ()) -> None:
        self.name, self.help, self.labels = name, help_text, tuple(labels)
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> Labels:
        if set(labels) != set(self.labels):
            raise ValidationError(
                f"Cannot update metric {self.name}: give labels {list(self.labels)}, "
                f"got {sorted(labels)}"
            )
        return tuple((k, str(labels[k])) for k in self.labels)

    def _add(self, amount: float, labels: dict[str, str]) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        """The current value for ``labels`` (0 when never updated)."""
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.labels:
            items = [((), 0.0)]
        for key, v in items:
            lines.append(f"{self.name}{_label_text(key)} {_number(v)}")
        return lines


class Counter(_Metric):
    """A value that only goes up."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValidationError(f"Cannot decrease counter {self.name}")
        self._add(amount, labels)


class Gauge(_Metric):
    """A value that goes up and down."""

    kind = "gauge"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._add(amount, labels)

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self._add(-amount, labels)


RUNS_STARTED = Counter("omnitable_runs_started_total", "Runs started, by kind.", ["kind"])
RUNS_SUCCEEDED = Counter("omnitable_runs_succeeded_total", "Runs succeeded, by kind.", ["kind"])
RUNS_FAILED = Counter(
    "omnitable_runs_failed_total", "Runs failed or aborted, by kind and status.", ["kind", "status"]
)
RUNS_RUNNING = Gauge("omnitable_runs_running", "Runs executing in this process.", ["kind"])
BACKFILL_ROWS = Counter("omnitable_backfill_rows_total", "Rows computed and committed by backfill.")
BACKFILL_FRAGMENTS = Counter(
    "omnitable_backfill_fragments_total", "Fragments computed and committed by backfill."
)
BACKFILL_SECONDS = Counter("omnitable_backfill_seconds_total", "Seconds spent in backfill steps.")
REGISTRY: tuple[_Metric, ...] = (
    RUNS_STARTED,
    RUNS_SUCCEEDED,
    RUNS_FAILED,
    RUNS_RUNNING,
    BACKFILL_ROWS,
    BACKFILL_FRAGMENTS,
    BACKFILL_SECONDS,
)


def render() -> str:
    """Every metric in the Prometheus text exposition format."""
    return "\n".join(line for m in REGISTRY for line in m.render()) + "\n"


def run_started(kind: str) -> None:
    RUNS_STARTED.inc(kind=kind)
    RUNS_RUNNING.inc(kind=kind)


def run_finished(kind: str, status: str) -> None:
    RUNS_RUNNING.dec(kind=kind)
    if status == "succeeded":
        RUNS_SUCCEEDED.inc(kind=kind)
    else:
        RUNS_FAILED.inc(kind=kind, status=status)


class MetricsServer:
    """A running metrics endpoint: ``GET /metrics`` (and ``/``) answer :func:`render`."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.host, self.port = str(server.server_address[0]), int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, name="omnitable-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop listening (idempotent)."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.split("?")[0] not in ("/", "/metrics"):
            self.send_error(404, "only /metrics is served")
            return
        body = render().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
    """Expose the metrics on ``http://host:port/metrics`` from a daemon thread (``port=0``: a
    free port, see ``.port``). Loopback by default: pass ``host="0.0.0.0"`` to let a Prometheus
    server on another machine scrape it. Call ``.close()`` to stop.

    Raises:
        ValidationError: ``port`` is not an int in 0..65535. OSError: the port is taken.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValidationError(
            f"Cannot serve metrics: port must be an int in 0..65535, got {port!r}"
        )
    return MetricsServer(ThreadingHTTPServer((host, port), _Handler))


def push(gateway: str, job: str = "omnitable", timeout_s: float = 10.0) -> None:
    """Send the metrics once to a Prometheus Pushgateway at ``gateway`` (``http://host:9091``):
    an HTTP PUT to ``{gateway}/metrics/job/{job}``, replacing that job's group.

    Raises:
        ValidationError: ``gateway`` is not an http(s) URL or ``job`` is empty. OSError: the
        gateway cannot be reached or answered an error.
    """
    parsed = urllib.parse.urlparse(gateway)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValidationError(
            f"Cannot push metrics: gateway must be an http(s) URL, got {gateway!r}"
        )
    if not job or not isinstance(job, str):
        raise ValidationError("Cannot push metrics: give a non-empty job name")
    url = f"{gateway.rstrip('/')}/metrics/job/{urllib.parse.quote(job, safe='')}"
    request = urllib.request.Request(
        url, data=render().encode(), method="PUT", headers={"Content-Type": CONTENT_TYPE}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_text(key: Labels) -> str:
    if not key:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in key) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))
