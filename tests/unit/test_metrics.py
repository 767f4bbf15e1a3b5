"""Metrics: names, labels and values, observed by a live in-process worker (one request per dialect,
then a scrape of the admin listener), and the Grafana dashboard's queries against that exposition.

The worker's upstream is the scripted FakeUpstream (translated dialects) with a raw-bytes gRPC
server for the V2 passthrough's channel; the real TritonUpstream is timed against the same server.
"""

from __future__ import annotations

import json
import platform

import aiohttp
import grpc
import orjson
import promql_parser
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import service_pb2

import gateway
from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from gateway.core.errors import GatewayError
from gateway.core.tensors import InferRequest
from gateway.observe import metrics
from gateway.upstream import TritonUpstream
from tests.fakes import FakeUpstream, fake_triton, text_response
from tests.support import ROOT, free_port, running_worker

LABELS = {"dialect": "unit", "listener": "unit_http", "route": "predict"}
SVC = "/inference.GRPCInferenceService/"


def _count(model, outcome, status=200):
    labels = {**LABELS, "model": model, "outcome": outcome, "status": str(status)}
    return REGISTRY.get_sample_value("gateway_requests_total", labels) or 0.0


def _observe(model, outcome, status=200, bytes_in=0, bytes_out=0):
    metrics.observe("unit", "unit_http", "predict", model, outcome, 0.001, status, bytes_in, bytes_out)


def test_outcomes_are_counted_by_error_kind_and_status():
    before_ok, before_bad = _count("m", "ok"), _count("m", "invalid_argument", 400)
    _observe("m", "ok")
    _observe("m", "invalid_argument", 400)
    _observe("m", "invalid_argument", 400)
    assert _count("m", "ok") == before_ok + 1
    assert _count("m", "invalid_argument", 400) == before_bad + 2
    hist = REGISTRY.get_sample_value("gateway_request_duration_seconds_count",
                                     {**LABELS, "model": "m", "outcome": "invalid_argument"})
    assert hist >= 2


def test_bytes_are_counted_per_direction():
    labels = {**LABELS, "model": "sized"}
    before = [REGISTRY.get_sample_value(n, labels) or 0.0
              for n in ("gateway_request_bytes_total", "gateway_response_bytes_total")]
    _observe("sized", "ok", bytes_in=100, bytes_out=7)
    _observe("sized", "ok", bytes_in=20)
    after = [REGISTRY.get_sample_value(n, labels) for n in ("gateway_request_bytes_total", "gateway_response_bytes_total")]
    assert after == [before[0] + 120, before[1] + 7]


def test_unknown_models_do_not_create_label_series():
    _observe("made-up-name-123", "not_found", 404)
    assert _count("_unknown", "not_found", 404) >= 1
    assert _count("made-up-name-123", "not_found", 404) == 0


def test_the_model_label_space_is_bounded(monkeypatch):
    monkeypatch.setattr(metrics, "_model_labels", set())
    monkeypatch.setattr(metrics, "_children", {})
    monkeypatch.setattr(metrics, "MAX_MODEL_LABELS", 2)
    before = _count("_other", "ok")
    for name in ("a", "b", "c", "d"):
        _observe(name, "ok")
    assert _count("a", "ok") >= 1 and _count("b", "ok") >= 1
    assert _count("c", "ok") == 0 and _count("_other", "ok") == before + 2


@pytest.mark.parametrize("outcome", ["ok", "overloaded"])
def test_cached_children_still_count(outcome):
    before = _count("cached", outcome)
    for _ in range(3):
        _observe("cached", outcome)
    assert _count("cached", outcome) == before + 3


