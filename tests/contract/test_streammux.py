"""The multiplexed path (gateway/upstream/streammux.py) held to the unary path against the real
Triton: the same requests, as wire bytes, give the same answer bytes or the same error (kind and
text); a deadline, a caller that goes away and a stream that breaks end only their own requests."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.errors import ErrorKind, GatewayError
from gateway.upstream import TritonUpstream, streammux

pytestmark = pytest.mark.contract


def _req(model: str, inputs, *, version: str = "", rid: str = "d1", outputs=(), raw_extra: bytes | None = None,
         params: dict | None = None) -> bytes:
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=rid)
    for name, datatype, shape, data in inputs:
        msg.inputs.add(name=name, datatype=datatype, shape=shape)
        msg.raw_input_contents.append(data)
    for name in outputs:
        msg.outputs.add(name=name)
    if raw_extra is not None:
        msg.raw_input_contents.append(raw_extra)
    for k, v in (params or {}).items():
        msg.parameters[k].string_param = v
    return msg.SerializeToString()


def _f32(*v) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _text(s: bytes) -> bytes:
    return len(s).to_bytes(4, "little") + s


HPT = "saved_model_half_plus_three"
CASES = {
    "small": _req(HPT, [("x", "FP32", [4], _f32(1, 2, 5, 7))]),
    "no id of Triton's own words": _req(HPT, [("x", "FP32", [4], _f32(1, 2))], rid="d2"),
    "version": _req("half_plus_two", [("x", "FP32", [3], _f32(1, 2, 3))], version="2"),
    "unknown version": _req("half_plus_two", [("x", "FP32", [1], _f32(1))], version="9"),
    "ensemble": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"abc")), ("signal", "FP32", [1, 4], _f32(1, 2, 3, 4)),
                                      ("count", "INT32", [1, 1], np.int32(3).tobytes())]),
    "requested output": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"x")), ("signal", "FP32", [1, 4], _f32(1, 2, 3, 4)),
                                              ("count", "INT32", [1, 1], np.int32(1).tobytes())], outputs=["total"]),
    "unknown output": _req(HPT, [("x", "FP32", [1], _f32(1))], outputs=["nope"]),
    "grps bytes": _req("grps_echo", [("text", "BYTES", [1], _text(b"hello"))]),
    "unknown model": _req("no_such_model", [("x", "FP32", [1], _f32(1))]),
    "wrong input name": _req(HPT, [("y", "FP32", [1], _f32(1))]),
    "wrong datatype": _req(HPT, [("x", "INT32", [1], np.int32(1).tobytes())]),
    "shape and data disagree": _req(HPT, [("x", "FP32", [4], _f32(1))]),
    "missing input": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"x"))]),
    "extra raw contents": _req(HPT, [("x", "FP32", [1], _f32(1))], raw_extra=b"\0\0\0\0"),
    "batch too large": _req("multi_tensor", [("tag", "BYTES", [99, 1], _text(b"x") * 99),
                                             ("signal", "FP32", [99, 4], _f32(*range(396))),
                                             ("count", "INT32", [99, 1], np.zeros(99, np.int32).tobytes())]),
    "bad parameter": _req(HPT, [("x", "FP32", [1], _f32(1))], params={"priority": "high"}),
}


async def _answer(fn):
    try:
        return "ok", await fn()
    except GatewayError as err:
        return err.kind, err.message


def _same(a: tuple, b: tuple) -> bool:
    """Equal answers: the same bytes, but for the order of the ``parameters`` map's entries, which
    protobuf leaves open (an ensemble's answer has several); the same error."""
    if a[0] != "ok" or b[0] != "ok":
        return a == b
    x, y = (service_pb2.ModelInferResponse.FromString(v[1]) for v in (a, b))
    if x.parameters:
        return x == y and len(a[1]) == len(b[1])
    return a[1] == b[1]


@pytest.fixture
async def upstream(triton):
    up = TritonUpstream(triton.grpc_target, stream_mux=(2, 1 << 20))
    await up.connect()
    yield up
    await up.close()


async def test_same_answers_and_errors_as_unary(upstream):
    mux = upstream._mux
    for name, data in CASES.items():
        route = mux.route(data)
        assert route is not None, name
        streamed = await _answer(lambda d=data, r=route: mux.infer(r, d, 30))
        unary = await _answer(lambda d=data: upstream.infer_bytes("m", d))  # "m": not known plain, unary
        assert _same(streamed, unary), name  # the answer, or the error's kind and Triton's text
    # and through infer_bytes either way (client._translate, metrics)
    for name, data in CASES.items():
        async def via_unary(d=data):
            upstream._plain.clear()
            return await upstream.infer_bytes("m", d)

        async def via_mux(d=data):
            upstream._plain["m"] = True
            return await upstream.infer_bytes("m", d)

        assert _same(await _answer(via_mux), await _answer(via_unary)), name


async def test_requests_in_flight_together_each_get_their_answer(upstream):
    datas = [_req(HPT, [("x", "FP32", [2], _f32(i, i + 1))], rid=f"c{i}") for i in range(64)]
    upstream._plain[HPT] = True
    answers = await asyncio.gather(*(upstream.infer_bytes(HPT, d) for d in datas))
    for i, raw in enumerate(answers):
        resp = service_pb2.ModelInferResponse.FromString(raw)
        assert resp.id == f"c{i}"
        assert np.frombuffer(resp.raw_output_contents[0], np.float32).tolist() == [i / 2 + 3, (i + 1) / 2 + 3]
    assert all(lane is not None and not lane.broken for lane in upstream._mux._lanes)


async def test_which_requests_stay_unary(upstream):
    mux = upstream._mux
    small = CASES["small"]
    assert mux.route(_req(HPT, [("x", "FP32", [1], _f32(1))], rid="")) is None  # no id to match the answer by
    assert mux.route(small + b"\x12" * 0) is not None
    big = _req(HPT, [("x", "FP32", [300_000], _f32(*range(300_000)))])
    assert mux.route(big) is None  # over max_bytes
    assert mux.route(_req(HPT, [("x", "FP32", [1], _f32(1))], params={"shared_memory_region": "r"})) is None
    # the same id in flight on the chosen stream: unary
    route = mux.route(small)
    task = asyncio.ensure_future(mux.infer(route, small, 30))
    await asyncio.sleep(0)
    i, key = route
    for _ in range(len(mux._lanes) - 1):
        next(mux._turn)
    assert mux.route(small) is None
    await task
    # a decoupled model (one request, many answers) and an unknown one stay unary
    meta = await upstream.model_metadata("tiny_llm")
    assert meta.decoupled and upstream._plain["tiny_llm"] is False
    await upstream.model_metadata(HPT)
    assert upstream._plain[HPT] is True


async def test_deadline_and_cancel_end_only_their_request(upstream):
    mux = upstream._mux
    small = CASES["small"]
    with pytest.raises(GatewayError) as late:
        await mux.infer(mux.route(small), small, 0.0)
    assert late.value.kind is ErrorKind.DEADLINE_EXCEEDED
    task = asyncio.ensure_future(mux.infer(mux.route(small), small, 30))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for lane in mux._lanes:
        assert lane is None or not lane.waiting
    assert (await _answer(lambda: mux.infer(mux.route(small), small, 30)))[0] == "ok"


async def test_broken_stream_fails_its_requests_unavailable_then_reopens(upstream):
    mux = upstream._mux
    small = CASES["small"]
    route = mux.route(small)
    task = asyncio.ensure_future(mux.infer(route, small, 30))
    await asyncio.sleep(0)
    lane = mux._lanes[route[0]]
    lane.call.cancel()  # as a connection lost: the stream ends under the request
    with pytest.raises(GatewayError) as broke:
        await task
    assert broke.value.kind is ErrorKind.UNAVAILABLE and broke.value.message == streammux.BROKEN
    assert lane.broken
    for _ in range(len(mux._lanes)):
        assert (await _answer(lambda: mux.infer(mux.route(small), small, 30)))[0] == "ok"
    assert mux._lanes[route[0]] is not lane
