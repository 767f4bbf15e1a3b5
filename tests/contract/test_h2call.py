"""ModelInfer as HTTP/2 frames on the loop (gateway/h2/client.py, ``upstream.transport: h2``)
held to the grpc.aio unary path against the real Triton: the same requests, as wire bytes, give the
same answer bytes or the same error (kind and text) through ``TritonUpstream.infer_bytes``; large
requests and answers pass the flow-control windows; deadlines, a cancelled caller and a Triton that
goes away and comes back end only their own calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.errors import ErrorKind, GatewayError
from gateway.h2 import client as h2call
from gateway.local import localtriton
from gateway.settings import upstream_addresses
from gateway.upstream import TritonUpstream
from gateway.upstream.client import MODEL_INFER
from tests.contract.modelinfer_cases import CASES, HPT, _answer, _f32, _req, _same
from tests.contract.test_triton_restart import own_triton  # noqa: F401 - the fixture: a Triton of the test's own
from tests.support import ROOT, free_port

pytestmark = pytest.mark.contract


def _pair(target: str) -> tuple[TritonUpstream, TritonUpstream]:
    """grpc.aio and the HTTP/2 client, a caller that goes away cancelling its call (upstream.cancel: all)."""
    return (TritonUpstream(target, cancel_mode="all"),
            TritonUpstream(target, h2=h2call.Channel(upstream_addresses(target)), cancel_mode="all"))


@pytest.fixture
async def pair(triton):
    grpc_up, h2_up = _pair(triton.grpc_target)
    await grpc_up.connect()
    await h2_up.connect()
    yield grpc_up, h2_up
    await grpc_up.close()
    await h2_up.close()


async def test_same_answers_and_errors_as_grpc(pair):
    grpc_up, h2_up = pair
    for _ in range(2):  # the second time, Triton's header blocks are indexed ones (remembered)
        for name, data in CASES.items():
            via_grpc = await _answer(lambda d=data: grpc_up.infer_bytes("m", d))
            via_h2 = await _answer(lambda d=data: h2_up.infer_bytes("m", d))
            assert _same(via_h2, via_grpc), name
    assert len(h2_up._h2._conns[0].streams) == 0


async def test_large_request_and_answer_pass_the_windows(pair):
    grpc_up, h2_up = pair
    n = 3 << 20  # 12 MiB each way: past Triton's and our stream and connection windows
    data = _req(HPT, [("x", "FP32", [n], np.arange(n, dtype=np.float32).tobytes())], rid="big")
    small = CASES["small"]
    results = await asyncio.gather(h2_up.infer_bytes("m", data), h2_up.infer_bytes("m", data),
                                   *(h2_up.infer_bytes("m", small) for _ in range(8)))
    expect = await grpc_up.infer_bytes("m", data)
    assert results[0] == results[1] == expect
    assert all(r == results[2] for r in results[2:])
    out = np.frombuffer(service_pb2.ModelInferResponse.FromString(results[0]).raw_output_contents[0], np.float32)
    assert out[-1] == (n - 1) / 2 + 3


async def test_requests_in_flight_together_each_get_their_answer(pair):
    _, h2_up = pair
    datas = [_req(HPT, [("x", "FP32", [2], _f32(i, i + 1))], rid=f"c{i}") for i in range(200)]
    answers = await asyncio.gather(*(h2_up.infer_bytes(HPT, d) for d in datas))
    for i, raw in enumerate(answers):
        resp = service_pb2.ModelInferResponse.FromString(raw)
        assert resp.id == f"c{i}"
        assert np.frombuffer(resp.raw_output_contents[0], np.float32).tolist() == [i / 2 + 3, (i + 1) / 2 + 3]


async def test_deadline_as_grpc_gives_it(pair, monkeypatch):
    grpc_up, h2_up = pair
    small = CASES["small"]
    n = 3 << 20  # 12 MiB: more than a few milliseconds to send and to answer
    big = _req(HPT, [("x", "FP32", [n], bytes(4 * n))], rid="late")
    for up in (h2_up, grpc_up):
        # spent before the call: never sent by h2 (grpc core may race its answer against the
        # deadline; a past deadline is what both give)
        for timeout, data in ((0.0, small), (0.005, big)):
            monkeypatch.setattr(up, "_timeout", lambda stream=False, t=timeout: t)
            kind, message = await _answer(lambda u=up, d=data: u.infer_bytes("m", d))
            if up is grpc_up:  # grpc core's text varies with the moment ("Stream removed (Deadline Exceeded)")
                assert kind in ("ok", ErrorKind.DEADLINE_EXCEEDED), (kind, message)
                continue
            assert (kind, message) == (ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded"), timeout
        monkeypatch.setattr(up, "_timeout", lambda stream=False: 30.0)
        assert (await _answer(lambda u=up: u.infer_bytes("m", small)))[0] == "ok"
    conn = h2_up._h2._conns[0]
    assert not conn.streams and not conn.pending and not conn.closed
    # the deadline Triton is sent (grpc-timeout) is the one the local timer keeps
    assert h2call.timeout_field(0.25).endswith(b"250000u")
    assert h2call.timeout_field(500.0).endswith(b"500000m")


async def test_cancelled_caller_resets_its_stream(pair):
    _, h2_up = pair
    small = CASES["small"]
    assert (await _answer(lambda: h2_up.infer_bytes("m", small)))[0] == "ok"
    conn = h2_up._h2._conns[0]
    written = []
    write = conn.transport.write
    conn.transport.write = lambda b: (written.append(bytes(b)), write(b))
    try:
        n = 3 << 20  # a request still being sent when the caller goes
        big = _req(HPT, [("x", "FP32", [n], bytes(4 * n))], rid="gone")
        for data in (small, big):
            written.clear()
            task = asyncio.ensure_future(h2_up.infer_bytes("m", data))
            await asyncio.sleep(0)
            sid = conn.next_sid - 2
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert h2call.frame(h2call.RST_STREAM, 0, sid, (8).to_bytes(4, "big")) in written
            assert sid not in conn.streams and not conn.pending
    finally:
        conn.transport.write = write
    assert (await _answer(lambda: h2_up.infer_bytes("m", small)))[0] == "ok"
    assert h2_up._h2._conns[0] is conn


async def test_nothing_listening_is_unavailable():
    port = free_port()
    up = TritonUpstream(f"127.0.0.1:{port}", h2=h2call.Channel([("127.0.0.1", port)]))
    await up.connect()
    try:
        with pytest.raises(GatewayError) as err:
            await up.infer_bytes("m", CASES["small"])
        assert err.value.kind is ErrorKind.UNAVAILABLE
    finally:
        await up.close()


def _kill(proc: localtriton.TritonProcess) -> None:
    os.killpg(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(30)
    proc.stop()


async def test_triton_killed_and_restarted(own_triton, tmp_path):  # noqa: F811 - the fixture imported above
    cfg, procs = own_triton
    target = f"{cfg.host}:{cfg.grpc_port}"
    grpc_up, h2_up = _pair(target)
    small = CASES["small"]
    await grpc_up.connect()
    await h2_up.connect()
    try:
        assert (await _answer(lambda: h2_up.infer_bytes("m", small)))[0] == "ok"
        first = h2_up._h2._conns[0]
        n = 3 << 20
        big = _req(HPT, [("x", "FP32", [n], bytes(4 * n))], rid="inflight")
        inflight = [asyncio.ensure_future(h2_up.infer_bytes("m", big)) for _ in range(4)]
        await asyncio.sleep(0.05)
        await asyncio.to_thread(_kill, procs[0])  # Triton dies with calls in flight
        for task in inflight:
            kind, _ = await _answer(lambda t=task: t)
            assert kind in ("ok", ErrorKind.UNAVAILABLE)  # answered before it died, or UNAVAILABLE
        assert first.lost
        for up in (h2_up, grpc_up):  # while it is down: UNAVAILABLE both ways
            assert (await _answer(lambda u=up: u.infer_bytes("m", small)))[0] is ErrorKind.UNAVAILABLE
        procs.append(await asyncio.to_thread(localtriton.start, cfg, ROOT, log_path=tmp_path / "triton-2.log"))
        for _ in range(100):  # each back within grpc's reconnect backoff (2 s at most)
            answers = [await _answer(lambda u=up: u.infer_bytes("m", small)) for up in (h2_up, grpc_up)]
            if all(a[0] == "ok" for a in answers):
                break
            await asyncio.sleep(0.1)
        assert _same(await _answer(lambda: h2_up.infer_bytes("m", small)),
                     await _answer(lambda: grpc_up.infer_bytes("m", small)))
        assert h2_up._h2._conns[0] is not first
    finally:
        await grpc_up.close()
        await h2_up.close()


async def test_the_translating_dialects_call_through_it(triton):
    """TF Serving REST and gRPC and GRPS predicts reach Triton on the h2 connection (the default
    transport), and the fast-path gauge says so."""
    from bench.cases import GRPS_GTENSORS
    from gateway._proto.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    from gateway.observe import metrics
    from tests.contract.test_tfserving_grpc import _float_content, _predict
    from tests.support import http_call, running_worker

    ports = {name: free_port() for name in ("tfserving_rest", "tfserving_grpc", "grps_http", "admin_http")}
    async with running_worker(ports, triton.grpc_target) as (_, ctx):
        assert metrics.FAST_PATH.labels("upstream_h2")._value.get() == 1
        chan = ctx.upstream._h2
        infers = []  # the ModelInfer calls on it (metadata, config and readiness go on it too)
        call = chan.call

        async def counted(data, timeout, blocks=None, metadata=None, cancel=None):
            infers.append(blocks is None or blocks is chan.blocks(MODEL_INFER))
            return await call(data, timeout, blocks, metadata, cancel)

        chan.call = counted
        base = "http://127.0.0.1"
        status, _, body = await asyncio.to_thread(
            http_call, f"{base}:{ports['tfserving_rest']}", "POST", f"/v1/models/{HPT}:predict",
            '{"instances": [1.0, 2.0]}')
        assert status == 200 and json.loads(body) == {"predictions": [3.5, 4.0]}
        assert infers.count(True) == 1
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['tfserving_grpc']}") as tf:
            resp = await prediction_service_pb2_grpc.PredictionServiceStub(tf).Predict(
                _predict(x=_float_content([1.0, 5.0])), timeout=10)
        assert isinstance(resp, predict_pb2.PredictResponse) and list(resp.outputs["y"].float_val) == [3.5, 5.5]
        assert infers.count(True) == 2
        status, _, body = await asyncio.to_thread(
            http_call, f"{base}:{ports['grps_http']}", "POST", "/grps/v1/infer/predict", json.dumps(GRPS_GTENSORS),
            {"Content-Type": "application/json"})
        assert status == 200 and infers.count(True) == 3, body


async def test_triton_calms_a_keepalive_too_eager_and_the_time_doubles(triton):
    """Triton's own keepalive enforcement (its defaults, grpc core's: pings on a connection with
    nothing in flight allowed once in 2 h, two strikes) answers a 0.2 s keepalive with GOAWAY
    ENHANCE_YOUR_CALM "too_many_pings": the time doubles for the next connection, as grpc's does."""
    host, port = upstream_addresses(triton.grpc_target)[0]
    chan = h2call.Channel([(host, port)], keepalive=h2call.Keepalive(0.2, 5.0))
    up = TritonUpstream(triton.grpc_target, h2=chan)
    await up.connect()
    try:
        small = CASES["small"]
        assert (await _answer(lambda: up.infer_bytes("m", small)))[0] == "ok"
        conn = chan._conns[0]
        for _ in range(1000):  # pinged, idle, until Triton has had enough
            if conn.closed:
                break
            await asyncio.sleep(0.02)
        assert conn.closed and conn.keepalive_time == 0.4
        assert (await _answer(lambda: up.infer_bytes("m", small)))[0] == "ok"
        assert chan._conns[0] is not conn and chan._conns[0].keepalive.time == 0.4
    finally:
        await up.close()