def test_generations_follow_the_genai_conventions():
    labels = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "triton", "gen_ai_request_model": "g"}

    def value(name, **extra):
        return REGISTRY.get_sample_value(name, {**labels, **extra}) or 0.0

    before = value("gen_ai_client_token_usage_sum", gen_ai_token_type="output")
    metrics.observe_generation("chat", "g", 1.0, 0.1, 5, 10)  # 10 tokens: the 9 after the first took 0.9 s
    assert value("gen_ai_client_token_usage_sum", gen_ai_token_type="output") == before + 10
    assert value("gen_ai_client_token_usage_sum", gen_ai_token_type="input") >= 5
    assert value("gen_ai_server_time_to_first_token_seconds_count") >= 1
    assert value("gen_ai_server_time_per_output_token_seconds_bucket", le="0.1") >= 1
    assert value("gen_ai_server_time_per_output_token_seconds_bucket", le="0.075") == 0
    assert value("gen_ai_server_request_duration_seconds_count") >= 1


def test_build_info_names_the_version_and_python():
    samples = [s for fam in REGISTRY.collect() if fam.name == "gateway_build_info" for s in fam.samples]
    assert len(samples) == 1 and samples[0].value == 1
    assert samples[0].labels["version"] == gateway.__version__
    assert samples[0].labels["python"] == platform.python_version()


def test_the_commit_comes_from_the_environment_first(monkeypatch):
    monkeypatch.setenv("GATEWAY_COMMIT", "0123456789abcdef")
    assert metrics._commit() == "0123456789abcdef"


# -- a live worker ---------------------------------------------------------------------------------
class RawTriton(grpc.GenericRpcHandler):
    """Raw-bytes KServe V2 answers: ready, ModelInfer, and NOT_FOUND for metadata of unknown models."""

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]
        return grpc.unary_unary_rpc_method_handler(getattr(self, "_" + name, self._other))

    async def _ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True).SerializeToString()

    async def _ModelInfer(self, request, context):
        return service_pb2.ModelInferResponse(model_name="llm", model_version="1").SerializeToString()

    async def _other(self, request, context):
        await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope' is not found")


class Upstream(FakeUpstream):
    channel: grpc.aio.Channel


@pytest.fixture(scope="module")
async def scraped():
    """The admin listener's exposition after one request of each kind on every listener."""
    names = ("tfserving_rest", "tfserving_grpc", "grps_http", "grps_grpc", "mindie_http", "v2_grpc", "admin_http")
    ports = {name: free_port() for name in names}
    upstream = Upstream(script=[text_response("Hello"), text_response(" world")])
    async with fake_triton(RawTriton()) as (_, target), grpc.aio.insecure_channel(target) as upstream.channel, \
            running_worker(ports, target, upstream_factory=lambda _s: upstream):
        real = TritonUpstream(target)  # the upstream client's own timing
        await real.connect()
        try:
            assert await real.server_ready()
            await real.infer(InferRequest("llm", []))
            with pytest.raises(GatewayError):
                await real.model_metadata("nope")
            answers = await _one_of_each(ports)
            # the cut-over's series, observed here as a shadow comparison would (end to end with a real
            # legacy server: tests/contract/test_cutover_http.py)
            metrics.observe_migration("tfserving", "llm", "shadow", "mismatch", [("y", 0.001, 0.0004)], "spelling")
            metrics.LEGACY_UP.labels("tfserving", "http").set(1)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{ports['admin_http']}/metrics") as r:
                    text = (await r.read()).decode()
            yield text, answers
        finally:
            await real.close()


