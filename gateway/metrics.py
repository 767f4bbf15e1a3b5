"""Prometheus metrics shared by every dialect, observed once per request by the edge.

With several workers, prometheus-client's multiprocess mode is used (PROMETHEUS_MULTIPROC_DIR is
set by the supervisor before workers start), and the admin listener aggregates all workers.

Labels: ``dialect`` and ``listener`` (from the catalogue), ``route`` (a fixed name per handler),
``model`` (bounded: unknown names share ``_unknown``, and past MAX_MODEL_LABELS ``_other``) and
``outcome`` (``ok`` or an ErrorKind value).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LABELS = ("dialect", "listener", "route", "model")

REQUESTS = Counter("gateway_requests_total", "Requests answered, by outcome (ok or the error kind)",
                   [*LABELS, "outcome"])
LATENCY = Histogram("gateway_request_duration_seconds",
                    "Time from the handler's start to its answer (the whole stream for streamed answers)",
                    LABELS, buckets=LATENCY_BUCKETS)
INFLIGHT = Gauge("gateway_inflight_requests", "Requests in flight (admitted, not yet answered)",
                 multiprocess_mode="livesum")
UPSTREAM_READY = Gauge("gateway_upstream_ready", "1 when Triton reports ready", multiprocess_mode="max")

MAX_MODEL_LABELS = 256  # per process: clients must not be able to grow the label space without bound
_model_labels: set[str] = set()
_children: dict[tuple[str, ...], tuple] = {}


def model_label(model: str, outcome: str) -> str:
    """Model names come from clients: unknown ones share one label, and the set is bounded."""
    if outcome == "not_found":
        return "_unknown"
    if model in _model_labels:
        return model
    if len(_model_labels) >= MAX_MODEL_LABELS:
        return "_other"
    _model_labels.add(model)
    return model


def observe(dialect: str, listener: str, route: str, model: str, outcome: str, seconds: float) -> None:
    """Count and time one answered request (the label children are looked up once, then cached)."""
    key = (dialect, listener, route, model, outcome)
    pair = _children.get(key)
    if pair is None:
        label = model_label(model, outcome)
        pair = _children[key] = (REQUESTS.labels(dialect, listener, route, label, outcome),
                                 LATENCY.labels(dialect, listener, route, label))
        if len(_children) > 16 * MAX_MODEL_LABELS:  # bounded, like the label space it caches
            _children.clear()
    pair[0].inc()
    pair[1].observe(seconds)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all workers in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
