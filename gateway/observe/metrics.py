"""Prometheus metrics shared by every dialect: the edge observes each request once, the upstream
client each Triton call, the generation service each LLM answer (docs/operations.md has the table).

With several workers, prometheus-client's multiprocess mode is used (PROMETHEUS_MULTIPROC_DIR is
set by the supervisor before workers start), and the admin listener aggregates all workers.

Labels: ``dialect`` and ``listener`` (from the catalogue), ``route`` (a fixed name per handler),
``model`` (bounded: unknown names share ``_unknown``, and past MAX_MODEL_LABELS ``_other``),
``outcome`` (``ok`` or an ErrorKind value) and ``status`` (the HTTP status, or the gRPC code name).
Every label value comes from a bounded set, so the series are bounded too.

The hot path: each distinct label combination's children are looked up once and cached, so a
request costs a dict lookup, two counter increments, one histogram observation and, when the
request carried bytes, one increment per direction.

LLM metrics follow OpenTelemetry's GenAI semantic conventions (``gen_ai.server.*``,
``gen_ai.client.token.usage``) with Prometheus naming: dots become underscores, the unit is a
suffix (``_seconds``), and ``{token}`` units are dropped.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import platform
import weakref
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

import gateway
from gateway.observe import fastpaths


class _Flush:
    """Registered before every metric, so that reading the registry (a scrape, a test) first writes
    the observations still queued (see ``observe``)."""

    def describe(self):
        return []

    def collect(self):
        flush()
        return []


REGISTRY.register(_Flush())

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LABELS = ("dialect", "listener", "route", "model")

REQUESTS = Counter("gateway_requests_total",
                   "Requests answered, by outcome (ok or the error kind) and status (HTTP status or gRPC code)",
                   [*LABELS, "outcome", "status"])
LATENCY = Histogram("gateway_request_duration_seconds",
                    "Time from the handler's start to its answer (the whole stream for streamed answers)",
                    [*LABELS, "outcome"], buckets=LATENCY_BUCKETS)
REQUEST_BYTES = Counter("gateway_request_bytes_total",
                        "Bytes received: HTTP request bodies, gRPC request messages", LABELS)
RESPONSE_BYTES = Counter("gateway_response_bytes_total",
                         "Bytes answered: HTTP response bodies (not those a handler streams itself), gRPC messages",
                         LABELS)
INFLIGHT = Gauge("gateway_inflight_requests", "Requests in flight (admitted, not yet answered)",
                 multiprocess_mode="livesum")
UPSTREAM_READY = Gauge("gateway_upstream_ready", "1 when Triton reports ready", multiprocess_mode="max")
UPSTREAM_LATENCY = Histogram("gateway_upstream_request_duration_seconds",
                             "Time of each call to Triton (a stream: until its last response), by KServe V2 "
                             "method, model and gRPC code", ["method", "model", "code"], buckets=LATENCY_BUCKETS)
UPSTREAM_SHM_BYTES = Counter("gateway_upstream_shared_memory_bytes",
                             "Bytes of input tensors handed to Triton through shared memory instead of gRPC "
                             "(upstream.shared_memory)")
FAST_PATH = Gauge("gateway_fast_path", "1 when a fast path is on in this worker, 0 when off "
                  "(a library piece missing, or turned off in the settings)", ["path"], multiprocess_mode="min")
H2_REFUSED = Counter("gateway_h2_refused_total",
                     "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM and streams refused, by reason "
                     "(a flood, a limit: gateway/h2/wire.py)", ["reason"])
BUILD_INFO = Gauge("gateway_build_info", "Always 1; the labels say which gateway build is running",
                   ["version", "commit", "python"], multiprocess_mode="max")

# cutting over from a legacy server (gateway/cutover): each compared (or dropped, skipped) request
MIGRATION = Counter("gateway_migration_total",
                    "Requests on a legacy route by outcome: match, mismatch, legacy_error, triton_error, dropped "
                    "(the shadow did not fit), skipped (not comparable: a sampled LLM request, a stream past 4096 "
                    "messages)",
                    ["dialect", "model", "route", "outcome"])
MIGRATION_FORMAT = Counter("gateway_migration_format_total",
                           "Compared answers whose values agree but whose bytes differ: field_order (JSON field "
                           "order), spelling (JSON float spelling) or layout (protobuf: a layout a client sees, "
                           "not a map's order)", ["dialect", "model", "kind"])
MIGRATION_ERROR = Gauge("gateway_migration_max_error",
                        "The largest error seen per output between legacy and Triton answers (kind: abs or rel)",
                        ["dialect", "model", "output", "kind"], multiprocess_mode="max")
LEGACY_UP = Gauge("gateway_legacy_up", "1 when the dialect's legacy server answered its last probe",
                  ["dialect", "transport"], multiprocess_mode="max")

# OpenTelemetry GenAI server metrics (buckets: the conventions' advice)
_GENAI = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")
GENAI_PROVIDER = "triton"
GENAI_DURATION = Histogram(
    "gen_ai_server_request_duration_seconds", "Generation time, request to last output token (successful)",
    _GENAI, buckets=(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
GENAI_TTFT = Histogram(
    "gen_ai_server_time_to_first_token_seconds", "Time to generate the first token (successful responses)",
    _GENAI, buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0))
GENAI_TPOT = Histogram(
    "gen_ai_server_time_per_output_token_seconds", "Time per output token after the first (successful responses)",
    _GENAI, buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5))
GENAI_TOKENS = Histogram(
    "gen_ai_client_token_usage", "Tokens per generation, by type (input: the prompt, output: generated)",
    [*_GENAI, "gen_ai_token_type"],
    buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304))

MAX_MODEL_LABELS = 256  # per process: clients must not be able to grow the label space without bound
_model_labels: set[str] = set()
_children: dict[tuple, tuple] = {}
_upstream_children: dict[tuple, object] = {}
_genai_children: dict[tuple, tuple] = {}


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


def _bounded(cache: dict) -> None:
    if len(cache) > 16 * MAX_MODEL_LABELS:  # bounded, like the label space it caches
        cache.clear()


def _inc(counter: Counter):
    """A counter child's increment: its value's own ``inc`` (prometheus-client 0.26, pinned), which skips
    ``Counter.inc``'s per-call checks (observability, sign, exemplar) that cannot fail here; a test
    checks the counts (tests/unit/test_metrics.py)."""
    value = getattr(counter, "_value", None)
    return value.inc if value is not None and hasattr(value, "inc") else counter.inc


# -- the request path's observations, queued and written together -----------------------------------
# A request's five series (count, latency, bytes in and out, Triton's latency) are queued as one
# tuple and written at most FLUSH_S later, grouped by labels: one increment per label set and one
# histogram update per batch instead of a lock and a method call per series per request (as the
# access lines are, gateway/observe/logs.py). Reading the registry (a scrape, ``exposition``) writes
# them first; in multiprocess mode another worker's scrape sees them at most FLUSH_S late.
FLUSH_S = 0.1
FLUSH_BATCH = 1024
_pending: list[tuple] = []  # (labels, seconds, bytes in, bytes out)
_pending_upstream: list[tuple] = []  # (labels, seconds)
_scheduled = [False]
_admissions: weakref.WeakSet = weakref.WeakSet()  # objects with ``inflight`` (gateway.call.Admission)


def track_inflight(admission) -> None:
    """``gateway_inflight_requests`` is the sum of these objects' ``inflight``, set when queued
    observations are written (and on every scrape)."""
    _admissions.add(admission)
    _schedule()


def changed() -> None:
    """Something the queued write reads changed (the in-flight count): write within FLUSH_S."""
    if not _scheduled[0]:
        _schedule()


def _schedule() -> None:
    if _scheduled[0]:
        return
    try:
        asyncio.get_running_loop().call_later(FLUSH_S, flush)
    except RuntimeError:  # no loop (a script, a test): write at once
        flush()
        return
    _scheduled[0] = True


def observe(dialect: str, listener: str, route: str, model: str, outcome: str, seconds: float,
            status: int | str = "", bytes_in: int = 0, bytes_out: int = 0) -> None:
    """Count, time and size one answered request (queued: see above)."""
    _pending.append(((dialect, listener, route, model, outcome, status), seconds, bytes_in, bytes_out))
    if len(_pending) >= FLUSH_BATCH:
        flush()
    elif not _scheduled[0]:
        _schedule()


def observe_upstream(method: str, model: str, code: str, seconds: float) -> None:
    """Time one call to Triton (``code``: the gRPC status code name, ``OK`` when it succeeded)."""
    _pending_upstream.append(((method, model, code), seconds))
    if not _scheduled[0]:
        _schedule()


def flush() -> None:
    """Write the queued observations, grouped by labels; set the in-flight gauge."""
    global _pending, _pending_upstream
    _scheduled[0] = False
    batch, _pending = _pending, []
    ups, _pending_upstream = _pending_upstream, []
    INFLIGHT.set(sum(a.inflight for a in list(_admissions)))
    grouped: dict[tuple, list] = {}
    for key, seconds, bytes_in, bytes_out in batch:
        g = grouped.get(key)
        if g is None:
            g = grouped[key] = [0, 0, 0, []]
        g[0] += 1
        g[1] += bytes_in
        g[2] += bytes_out
        g[3].append(seconds)
    for key, (n, bytes_in, bytes_out, times) in grouped.items():
        kids = _request_children(key)
        kids[0](n)
        observe_all(kids[1], times)
        if bytes_in:
            kids[2](bytes_in)
        if bytes_out:
            kids[3](bytes_out)
    times_by: dict[tuple, list] = {}
    for key, seconds in ups:
        times_by.setdefault(key, []).append(seconds)
    for key, times in times_by.items():
        observe_all(_upstream_child(key), times)


def _request_children(key: tuple) -> tuple:
    """A request label set's children (looked up once, then cached)."""
    kids = _children.get(key)
    if kids is None:
        _bounded(_children)
        dialect, listener, route, model, outcome, status = key
        label = model_label(model, outcome)
        kids = _children[key] = (_inc(REQUESTS.labels(dialect, listener, route, label, outcome, status)),
                                 LATENCY.labels(dialect, listener, route, label, outcome),
                                 _inc(REQUEST_BYTES.labels(dialect, listener, route, label)),
                                 _inc(RESPONSE_BYTES.labels(dialect, listener, route, label)))
    return kids


