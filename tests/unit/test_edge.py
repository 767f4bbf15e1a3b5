"""The edge every request takes: error rendering per dialect (a table, restated from each original
server's sources), the over-limit answer on every listener, request ids, and metrics.

The live tests run a real Worker in-process with every listener on loopback; its upstream is a
gRPC server with no methods (nothing here needs Triton: refused requests never reach it).
"""

from __future__ import annotations

import json

import aiohttp
import grpc
import orjson
import pytest
from prometheus_client import REGISTRY

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import GrpcStatus, load
from gateway.dialects import CATALOGUE, LISTENERS
from gateway.settings import Settings
from tests.fakes import FakeUpstream, fake_triton
from tests.support import free_port, running_worker, worker_settings

K = ErrorKind
# HTTP status of every kind, per dialect: TF Serving's ToHTTPStatusCode (http_server.cc); GRPS's codes
# (brpc ELIMIT -> 503 when overloaded); MindIE's catalogue (422 validation, 424 generation, 429 overloaded)
HTTP = {
    "tfserving": {K.INVALID_ARGUMENT: 400, K.NOT_FOUND: 404, K.FAILED_PRECONDITION: 400, K.NOT_READY: 503,
                  K.UNAVAILABLE: 503, K.DEADLINE_EXCEEDED: 504, K.RESOURCE_EXHAUSTED: 429, K.OVERLOADED: 503,
                  K.CANCELLED: 499, K.UNIMPLEMENTED: 501, K.UPSTREAM_FAILED: 500, K.INTERNAL: 500,
                  K.UNAUTHENTICATED: 401},
    "grps": {K.INVALID_ARGUMENT: 400, K.NOT_FOUND: 404, K.FAILED_PRECONDITION: 400, K.NOT_READY: 503,
             K.UNAVAILABLE: 503, K.DEADLINE_EXCEEDED: 500, K.RESOURCE_EXHAUSTED: 503, K.OVERLOADED: 503,
             K.CANCELLED: 500, K.UNIMPLEMENTED: 500, K.UPSTREAM_FAILED: 500, K.INTERNAL: 500,
             K.UNAUTHENTICATED: 401},
    "mindie": {K.INVALID_ARGUMENT: 422, K.NOT_FOUND: 404, K.FAILED_PRECONDITION: 424, K.NOT_READY: 503,
               K.UNAVAILABLE: 503, K.DEADLINE_EXCEEDED: 500, K.RESOURCE_EXHAUSTED: 429, K.OVERLOADED: 429,
               K.CANCELLED: 500, K.UNIMPLEMENTED: 501, K.UPSTREAM_FAILED: 424, K.INTERNAL: 500,
               K.UNAUTHENTICATED: 401},
    "admin": {K.UNAUTHENTICATED: 401},  # /metrics on an admin listener with keys
    # V2 REST: Triton's HttpCodeFromError (INVALID_ARG 400, NOT_FOUND 404, UNAVAILABLE 503,
    # UNSUPPORTED 501, INTERNAL 500) for the kinds Triton has; the gateway's own for the others
    "v2": {K.INVALID_ARGUMENT: 400, K.NOT_FOUND: 404, K.NOT_READY: 503, K.UNAVAILABLE: 503, K.OVERLOADED: 503,
           K.UNIMPLEMENTED: 501, K.UPSTREAM_FAILED: 500, K.INTERNAL: 500, K.UNAUTHENTICATED: 401},
}
# gRPC status of a request without a valid key, on every gRPC listener (GRPS: brpc's ERPCAUTH, a
# status rather than OK + FAILURE body, since brpc refuses it before GRPS runs)
UNAUTHENTICATED_GRPC = {"tfserving": grpc.StatusCode.UNAUTHENTICATED, "grps": grpc.StatusCode.UNAUTHENTICATED,
                        "v2": grpc.StatusCode.UNAUTHENTICATED}