async def _one_of_each(ports: dict[str, int]) -> dict[str, tuple]:
    answers = {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/nope") as r:
            answers["tfserving_rest"] = r.status, len(await r.read())
        async with http.get(f"http://127.0.0.1:{ports['grps_http']}/grps/v1/health/live") as r:
            answers["grps_http"] = r.status, len(await r.read())
        body = {"model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
        async with http.post(f"http://127.0.0.1:{ports['mindie_http']}/v1/chat/completions", json=body) as r:
            answers["mindie_http"] = r.status, await r.read()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
        req = get_model_status_pb2.GetModelStatusRequest()
        req.model_spec.name = "llm"
        answers["tfserving_grpc"] = await model_service_pb2_grpc.ModelServiceStub(ch).GetModelStatus(req)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
        answers["grps_grpc"] = await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['v2_grpc']}") as ch:
        raw = service_pb2.ModelInferRequest(model_name="llm").SerializeToString()
        answers["v2_grpc"] = raw, await ch.unary_unary(SVC + "ModelInfer")(raw)
    return answers


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _value(samples, name: str, **labels) -> float:
    return sum(s.value for s in samples.get(name, ()) if all(s.labels.get(k) == v for k, v in labels.items()))


async def test_every_dialect_is_counted_with_its_route_model_status_and_bytes(scraped):
    text, answers = scraped
    samples = _samples(text)
    req = "gateway_requests_total"
    assert answers["tfserving_rest"][0] == 404
    assert _value(samples, req, listener="tfserving_rest", model="_unknown", outcome="not_found", status="404") >= 1
    assert _value(samples, req, listener="tfserving_grpc", model="llm", outcome="ok", status="OK") >= 1
    assert _value(samples, req, listener="grps_http", route="health", outcome="ok", status="200") >= 1
    assert _value(samples, req, listener="grps_grpc", route="CheckLiveness", outcome="ok", status="OK") >= 1
    assert _value(samples, req, listener="mindie_http", route="chat", model="llm", outcome="ok", status="200") >= 1
    assert _value(samples, req, dialect="v2", route="ModelInfer", model="llm", outcome="ok", status="OK") >= 1
    # bytes: the request body or message in, the answer out (a streamed HTTP body is not counted)
    raw, answer = answers["v2_grpc"]
    assert _value(samples, "gateway_request_bytes_total", listener="v2_grpc", route="ModelInfer") >= len(raw)
    assert _value(samples, "gateway_response_bytes_total", listener="v2_grpc", route="ModelInfer") >= len(answer)
    assert _value(samples, "gateway_response_bytes_total", listener="grps_http",
                  route="health") >= answers["grps_http"][1] > 0
    assert _value(samples, "gateway_request_bytes_total", listener="mindie_http", route="chat") > 0
    assert _value(samples, "gateway_request_duration_seconds_count", listener="mindie_http", outcome="ok") >= 1


async def test_upstream_calls_are_timed_by_method_model_and_code(scraped):
    samples = _samples(scraped[0])
    name = "gateway_upstream_request_duration_seconds_count"
    assert _value(samples, name, method="ServerReady", model="", code="OK") >= 1
    assert _value(samples, name, method="ModelInfer", model="llm", code="OK") >= 1
    assert _value(samples, name, method="ModelMetadata", model="_unknown", code="NOT_FOUND") >= 1


async def test_a_streamed_generation_records_genai_metrics(scraped):
    samples = _samples(scraped[0])
    status, body = scraped[1]["mindie_http"]
    assert status == 200 and b"Hello" in body
    labels = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "triton", "gen_ai_request_model": "llm"}
    assert _value(samples, "gen_ai_server_time_to_first_token_seconds_count", **labels) >= 1
    assert _value(samples, "gen_ai_server_request_duration_seconds_count", **labels) >= 1
    assert _value(samples, "gen_ai_client_token_usage_count", gen_ai_token_type="output", **labels) >= 1
    assert _value(samples, "gateway_upstream_ready") == 1  # set by the scrape
    assert _value(samples, "gateway_build_info", version=gateway.__version__) == 1
    assert "gateway_inflight_requests" in samples


# -- the dashboard ---------------------------------------------------------------------------------
DASHBOARD = json.loads((ROOT / "deploy" / "grafana" / "gateway-dashboard.json").read_text())
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$dialect": ".*"}


