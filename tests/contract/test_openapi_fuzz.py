"""docs/openapi fuzzed by schemathesis against a live gateway in front of the real Triton (issue
13, item 6): every REST operation of every dialect gets a few valid and invalid requests; none
may be answered INTERNAL (a 5xx the gateway produced itself), none may hang or drop the
connection, and afterwards the gateway still answers, with nothing left in flight.

``FUZZ_HTTP_EXAMPLES`` (default 20 per operation and mode: about 45 s) sets the depth; ``make soak`` runs deeper.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from soak import openapi_fuzz
from tests.support import ROOT, free_port, gateway_config, http_call, start_gateway, stop_gateway

EXAMPLES = int(os.environ.get("FUZZ_HTTP_EXAMPLES", "20"))


@pytest.fixture(scope="module")
def fuzz_gateway(triton, tmp_path_factory):
    """A gateway of its own (the fuzzer toggles GRPS online state), configured as the contract one."""
    from gateway.dialects import LISTENERS

    dialects: dict = {}
    for f in sorted((ROOT / "tests" / "config").glob("*.yaml")):
        dialects.update((yaml.safe_load(f.read_text()) or {}).get("dialects") or {})
    ports = {name: free_port() for name in LISTENERS}
    gw = start_gateway(gateway_config(triton.grpc_target, ports, {"dialects": dialects, "log_level": "WARNING"}),
                       tmp_path_factory.mktemp("fuzz-gateway"))
    yield gw
    stop_gateway(gw)


@pytest.mark.parametrize("dialect", sorted(openapi_fuzz.LISTENER))
def test_no_request_gets_an_internal_error_or_no_answer(fuzz_gateway, dialect):
    gw = fuzz_gateway
    report = openapi_fuzz.fuzz(dialect, gw.url(openapi_fuzz.LISTENER[dialect]), gw.url("admin_http"), EXAMPLES)
    print(dialect, report.total, dict(report.statuses), report.server_errors)
    assert not report.failures, "\n".join(report.failures[:10]) + f"\n\nlog:\n{gw.log_tail()}"
    assert report.total >= len(report.sent) > 0
    assert gw.proc.poll() is None


def test_the_gateway_still_answers_after_fuzzing(fuzz_gateway):
    gw = fuzz_gateway
    assert gw.proc.poll() is None
    assert http_call(gw.url("admin_http"), "GET", "/health")[0] == 200
    status, _, body = http_call(gw.url("tfserving_rest"), "POST", "/v1/models/saved_model_half_plus_three:predict",
                                '{"instances": [1.0]}')
    assert (status, json.loads(body)) == (200, {"predictions": [3.5]})
    metrics = http_call(gw.url("admin_http"), "GET", "/metrics")[2].decode()
    assert openapi_fuzz.internal_errors(gw.url("admin_http")) == 0
    inflight = re.findall(r"^gateway_inflight_requests(?:\{[^}]*\})? ([0-9.e+]+)$", metrics, re.M)
    assert inflight and sum(float(v) for v in inflight) <= 1  # this /metrics request itself, at most
    assert "Traceback" not in gw.log_path.read_text(errors="replace")