# gRPC status of the over-limit answer: TF Serving's batch queue (UNAVAILABLE), brpc ELIMIT
# (UNAVAILABLE), Triton's queue (UNAVAILABLE)
OVERLOADED = {
    "tfserving": (503, grpc.StatusCode.UNAVAILABLE,
                  "The batch scheduling queue to which this task was submitted is full"),
    "grps": (503, grpc.StatusCode.UNAVAILABLE, "Reached server's max_concurrency=7"),
    "mindie": (429, None, "Too many requests"),
    "v2": (503, grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size"),
}


def _state(dialect):
    return load(dialect.open)(_Ctx(), dialect.config())


class _Ctx:
    settings = Settings()
    upstream = FakeUpstream()


@pytest.mark.parametrize("dialect", CATALOGUE, ids=lambda d: d.name)
def test_every_dialect_renders_every_error_kind(dialect):
    errors = _state(dialect).errors
    for kind in ErrorKind:
        err = GatewayError(kind, "what happened")
        resp = errors.http(err)
        if kind in HTTP.get(dialect.name, {}):
            expected = HTTP[dialect.name][kind]
            if dialect.name == "grps":  # the C++ server: HTTP 200, the code in the body; brpc's refusals keep theirs
                assert json.loads(resp.body)["status"]["code"] == expected, kind
                expected = expected if kind in (K.OVERLOADED, K.UNAUTHENTICATED) else 200
            assert resp.status == expected, (dialect.name, kind)
        else:
            assert 400 <= resp.status < 600
        answer = errors.grpc(err)
        if kind is K.UNAUTHENTICATED and dialect.name in UNAUTHENTICATED_GRPC:
            assert answer.code == UNAUTHENTICATED_GRPC[dialect.name], dialect.name
        assert isinstance(answer, GrpcStatus) or dialect.name == "grps", (dialect.name, kind)
        if isinstance(answer, GrpcStatus):
            assert answer.code is not grpc.StatusCode.OK


@pytest.mark.parametrize("name", sorted(OVERLOADED))
def test_the_over_limit_answer_is_the_original_servers(name):
    dialect = next(d for d in CATALOGUE if d.name == name)
    errors = _state(dialect).errors
    status, code, message = OVERLOADED[name]
    err = errors.overloaded(7)
    assert err.kind is ErrorKind.OVERLOADED and err.message == message
    if status is not None:
        assert errors.http(err).status == status
    if code is not None:
        assert errors.grpc(err).code == code and errors.grpc(err).message == message


def test_grps_answers_errors_over_grpc_as_ok_with_a_failure_body():
    errors = _state(next(d for d in CATALOGUE if d.name == "grps")).errors
    msg = errors.grpc(GatewayError(ErrorKind.NOT_FOUND, "Not found model: x"))
    assert isinstance(msg, grps_pb2.GrpsMessage)
    assert (msg.status.code, msg.status.msg, msg.status.status) == (404, "Not found model: x", grps_pb2.Status.FAILURE)


# -- a live worker ----------------------------------------------------------------------------------
@pytest.fixture
async def worker():
    ports = {name: free_port() for name in LISTENERS}
    async with fake_triton() as (_, target), running_worker(ports, target, LIMITS__MAX_INFLIGHT="7") as (_, ctx), \
            aiohttp.ClientSession() as http:
        yield ctx, ports, http


def _count(listener: str, outcome: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "gateway_requests":
            for s in metric.samples:
                if s.name.endswith("_total") and s.labels["listener"] == listener and s.labels["outcome"] == outcome:
                    total += s.value
    return total


async def test_every_listener_answers_overloaded_as_its_original_server(worker):
    ctx, ports, http = worker
    before = {name: _count(name, "overloaded") for name in LISTENERS}
    ctx.admission.inflight = ctx.admission.limit  # as if 7 requests were in flight
    try:
        url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m:predict"
        async with http.post(url, data=b'{"instances": [1.0]}') as r:
            assert r.status == 503 and r.headers["x-request-id"]
            assert orjson.loads(await r.read()) == {"error": OVERLOADED["tfserving"][2]}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(predict_pb2.PredictRequest())
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert err.value.details() == OVERLOADED["tfserving"][2]

        url = f"http://127.0.0.1:{ports['grps_http']}/grps/v1/infer/predict"
        async with http.post(url, json={"str_data": "x"}) as r:
            body = orjson.loads(await r.read())
            assert r.status == 503
            assert body["status"] == {"code": 503, "msg": "Reached server's max_concurrency=7", "status": "FAILURE"}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
            stub = grps_pb2_grpc.GrpsServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Predict(grps_pb2.GrpsMessage(str_data="x"))
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.aio.AioRpcError) as err:
                [m async for m in stub.PredictStreaming(grps_pb2.GrpsMessage(str_data="x"))]
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE

        url = f"http://127.0.0.1:{ports['mindie_http']}/v1/chat/completions"
        async with http.post(url, json={"messages": [{"role": "user", "content": "hi"}]}) as r:
            assert r.status == 429
            assert orjson.loads(await r.read()) == {"error": "Too many requests", "error_type": "overloaded"}

        async with http.get(f"http://127.0.0.1:{ports['admin_http']}/metrics") as r:
            assert r.status == 200  # the admin listener is never refused for load
    finally:
        ctx.admission.inflight = 0
    for name in ("tfserving_rest", "tfserving_grpc", "grps_http", "mindie_http"):
        assert _count(name, "overloaded") == before[name] + 1, name
    assert _count("grps_grpc", "overloaded") == before["grps_grpc"] + 2


async def test_request_ids_are_echoed_or_generated_on_every_http_answer(worker):
    _, ports, http = worker
    url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models"
    async with http.get(url, headers={"X-Request-Id": "abc-123"}) as r:
        assert r.status == 400 and r.headers["x-request-id"] == "abc-123"
        assert orjson.loads(await r.read()) == {"error": "Missing model name in request."}
    async with http.get(url) as r1, http.get(url) as r2:
        assert r1.headers["x-request-id"] != r2.headers["x-request-id"]
    # an error sanic raises before any handler (no such route) is in the dialect's envelope too
    async with http.get(f"http://127.0.0.1:{ports['grps_http']}/no/such/path",
                        headers={"X-Request-Id": "r-404"}) as r:
        body = orjson.loads(await r.read())
        assert r.status == 404 and r.headers["x-request-id"] == "r-404"
        assert body["status"]["code"] == 404 and body["status"]["status"] == "FAILURE"
    async with http.get(f"http://127.0.0.1:{ports['mindie_http']}/no/such/path") as r:
        assert r.status == 404 and orjson.loads(await r.read())["error_type"] == "NotFoundError"


async def test_kserve_v2_rest_answers_as_triton_said_it_no_request_id_made_up(worker):
    """Triton's HTTP answers carry no X-Request-Id: the V2 REST listener's carry only the client's
    own (plain answers, errors, sanic's own errors, streamed answers), as the V2 gRPC passthrough."""
    _, ports, http = worker
    base = f"http://127.0.0.1:{ports['v2_http']}"
    for method, path in (("GET", "/v2"), ("GET", "/v2/health/ready"), ("GET", "/v2/models/nope"),
                         ("GET", "/no/such/path"), ("POST", "/v2/models/nope/generate_stream")):
        async with http.request(method, base + path, data=b"{}" if method == "POST" else None) as r:
            await r.read()
            assert "x-request-id" not in r.headers, (path, r.status, dict(r.headers))
        async with http.request(method, base + path, data=b"{}" if method == "POST" else None,
                                headers={"X-Request-Id": "v2-7"}) as r:
            await r.read()
            assert r.headers["x-request-id"] == "v2-7", (path, r.status)
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m") as r:  # the other dialects: made up
        assert r.headers["x-request-id"]


async def test_status_and_metadata_calls_are_counted(worker):
    _, ports, http = worker
    before = _count("tfserving_rest", "invalid_argument"), _count("grps_grpc", "ok")
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:  # a status call
        assert r.status == 400
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
        await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage())
    assert (_count("tfserving_rest", "invalid_argument"), _count("grps_grpc", "ok")) == (before[0] + 1,
                                                                                         before[1] + 1)