def _queries() -> list[str]:
    out = [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", [])]
    out += [v["definition"].removeprefix("label_values(").rsplit(",", 1)[0]
            for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]
    return out


def _selectors(expr: str) -> list:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    found, todo = [], [promql_parser.parse(expr)]
    while todo:
        node = todo.pop()
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        elif isinstance(node, promql_parser.MatrixSelector):
            todo.append(node.vector_selector)
        elif isinstance(node, promql_parser.Call):
            todo.extend(node.args)
        elif isinstance(node, promql_parser.BinaryExpr):
            todo.extend((node.lhs, node.rhs))
        elif isinstance(node, promql_parser.AggregateExpr | promql_parser.ParenExpr | promql_parser.UnaryExpr
                        | promql_parser.SubqueryExpr):
            todo.append(node.expr)
    return found


def test_the_dashboard_charts_what_the_issue_asks():
    queries = " ".join(_queries())
    for name in ("gateway_requests_total", "gateway_request_duration_seconds_bucket",
                 "gateway_upstream_request_duration_seconds_bucket", "gateway_inflight_requests",
                 "gateway_request_bytes_total", "gateway_response_bytes_total",
                 "gen_ai_server_time_to_first_token_seconds_bucket", "gen_ai_server_time_per_output_token_seconds_bucket",
                 "gen_ai_client_token_usage_sum", "gateway_upstream_ready", "gateway_build_info",
                 "gateway_migration_total", "gateway_migration_max_error"):
        assert name in queries, name


async def test_every_dashboard_query_names_only_exported_metrics_and_labels(scraped):
    samples = _samples(scraped[0])
    assert len(_queries()) >= 15
    for expr in _queries():
        selectors = _selectors(expr)
        assert selectors, expr
        for sel in selectors:
            assert sel.name in samples, f"{sel.name} (in {expr}) is not exported"
            labels = {k for s in samples[sel.name] for k in s.labels}
            for matcher in sel.matchers.matchers:
                assert matcher.name in labels, f"{sel.name} has no label {matcher.name} (in {expr})"


def test_the_dashboard_parser_rejects_an_unknown_name():
    assert [s.name for s in _selectors('sum(rate(gateway_no_such_thing_total{dialect=~"$dialect"}[1m]))')] == [
        "gateway_no_such_thing_total"]


def test_the_dashboard_is_valid_grafana_json():
    assert DASHBOARD["uid"] and DASHBOARD["schemaVersion"] >= 36
    ids = [p["gridPos"] for p in DASHBOARD["panels"]]
    assert all(0 <= g["x"] and g["x"] + g["w"] <= 24 for g in ids)
    assert orjson.loads(orjson.dumps(DASHBOARD)) == DASHBOARD


def test_queued_observations_are_written_as_observe_would_write_them():
    """metrics.observe_all (one update per bucket for a batch) against the histogram's own observe."""
    from prometheus_client import CollectorRegistry, Histogram

    registry = CollectorRegistry()
    hist = Histogram("h", "h", ["k"], buckets=metrics.LATENCY_BUCKETS, registry=registry)
    values = [0.0, 0.0005, 0.0004999, 0.0005001, 0.3, 2.5, 60.0, 61.0, 1e9, 0.01, 0.01]
    for v in values:
        hist.labels("one").observe(v)
    metrics.observe_all(hist.labels("batch"), values)
    samples = [s for fam in registry.collect() for s in fam.samples if s.name != "h_created"]
    by = {}
    for s in samples:
        by.setdefault(s.labels["k"], {})[(s.name, s.labels.get("le"))] = s.value
    assert by["one"] == by["batch"] and by["one"][("h_count", None)] == len(values)


def test_the_inflight_gauge_follows_admission():
    from gateway.call import Admission

    a = Admission(4)
    assert a.acquire() and a.acquire()
    metrics.flush()
    assert REGISTRY.get_sample_value("gateway_inflight_requests") >= 2
    a.release()
    a.release()
    metrics.flush()
    assert REGISTRY.get_sample_value("gateway_inflight_requests") == 0