def _upstream_child(key: tuple):
    child = _upstream_children.get(key)
    if child is None:
        _bounded(_upstream_children)
        method, model, code = key
        label = model_label(model, "not_found" if code == "NOT_FOUND" else "ok") if model else ""
        child = _upstream_children[key] = UPSTREAM_LATENCY.labels(method, label, code)
    return child


def _batch_observe_missing() -> list[str]:
    """prometheus-client's histogram child fields ``observe_all`` writes (0.26, pinned)."""
    child = Histogram("gateway_fence_probe", "probe", registry=None, buckets=(1.0,))
    return [f"Histogram.{n}" for n in ("_upper_bounds", "_buckets", "_sum") if not hasattr(child, n)]


BATCH_OBSERVE = fastpaths.declare("metrics_batch_observe", _batch_observe_missing())


def observe_all(child, values: list[float]) -> None:
    """``child.observe(v)`` for every value, as one update of each bucket and of the sum: the
    histogram child's own values (prometheus-client 0.26, pinned; its ``observe`` adds 1 to the
    first bucket whose bound is >= the value, and the value to the sum). tests/unit/test_metrics.py
    compares it with ``observe``."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    if not BATCH_OBSERVE or bounds is None or buckets is None or len(bounds) != len(buckets):
        for v in values:
            child.observe(v)
        return
    counts = [0] * len(bounds)
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1
    child._sum.inc(sum(values))
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


def observe_generation(operation: str, model: str, seconds: float, ttft_s: float, input_tokens: int,
                       output_tokens: int) -> None:
    """One successful generation, in OpenTelemetry GenAI terms (``operation``: chat or text_completion)."""
    key = (operation, model)
    kids = _genai_children.get(key)
    if kids is None:
        _bounded(_genai_children)
        labels = (operation, GENAI_PROVIDER, model_label(model, "ok"))
        kids = _genai_children[key] = (GENAI_DURATION.labels(*labels), GENAI_TTFT.labels(*labels),
                                       GENAI_TPOT.labels(*labels), GENAI_TOKENS.labels(*labels, "input"),
                                       GENAI_TOKENS.labels(*labels, "output"))
    kids[0].observe(seconds)
    if output_tokens:
        kids[1].observe(ttft_s)
    if output_tokens > 1:
        kids[2].observe((seconds - ttft_s) / (output_tokens - 1))
    kids[3].observe(input_tokens)
    kids[4].observe(output_tokens)


_migration_max: dict[tuple, float] = {}


def observe_migration(dialect: str, model: str, route: str, outcome: str, errors=(), fmt: str = "") -> None:
    """One request on a legacy route: its outcome; ``errors``: (output, max abs, max rel) of each
    output compared (the gauges keep the largest seen); ``fmt``: a format-only difference."""
    label = model_label(model, "ok")
    MIGRATION.labels(dialect, label, route, outcome).inc()
    if fmt:
        MIGRATION_FORMAT.labels(dialect, label, fmt).inc()
    for output, abs_err, rel_err in errors:
        for kind, value in (("abs", abs_err), ("rel", rel_err)):
            key = (dialect, label, output[:128], kind)
            if value > _migration_max.get(key, -1.0) and (key in _migration_max or len(_migration_max) < 4096):
                _migration_max[key] = value
                MIGRATION_ERROR.labels(*key).set(value)


def _commit() -> str:
    """The source commit: GATEWAY_COMMIT (set at image build time), else the checkout's git HEAD."""
    given = os.environ.get("GATEWAY_COMMIT", "")
    if given:
        return given[:40]
    git = Path(gateway.__file__).resolve().parent.parent / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = Path(git.read_text().partition("gitdir:")[2].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        common = git / "commondir"
        roots = [git, (git / common.read_text().strip()).resolve()] if common.is_file() else [git]
        for root in roots:
            if (root / ref).is_file():
                return (root / ref).read_text().strip()[:12]
            packed = root / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line[:12]
    except OSError:
        pass
    return ""


BUILD_INFO.labels(gateway.__version__, _commit(), platform.python_version()).set(1)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all workers in multiprocess mode)."""
    flush()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