async def test_grpc_answers_carry_the_request_id(worker):
    _, ports, _ = worker
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
        call = grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage(),
                                                               metadata=(("x-request-id", "g-1"),))
        assert (await call).status.code == 200
        assert ("x-request-id", "g-1") in tuple(await call.trailing_metadata())


async def test_an_unexpected_exception_is_internal_in_the_envelope_and_the_worker_keeps_serving(worker,
                                                                                                monkeypatch):
    ctx, ports, http = worker
    from gateway.dialects.tfserving import http as tf_http

    async def boom(*_a, **_k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tf_http, "dispatch", boom)
    url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m"
    async with http.get(url) as r:
        assert r.status == 500 and orjson.loads(await r.read()) == {"error": "Internal error"}
    monkeypatch.undo()
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:
        assert r.status == 400
    assert ctx.admission.inflight == 0


async def test_health_names_no_internal_address_and_is_503_while_draining(worker):
    ctx, ports, http = worker
    url = f"http://127.0.0.1:{ports['admin_http']}/health"
    async with http.get(url) as r:  # the upstream here answers no ServerReady: not ready
        assert r.status == 503 and orjson.loads(await r.read()) == {"status": "not ready"}
    ctx.draining = True
    try:
        async with http.get(url) as r:
            assert r.status == 503 and orjson.loads(await r.read()) == {"status": "draining"}
    finally:
        ctx.draining = False


