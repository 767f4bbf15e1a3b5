"""The ``legacy`` route on the gRPC listeners against a legacy server that answers what the stand-in
gateway of the contract tests never does: initial and trailing metadata of its own (``-bin`` ones
included), details with non-ASCII bytes and ``%``, a stream that fails after two messages. Real
grpc clients, an in-process worker (both gRPC server kinds), a grpc.aio server as the legacy one;
Triton is never called on this route (the worker's upstream is a fake that records calls)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway._proto.grps_pb2 import GrpsMessage
from gateway._proto.tensorflow_serving.apis import predict_pb2
from gateway.upstream.relay import forwarded
from tests.fakes import FakeUpstream
from tests.support import free_port, running_worker

ANSWER = predict_pb2.PredictResponse()
ANSWER.model_spec.name = "m"
ANSWER.outputs["y"].float_val.extend([1.5, 2.5])
ANSWER.outputs["y"].dtype = 1
ANSWER.outputs["y"].tensor_shape.dim.add(size=2)
ANSWER_BYTES = ANSWER.SerializeToString() + b"\xa2\x06\x00"  # an unknown field: relayed, not re-encoded
DETAILS = "naïve 100% wrong\tdetails"


class Legacy(grpc.GenericRpcHandler):
    """A legacy server: Predict answers by the request's model name; GRPS PredictStreaming streams."""

    def __init__(self):
        self.seen: list[tuple] = []

    def service(self, details):
        if details.method.endswith("/Predict") and "tensorflow" in details.method:
            return grpc.unary_unary_rpc_method_handler(self.predict)
        if details.method.endswith("/PredictStreaming"):
            return grpc.unary_stream_rpc_method_handler(self.stream)
        return None

    async def predict(self, data: bytes, context):
        self.seen.append(tuple(context.invocation_metadata()))
        name = predict_pb2.PredictRequest.FromString(data).model_spec.name
        if name == "err":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, DETAILS,
                                (("why", "legacy"), ("why-bin", b"\x00\xff")))
        await context.send_initial_metadata((("legacy-h", "1"),))
        context.set_trailing_metadata((("legacy-t", "v"), ("legacy-t-bin", b"\x00\x01\xfe")))
        return ANSWER_BYTES

    async def stream(self, data: bytes, context):
        self.seen.append(tuple(context.invocation_metadata()))
        msg = GrpsMessage.FromString(data)
        for i in range(3 if msg.model != "err" else 2):
            yield GrpsMessage(str_data=f"part {i}").SerializeToString()
        if msg.model == "err":
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, DETAILS, (("why", "stream"),))
        context.set_trailing_metadata((("legacy-t", "s"),))


@pytest.fixture
async def legacy():
    server = grpc.aio.server()
    handler = Legacy()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield handler, f"127.0.0.1:{port}"
    await server.stop(0)


def _env(target: str, kind: str) -> dict:
    return {"GRPC_SERVER": kind,
            "DIALECTS__TFSERVING__LEGACY__GRPC": target, "DIALECTS__TFSERVING__LEGACY__ROUTE": "legacy",
            "DIALECTS__GRPS__LEGACY__GRPC": target, "DIALECTS__GRPS__LEGACY__ROUTE": "legacy",
            "DIALECTS__GRPS__LEGACY__HEADERS": "{x-team: ml}"}


def _request(name: str) -> bytes:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    req.inputs["x"].dtype = 1  # DT_FLOAT
    req.inputs["x"].tensor_shape.dim.add(size=2)
    req.inputs["x"].float_val.extend([1.0, 3.0])
    return req.SerializeToString()


