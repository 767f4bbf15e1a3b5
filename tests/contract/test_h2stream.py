"""ModelStreamInfer as HTTP/2 frames on the loop (h2call.StreamCall, ``upstream.transport: h2``) held
to the grpc.aio stream call against the real Triton: the same stream requests through
``TritonUpstream.stream`` give the same sequence of responses or the same error (kind and text),
for tiny_llm and for the TensorRT-LLM-shaped repository's decoupled models; the request's
half-close does not cut a decoupled model's responses short; a deadline, a closed generator
(Triton cancels the model's request) and a Triton killed mid-stream end only their own call."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from gateway import call as calls
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferRequest, Tensor
from gateway.h2 import client as h2call
from gateway.local import localtriton
from gateway.upstream import TritonUpstream
from tests.contract.test_h2call import _kill, _pair, pair  # noqa: F401 - pair: the fixture (grpc.aio, h2)
from tests.contract.test_triton_restart import own_triton  # noqa: F401 - the fixture: a Triton of the test's own
from tests.contract.test_trtllm_repository import trtllm  # noqa: F401 - the fixture: the TensorRT-LLM-shaped Triton
from tests.support import ROOT

pytestmark = pytest.mark.contract
LONG = "long prompt 12"  # tiny_llm's longest answer: 24 tokens, one each 15 ms


def _req(model: str, rid: str, **values) -> InferRequest:
    tensors = []
    for name, value in values.items():
        if isinstance(value, str):
            tensors.append(Tensor(name, np.array([[value.encode()]], dtype=object), "BYTES"))
        elif isinstance(value, bool):
            tensors.append(Tensor(name, np.array([[value]]), "BOOL"))
        elif isinstance(value, float):
            tensors.append(Tensor(name, np.array([[value]], np.float32), "FP32"))
        elif isinstance(value, list):
            tensors.append(Tensor(name, np.array([value], np.int32), "INT32"))
        else:
            tensors.append(Tensor(name, np.array([[value]], np.int32), "INT32"))
    return InferRequest(model, tensors, id=rid)


def _view(resp) -> tuple:
    return (resp.model, resp.id, resp.final, sorted(
            (t.name, t.datatype, list(t.shape), np.asarray(t.data).tobytes() if t.datatype != "BYTES"
              else [bytes(x) for x in np.asarray(t.data).reshape(-1)]) for t in resp.outputs))
    # (an ensemble's outputs come in the order its steps finish: compared by name)


async def _run(up: TritonUpstream, req: InferRequest) -> tuple:
    """The responses a stream gives, and how it ended ("ok" or the error's kind and text)."""
    got = []
    try:
        async for resp in up.stream(req):
            got.append(_view(resp))
    except GatewayError as err:
        return got, (err.kind, err.message)
    if len(got) > 1 and got[-1][2] and not got[-1][3]:
        # an ensemble ends its stream with an empty final response or marks its last one final,
        # as its steps happen to finish (grpc.aio alike): the one end, said either way
        got[-2:] = [got[-2][:2] + (True,) + got[-2][3:]]
    return got, "ok"


def _copy(req: InferRequest) -> InferRequest:
    return InferRequest(req.model, list(req.inputs), id=req.id)


async def _same_both_ways(ups: tuple, cases: dict[str, InferRequest]) -> None:
    grpc_up, h2_up = ups
    for _ in range(2):  # the second time, Triton's header blocks are indexed ones (remembered)
        for name, req in cases.items():
            via_grpc = await _run(grpc_up, _copy(req))
            via_h2 = await _run(h2_up, _copy(req))
            assert via_h2 == via_grpc, (name, [(i, a, b) for i, (a, b) in enumerate(zip(via_h2[0], via_grpc[0], strict=False))
                                               if a != b][:2], len(via_h2[0]), len(via_grpc[0]), via_h2[1], via_grpc[1])
            assert via_h2[0] or via_h2[1] != "ok", name
    assert len(h2_up._h2._conns[0].streams) == 0


TINY = {
    "streamed": _req("tiny_llm", "s1", text_input="hello there", max_tokens=12, stream=True),
    "one answer": _req("tiny_llm", "s2", text_input="hello there", max_tokens=12),
    "token ids": _req("tiny_llm", "s3", input_ids=[5, 6, 7], input_lengths=3, request_output_len=6, stream=True),
    "no tokens": _req("tiny_llm", "s4", text_input="x", max_tokens=0, stream=True),
    "unknown model": _req("no_such_llm", "e1", text_input="x"),
    "bad input": _req("tiny_llm", "e2", text_input="x", max_tokens=1.5),
    "unknown input": _req("tiny_llm", "e3", text_input="x", nope=1),
    "model error": _req("tiny_llm", "e4", text_input="x", max_tokens=-1, stream=True),
}


async def test_tiny_llm_same_responses_and_errors_as_grpc(pair):  # noqa: F811 - the fixture imported above
    got = await _run(pair[1], _copy(TINY["streamed"]))
    assert got[1] == "ok" and len(got[0]) == 12 and got[0][-1][2]  # every token after the half-close, and the end
    await _same_both_ways(pair, TINY)


async def test_trtllm_repository_same_responses_as_grpc(trtllm):  # noqa: F811 - the fixture imported above
    grpc_up, h2_up = _pair(trtllm.grpc_target)
    await grpc_up.connect()
    await h2_up.connect()
    try:
        ensemble = {"text_input": "what is the weather?", "max_tokens": 16, "exclude_input_in_output": True}
        cases = {
            "ensemble streamed": _req("ensemble", "t1", **ensemble, stream=True),
            "ensemble": _req("ensemble", "t2", **ensemble),
            "tensorrt_llm streamed": _req("tensorrt_llm", "t3", input_ids=[11, 12, 13], input_lengths=3,
                                          request_output_len=8, stream=True),
            "tensorrt_llm bad input": _req("tensorrt_llm", "t4", input_ids=[11], input_lengths=1,
                                           request_output_len=2.5),
        }
        got = await _run(h2_up, _copy(cases["ensemble streamed"]))
        assert got[1] == "ok" and len(got[0]) > 2
        await _same_both_ways((grpc_up, h2_up), cases)
    finally:
        await grpc_up.close()
        await h2_up.close()


async def test_stream_deadline(pair):  # noqa: F811
    for up in pair:
        token = calls.enter(calls.Call("r", "generate", timeout=60.0, stream_timeout=0.1))
        try:
            got, end = await _run(up, _req("tiny_llm", "slow", text_input=LONG, max_tokens=1000, stream=True))
        finally:
            calls.leave(token)
        # grpc core words it "Stream removed (Deadline Exceeded)" when the deadline falls while it
        # reads a message (a loaded machine); h2call always as the deadline itself
        words = ("Deadline Exceeded", "Stream removed (Deadline Exceeded)") if up is pair[0] else ("Deadline Exceeded",)
        assert end[0] is ErrorKind.DEADLINE_EXCEEDED and end[1] in words, end
    assert not pair[1]._h2._conns[0].streams


async def test_closing_the_stream_cancels_the_model_request(own_triton):  # noqa: F811 - the fixture imported above
    # on a Triton of its own: Triton 2.51 can crash on a cancelled request (a race in its gRPC front
    # end, triton-inference-server/server#8034), which must not take the session's Triton with it
    cfg, procs = own_triton
    grpc_up, h2_up = _pair(f"{cfg.host}:{cfg.grpc_port}")
    await h2_up.connect()
    try:
        rid = f"h2-cancel-{time.monotonic_ns()}"
        gen = h2_up.stream(_req("tiny_llm", rid, text_input=LONG, max_tokens=1000, stream=True))
        await gen.__anext__()
        await gen.__anext__()
        conn = h2_up._h2._conns[0]
        written = []
        write = conn.transport.write
        conn.transport.write = lambda b: (written.append(bytes(b)), write(b))
        try:
            sid = conn.next_sid - 2
            await gen.aclose()
            assert h2call.frame(h2call.RST_STREAM, 0, sid, (8).to_bytes(4, "big")) in written
        finally:
            conn.transport.write = write
        assert not conn.streams
        needle = f"tiny_llm: request {rid} cancelled after"
        deadline = time.monotonic() + 10
        while needle not in procs[0].log_tail(400):
            assert time.monotonic() < deadline, "tiny_llm never saw the cancellation:\n" + procs[0].log_tail(20)
            await asyncio.sleep(0.2)
        assert (await _run(h2_up, _copy(TINY["streamed"])))[1] == "ok"  # and the connection goes on
        assert h2_up._h2._conns[0] is conn
    finally:
        await grpc_up.close()
        await h2_up.close()


async def test_triton_killed_mid_stream_is_unavailable(own_triton, tmp_path):  # noqa: F811 - the fixture imported above
    cfg, procs = own_triton
    grpc_up, h2_up = _pair(f"{cfg.host}:{cfg.grpc_port}")
    await grpc_up.connect()
    await h2_up.connect()
    try:
        gens = [up.stream(_req("tiny_llm", f"k{i}", text_input=LONG, max_tokens=1000, stream=True))
                for i, up in enumerate((grpc_up, h2_up))]
        for gen in gens:
            await gen.__anext__()
        await asyncio.to_thread(_kill, procs[0])
        for gen in gens:
            with pytest.raises(GatewayError) as err:
                async for _ in gen:
                    pass
            assert err.value.kind is ErrorKind.UNAVAILABLE
        assert h2_up._h2._conns[0].lost and not h2_up._h2._conns[0].streams
        procs.append(await asyncio.to_thread(localtriton.start, cfg, ROOT, log_path=tmp_path / "triton-2.log"))
        for _ in range(100):  # back within grpc's reconnect backoff
            if (await _run(h2_up, _copy(TINY["streamed"])))[1] == "ok":
                break
            await asyncio.sleep(0.1)
        assert await _run(h2_up, _copy(TINY["streamed"])) == await _run(grpc_up, _copy(TINY["streamed"]))
    finally:
        await grpc_up.close()
        await h2_up.close()