@pytest.fixture
async def small_limit_worker():
    ports = {name: free_port() for name in ("tfserving_rest", "grps_http", "mindie_http")}
    async with fake_triton() as (_, target), running_worker(ports, target, LIMITS__MAX_REQUEST_BYTES="1000"), \
            aiohttp.ClientSession() as http:
        yield ports, http


async def test_a_body_over_the_limit_is_413_in_each_envelope_before_it_is_read(small_limit_worker):
    ports, http = small_limit_worker
    body = b'{"instances": [' + b"1.0," * 1000 + b"1.0]}"
    async with http.post(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/m:predict", data=body) as r:
        assert r.status == 413 and orjson.loads(await r.read()) == {"error": "Request body exceeds the size limit"}
    async with http.post(f"http://127.0.0.1:{ports['grps_http']}/grps/v1/infer/predict", data=body,
                         headers={"Content-Type": "application/json"}) as r:
        status = orjson.loads(await r.read())["status"]
        assert r.status == 413 and status["code"] == 413 and status["status"] == "FAILURE"
        assert status["msg"].startswith("Bad Request, err: ")
    async with http.post(f"http://127.0.0.1:{ports['mindie_http']}/v1/chat/completions", data=body) as r:
        got = orjson.loads(await r.read())
        assert r.status == 413 and got["error_type"] == "Input Validation Error"
    async with http.get(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models") as r:  # still serving
        assert r.status == 400


def test_client_request_ids_are_kept_when_printable_ascii_and_replaced_otherwise():
    from gateway import call as calls

    assert calls.request_id("abc-123") == "abc-123"
    assert calls.request_id("x" * 300) == "x" * calls.MAX_REQUEST_ID
    for bad in ("caf\u00e9", "a\x00b", "tab\there", "\u2028"):  # travel in headers, gRPC metadata, logs
        generated = calls.request_id(bad)
        assert generated != bad and generated.isascii() and generated.isprintable()


async def test_a_stream_that_fails_in_band_is_counted_as_failed(worker):
    """GRPS answers a failed stream with an OK status and a FAILURE message; the metrics (and the
    access line) must still count it as the failure it is."""
    _, ports, _ = worker
    ok_before = _count("grps_grpc", "ok")
    failed_before = sum(_count("grps_grpc", kind.value) for kind in ErrorKind if kind.value != "ok")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
        call = grps_pb2_grpc.GrpsServiceStub(ch).PredictStreaming(grps_pb2.GrpsMessage(str_data="hi", model="m-1"))
        answers = [m async for m in call]
        assert await call.code() == grpc.StatusCode.OK
    assert [a.status.status for a in answers] == [grps_pb2.Status.FAILURE]
    assert _count("grps_grpc", "ok") == ok_before
    assert sum(_count("grps_grpc", kind.value) for kind in ErrorKind if kind.value != "ok") == failed_before + 1


async def test_a_stream_closed_from_another_context_is_still_finished():
    """grpc.aio finalizes a cancelled stream's handler from its own task: the edge's generator is
    closed in a context that never entered the request. It must still count it (and not raise)."""
    import asyncio
    import contextvars
    import gc

    from gateway.call import Admission
    from gateway.dialect import DefaultRendering
    from gateway.edge import Edge
    from gateway.observe import metrics

    class Ctx:
        def invocation_metadata(self):
            return ()

        def time_remaining(self):
            return None

        def set_trailing_metadata(self, _md):
            pass

    async def answers(_request, _context):
        while True:
            yield b"x"

    edge = Edge("v2", "edge_test", DefaultRendering(), Admission(8), 30.0, 600.0)
    gen = edge.stream("Closed", answers)(b"", Ctx())
    assert await contextvars.copy_context().run(asyncio.ensure_future, gen.__anext__()) == b"x"

    def counted() -> float:
        metrics.flush()
        return REGISTRY.get_sample_value("gateway_requests_total", {
            "dialect": "v2", "listener": "edge_test", "route": "Closed", "model": "", "outcome": "cancelled",
            "status": "CANCELLED"}) or 0

    before = counted()
    await contextvars.copy_context().run(asyncio.ensure_future, gen.aclose())
    del gen  # the edge's own generator inside is finalized by the loop's hook, from a task of its own
    for _ in range(50):
        gc.collect()
        await asyncio.sleep(0.01)
        if counted() == before + 1:
            break
    assert counted() == before + 1
    assert edge.admission.inflight == 0


def test_only_routes_that_ask_for_it_take_the_fast_lane_and_none_with_tracing():
    """Edge.route marks a route's handler for the fast lane (gateway/edge/fastlane.py) only when the route
    asks for it, with the answer-once predicate it gave, and never on a traced listener."""
    from gateway.call import Admission
    from gateway.dialect import DefaultRendering
    from gateway.edge import Edge
    from gateway.edge.fastlane import FAST
    from gateway.edge.http import make_app

    settings: Settings = worker_settings({}, "127.0.0.1:1")

    async def handler(_request):
        return None

    def answers_once(path: str) -> bool:
        return not path.endswith("/stream")

    app = make_app("lane_routes", settings)
    edge = Edge("v2", "lane_routes", DefaultRendering(), Admission(8), 30.0, 600.0)
    edge.route(app, handler, "/plain", ["POST"], "plain")
    edge.route(app, handler, "/fast", ["POST"], "fast", fast=True)
    edge.route(app, handler, "/some", ["POST"], "some", fast=answers_once)
    edge.tracer = object()  # as a listener with tracing.enabled has
    edge.route(app, handler, "/traced", ["POST"], "traced", fast=True)
    marks = {r.name.rsplit(".", 1)[-1]: getattr(r.handler, FAST, None) for r in app.router.routes}
    assert marks == {"plain": None, "fast": True, "some": answers_once, "traced": None}