@pytest.mark.parametrize("kind", ["h2", "grpc"])
async def test_legacy_route_relays_bytes_status_details_and_metadata(legacy, kind):
    handler, target = legacy
    fake = FakeUpstream()
    ports = {"tfserving_grpc": free_port(), "grps_grpc": free_port()}
    async with running_worker(ports, "127.0.0.1:1", upstream_factory=lambda _s: fake, **_env(target, kind)):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
            predict = ch.unary_unary("/tensorflow.serving.PredictionService/Predict")
            call = predict(_request("m"), metadata=(("x-request-id", "r-1"), ("x-user", "u")), timeout=10)
            assert await call == ANSWER_BYTES
            assert tuple(await call.initial_metadata()) == (("legacy-h", "1"),)
            trailing = tuple(await call.trailing_metadata())
            assert trailing[:2] == (("legacy-t", "v"), ("legacy-t-bin", b"\x00\x01\xfe"))
            assert ("x-request-id", "r-1") in trailing
            sent = dict(handler.seen[-1])
            assert sent["x-request-id"] == "r-1" and sent["x-user"] == "u"

            call = predict(_request("err"), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            err = info.value
            assert (err.code(), err.details()) == (grpc.StatusCode.FAILED_PRECONDITION, DETAILS)
            md = tuple(err.trailing_metadata())
            assert md[:2] == (("why", "legacy"), ("why-bin", b"\x00\xff"))
            assert [k for k, _ in md].count("x-request-id") == 1

        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grps_grpc']}") as ch:
            stream = ch.unary_stream("/grps.protos.v1.GrpsService/PredictStreaming")
            call = stream(GrpsMessage(model="ok").SerializeToString(), timeout=10)
            got = [GrpsMessage.FromString(m).str_data async for m in call]
            assert got == ["part 0", "part 1", "part 2"]
            assert ("legacy-t", "s") in tuple(await call.trailing_metadata())
            assert dict(handler.seen[-1])["x-team"] == "ml"  # legacy.headers, sent with every call
            call = stream(GrpsMessage(model="err").SerializeToString(), timeout=10)
            got = []
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for m in call:
                    got.append(GrpsMessage.FromString(m).str_data)
            assert got == ["part 0", "part 1"]  # the messages before the error, as they came
            assert (info.value.code(), info.value.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, DETAILS)
            assert ("why", "stream") in tuple(info.value.trailing_metadata())
    assert not fake.requests  # Triton never called on the legacy route


async def test_unreachable_legacy_is_unavailable_without_its_address():
    ports = {"tfserving_grpc": free_port()}
    dead = f"127.0.0.1:{free_port()}"
    async with running_worker(ports, "127.0.0.1:1", upstream_factory=lambda _s: FakeUpstream(), **_env(dead, "h2")):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await ch.unary_unary("/tensorflow.serving.PredictionService/Predict")(_request("m"), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dead not in info.value.details()


def test_forwarded_metadata():
    md = (("user-agent", "grpc-python/1"), ("x-request-id", "client"), ("authorization", "Bearer gw"),
          ("x-user", "u"), ("grpc-accept-encoding", "gzip"), ("x-team", "mine"))
    assert forwarded(md, "rid", False) == (("authorization", "Bearer gw"), ("x-user", "u"), ("x-team", "mine"),
                                           ("x-request-id", "rid"))
    # the listener's own API key is not the legacy server's: dropped, the legacy key sent instead
    assert forwarded(md, "rid", True, (("x-team", "ml"), ("x-env", "prod")), "lk") == (
        ("x-user", "u"), ("x-team", "mine"), ("x-env", "prod"), ("authorization", "Bearer lk"), ("x-request-id", "rid"))



# -- shadow: the Triton side never reaches the client ---------------------------------------------------
def _meta():
    from gateway.core.tensors import ModelMetadata, TensorSpec

    return ModelMetadata("m", ("1",), "python", (TensorSpec("x", "FP32", (-1,)),), (TensorSpec("y", "FP32", (-1,)),))


def _count(outcome: str) -> float:
    from gateway.observe import metrics

    return metrics.MIGRATION.labels("tfserving", "m", "shadow", outcome)._value.get()


async def _until(pred, timeout: float = 20.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < end, "never happened"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("triton", ["hung", "failing"])
async def test_shadow_a_hung_or_failing_triton_never_changes_the_clients_answer(legacy, triton):
    """``hung``: Triton's infer waits until released, under a 30 s shadow deadline; the client's own
    deadline is 3 s, so an answer that waited for the shadow would be DEADLINE_EXCEEDED."""
    _, target = legacy
    hold = asyncio.Event() if triton == "hung" else None
    fake = FakeUpstream(metas=[_meta()], hold=hold)  # no infer scripted: UNAVAILABLE once it answers
    env = {**_env(target, "h2"), "DIALECTS__TFSERVING__LEGACY__ROUTE": "shadow",
           "DIALECTS__TFSERVING__LEGACY__SHADOW_TIMEOUT_S": "30"}
    before = _count("triton_error")
    ports = {"tfserving_grpc": free_port()}
    async with running_worker(ports, "127.0.0.1:1", upstream_factory=lambda _s: fake, **env):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as ch:
            predict = ch.unary_unary("/tensorflow.serving.PredictionService/Predict")
            call = predict(_request("m"), timeout=3)
            assert await call == ANSWER_BYTES
            assert ("legacy-t", "v") in tuple(await call.trailing_metadata())
            await _until(lambda: len(fake.requests) == 1)  # the shadow did reach Triton
            if hold is not None:
                assert _count("triton_error") == before  # still waiting, nothing counted yet
                hold.set()
            await _until(lambda: _count("triton_error") == before + 1)


async def test_gateway_check_probes_the_legacy_grpc_server(legacy):
    from gateway.check import Report, _legacy
    from gateway.cutover.settings import LegacySettings

    _, target = legacy
    report = Report("x")
    up = await _legacy("tfserving", LegacySettings(grpc=target, route="shadow"), report)
    assert up["grpc_reachable"] is True and not report.findings
    dead = LegacySettings(grpc=f"127.0.0.1:{free_port()}", route="shadow", connect_timeout_s=1)
    down = await _legacy("tfserving", dead, report)
    assert down["grpc_reachable"] is False
    assert [(f.level, f.name) for f in report.findings] == [("warning", "legacy.grpc")]


async def test_mtls_to_the_legacy_grpc_server(tmp_path):
    """``legacy.tls`` as upstream.tls on the gRPC relay: the legacy server's CA trusted, a client
    certificate presented (the server requires one); without it, no answer."""
    import trustme

    from gateway.cutover.settings import LegacySettings
    from gateway.upstream.relay import GrpcRelay

    ca = trustme.CA()
    server_cert, client_cert = ca.issue_cert("legacy.example"), ca.issue_cert("gateway.example")
    paths = {}
    for name, pem in (("ca", ca.cert_pem), ("cert", client_cert.cert_chain_pems[0]),
                      ("key", client_cert.private_key_pem)):
        paths[name] = str(tmp_path / f"{name}.pem")
        pem.write_to_path(paths[name])
    creds = grpc.ssl_server_credentials(
        [(server_cert.private_key_pem.bytes(), b"".join(p.bytes() for p in server_cert.cert_chain_pems))],
        root_certificates=ca.cert_pem.bytes(), require_client_auth=True)
    server = grpc.aio.server()
    handler = Legacy()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    path = "/tensorflow.serving.PredictionService/Predict"
    try:
        tls = {"ca_file": paths["ca"], "cert_file": paths["cert"], "key_file": paths["key"],
               "server_name": "legacy.example"}
        relay = GrpcRelay(LegacySettings(grpc=f"127.0.0.1:{port}", route="legacy", tls=tls, timeout_s=5))
        got = await relay.unary(path, _request("m"), (("x-request-id", "t"),))
        await relay.close()
        assert got.ok and got.message == ANSWER_BYTES
        no_cert = GrpcRelay(LegacySettings(grpc=f"127.0.0.1:{port}", route="legacy", timeout_s=5,
                                           tls={"ca_file": paths["ca"], "server_name": "legacy.example"}))
        refused = await no_cert.unary(path, _request("m"), (("x-request-id", "t"),))
        await no_cert.close()
        assert refused.code is grpc.StatusCode.UNAVAILABLE and len(handler.seen) == 1
    finally:
        await server.stop(0)


def test_sticky_client_address_leaves_out_the_port():
    from gateway.cutover.grpcroute import client_address

    assert client_address("ipv4:10.0.0.7:51234") == "10.0.0.7"
    assert client_address("ipv6:[::1]:5") == "::1"
    assert client_address("unix:/tmp/s") == "unix:/tmp/s"
    assert client_address("") == ""


async def test_an_answer_over_max_answer_bytes_is_resource_exhausted(legacy):
    from gateway.cutover.settings import LegacySettings
    from gateway.upstream.relay import GrpcRelay

    _, target = legacy
    small = GrpcRelay(LegacySettings(grpc=target, route="legacy", max_answer_bytes=len(ANSWER_BYTES) - 1))
    big = GrpcRelay(LegacySettings(grpc=target, route="legacy", max_answer_bytes=len(ANSWER_BYTES)))
    path = "/tensorflow.serving.PredictionService/Predict"
    try:
        refused = await small.unary(path, _request("m"), (("x-request-id", "t"),))
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await big.unary(path, _request("m"), (("x-request-id", "t"),))).message == ANSWER_BYTES
    finally:
        await small.close()
        await big.close()
