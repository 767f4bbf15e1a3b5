"""docs/openapi/*.yaml fuzzed against a live gateway with schemathesis (issue 13, item 6).

Each operation of each dialect's description gets ``examples`` generated requests in both of
schemathesis's modes: positive (valid per the description) and negative (violating it). A request
may be answered with any status, except a 5xx that the gateway produced by itself: after any 5xx
the admin listener's ``gateway_requests_total{outcome="internal"}`` must still be 0 (5xx for an
upstream failure, 503 unavailable or 504 deadline are answers, not bugs). A request that gets no
answer within ``timeout`` (hang) or loses its connection (crash) is a failure as well.

Used by tests/contract/test_openapi_fuzz.py (a few examples) and ``make soak`` (many).
"""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "docs" / "openapi"
# dialect description -> the listener it is served on
LISTENER = {"tfserving": "tfserving_rest", "grps": "grps_http", "mindie": "mindie_http", "admin": "admin_http",
            "v2": "v2_http"}
# operations left out: /offline takes GRPS readiness away (its 503 is the documented answer, not a bug)
EXCLUDE = {"grps": ["/grps/v1/health/offline"]}
# a served model, so that bodies reach the parsers behind the model lookup too (one more pass per mode)
KNOWN_MODEL = {"tfserving": "saved_model_half_plus_three", "mindie": "tiny_llm", "v2": "saved_model_half_plus_three"}
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_INTERNAL = re.compile(r'^gateway_requests_total\{[^}]*outcome="internal"[^}]*\} ([0-9.e+]+)$', re.M)


def internal_errors(admin_url: str) -> float:
    """Requests the gateway answered INTERNAL (a bug of its own), from its Prometheus metrics."""
    with _OPENER.open(admin_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(v) for v in _INTERNAL.findall(text))


@dataclass
class Report:
    sent: Counter = field(default_factory=Counter)  # operation label -> requests
    statuses: Counter = field(default_factory=Counter)  # HTTP status -> count
    failures: list[str] = field(default_factory=list)  # reproducers (curl)
    server_errors: list[str] = field(default_factory=list)  # 5xx that were not the gateway's own (first few)

    @property
    def total(self) -> int:
        return sum(self.sent.values())


def fuzz(dialect: str, base_url: str, admin_url: str, examples: int, *, timeout: float = 30,
         derandomize: bool = True, report: Report | None = None, stop=lambda: False) -> Report:
    """Every operation of docs/openapi/<dialect>.yaml, ``examples`` requests per mode (until ``stop()``)."""
    report = report if report is not None else Report()
    schema = schemathesis.openapi.from_path(SPECS / f"{dialect}.yaml")
    for path in EXCLUDE.get(dialect, []):
        schema = schema.exclude(path=path)
    for result in schema.get_all_operations():
        op = result.ok()
        fixed = [None]
        if dialect in KNOWN_MODEL and any(p.name == "model" for p in op.path_parameters):
            fixed.append({"model": KNOWN_MODEL[dialect]})
        for mode in schemathesis.GenerationMode:
            for path_parameters in fixed:
                strategy = op.as_strategy(generation_mode=mode, path_parameters=path_parameters)
                if stop():
                    return report
                _fuzz_operation(op, strategy, base_url, admin_url, examples, timeout, derandomize, report, stop)
    return report


def _fuzz_operation(op, strategy, base_url, admin_url, examples, timeout, derandomize, report: Report,
                    stop=lambda: False) -> None:
    @settings(max_examples=examples, derandomize=derandomize, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
              verbosity=Verbosity.quiet)
    @given(strategy)
    def one(case):
        if stop():
            return
        try:
            resp = case.call(base_url=base_url, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - no answer at all: hang or dropped connection
            _fail(report, f"{op.label}: no answer ({type(e).__name__}: {str(e)[:200]})", case, base_url)
            return
        report.sent[op.label] += 1
        report.statuses[resp.status_code] += 1
        if resp.status_code >= 500:
            if internal_errors(admin_url) > 0:
                _fail(report, f"{op.label}: {resp.status_code} INTERNAL: {resp.text[:300]!r}", case, base_url)
            elif len(report.server_errors) < 20:
                report.server_errors.append(f"{op.label}: {resp.status_code} {resp.text[:200]!r}")

    try:
        one()
    except Exception as e:  # noqa: BLE001 - hypothesis could not generate for this operation
        if not isinstance(e, AssertionError):
            report.statuses[f"unsatisfiable ({type(e).__name__})"] += 1
            return
        raise


def _fail(report: Report, what: str, case, base_url: str) -> None:
    try:
        curl = case.as_curl_command()
    except Exception:  # noqa: BLE001 - the reproducer is a convenience
        curl = repr(case)
    report.failures.append(f"{what}\n    (against {base_url}) {curl}")
