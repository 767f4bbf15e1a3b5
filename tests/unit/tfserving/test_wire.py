"""A predict straight to ModelInfer bytes (Service._predict_wire) against the same predict through
neutral tensors (InferRequest -> wire.serialize_request, wire.decode_response): over generated
signatures, inputs and Triton answers (the one the metadata promises, and answers of other forms),
both must send Triton the same bytes and give the same outputs, or refuse with the same error."""

from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from gateway.call import Call, enter, leave
from gateway.context import GatewayContext
from gateway.core import datatypes
from gateway.core.errors import GatewayError
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import config
from gateway.dialects.tfserving.mapping import Signature, Target
from gateway.dialects.tfserving.service import Service
from gateway.settings import Settings
from gateway.upstream import TritonUpstream

NUMERIC = ["FP32", "FP64", "INT32", "INT64", "UINT8", "INT8", "BOOL", "FP16"]
TYPES = NUMERIC + ["BYTES"]


class RecordingTriton(TritonUpstream):
    """The real upstream client but for the wire: every ModelInfer's bytes recorded, the answer made
    by ``answer(request message) -> ModelInferResponse`` (or by each of a list of them in turn) and
    handed over as grpc would: as its bytes."""

    def __init__(self, answer):
        super().__init__("127.0.0.1:1")
        self.sent: list[bytes] = []
        self._channel = object()
        answers = answer if isinstance(answer, list) else [answer]

        def answered(data: bytes) -> bytes:
            self.sent.append(bytes(data))
            turn = answers[(len(self.sent) - 1) % len(answers)]
            return turn(service_pb2.ModelInferRequest.FromString(data)).SerializeToString()

        async def model_infer_bytes(data: bytes, timeout: float, **_grpc_kw):
            return answered(data)

        self._model_infer_bytes = model_infer_bytes


def _raw(datatype: str, shape: tuple[int, ...], seed: int) -> bytes:
    n = int(np.prod(shape))
    if datatype == "BYTES":
        return datatypes.encode_bytes(np.array([b"v%d" % (seed + i) for i in range(n)], dtype=object))
    rng = np.random.default_rng(seed)
    size = n * np.dtype(datatypes.by_v2(datatype).numpy).itemsize
    data = rng.integers(0, 256, size, dtype=np.uint8)
    if datatype == "BOOL":
        data = data & 1
    return data.tobytes()


@st.composite
def cases(draw):
    n_in = draw(st.sampled_from([1, 1, 1, 2]))
    mbs = draw(st.sampled_from([0, 8]))
    dims = st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=0, max_size=3).map(tuple)
    ins = tuple((f"a{i}", TensorSpec(f"in{i}", draw(st.sampled_from(TYPES)), draw(dims))) for i in range(n_in))
    outs = tuple((f"o{i}", TensorSpec(f"out{i}", draw(st.sampled_from(TYPES)), draw(dims)))
                 for i in range(draw(st.integers(1, 2))))
    half = draw(st.booleans()) and draw(st.booleans())
    elementwise = draw(st.booleans()) and draw(st.booleans())
    sig = Signature("serving_default", "predict", "m", mbs, ins, outs, elementwise=elementwise, half_as_float=half)
    version = draw(st.sampled_from([None, 3]))
    inputs = {}
    for alias, spec in ins:
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
        v2 = sig.client_dtype(spec)
        if v2 == "BYTES":
            arr = np.array([b"x"] * int(np.prod(shape)), dtype=object).reshape(shape)
        else:
            arr = np.arange(int(np.prod(shape))).reshape(shape).astype(datatypes.by_v2(v2).numpy)
        inputs[alias] = arr
    if draw(st.sampled_from([False] * 9 + [True])):  # a name the signature does not have
        inputs["zz"] = np.zeros(2, np.float32)
    filt = draw(st.sampled_from([(), (), (), ("o0",), ("nope",), ("o0", "o0")]))
    # Triton's answer: as the metadata says (shapes of its choosing), or another form
    form = draw(st.sampled_from(["promised", "promised", "promised", "other_type", "renamed", "reordered",
                                 "short_raw", "bad_size"]))
    batch = draw(st.sampled_from([(1,), (2,), (1, 2), ()]))
    return Target("m", version, sig), inputs, filt, form, batch, draw(st.integers(0, 1000))


def _answer(form: str, batch: tuple[int, ...], seed: int):
    def answer(req: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
        resp = service_pb2.ModelInferResponse(model_name=req.model_name, model_version=req.model_version or "7",
                                              id=req.id)
        names = [o.name for o in req.outputs] or ["out0"]
        for i, name in enumerate(names):
            datatype = "FP32" if form == "other_type" else ("INT32" if i else "FP64")
            resp.outputs.add(name=("x" + name) if form == "renamed" else name, datatype=datatype, shape=batch)
            raw = _raw(datatype, batch, seed + i)
            resp.raw_output_contents.append(raw[:-1] if form == "bad_size" and raw else raw)
        if form == "reordered" and len(resp.outputs) > 1:
            first, second = resp.outputs[0], resp.outputs[1]
            a, b = service_pb2.ModelInferResponse.InferOutputTensor(), service_pb2.ModelInferResponse.InferOutputTensor()
            a.CopyFrom(first)
            b.CopyFrom(second)
            first.CopyFrom(b)
            second.CopyFrom(a)
        if form == "short_raw":
            del resp.raw_output_contents[-1]
        return resp
    return answer


def _answer_from_metadata(batch, seed):
    """Triton answering with the datatypes the metadata declares."""
    def make(sig):
        types = {s.name: s.datatype for _, s in sig.outputs}

        def answer(req):
            resp = service_pb2.ModelInferResponse(model_name=req.model_name, model_version=req.model_version or "7")
            for i, o in enumerate(req.outputs):
                resp.outputs.add(name=o.name, datatype=types[o.name], shape=batch)
                resp.raw_output_contents.append(_raw(types[o.name], batch, seed + i))
            return resp
        return answer
    return make


async def _run(service: Service, target, inputs, filt):
    token = enter(Call("req-1", "predict", 30.0, 600.0))
    try:
        return await service.predict(target, dict(inputs), filt)
    except (GatewayError, KeyError, ValueError) as e:
        return type(e), str(e)
    finally:
        leave(token)


def _same(a, b) -> None:
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], type):
        assert a == b
        return
    (va, oa), (vb, ob) = a, b
    assert va == vb and list(oa) == list(ob)
    for alias in oa:
        (xa, ta), (xb, tb) = oa[alias], ob[alias]
        assert type(xa) is type(xb)  # an unbatched [1] BYTES output is one bytes object, on both paths
        xa, xb = np.asarray(xa), np.asarray(xb)
        assert ta == tb and xa.dtype == xb.dtype and xa.shape == xb.shape
        assert xa.tobytes() == xb.tobytes() if xa.dtype != object else xa.tolist() == xb.tolist()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from([True, True, False]), st.sampled_from(["renamed", "reordered", "other_type"]))
def test_wire_predict_is_the_neutral_predict(case, by_metadata, other):
    """Request by request: the first answer's form is learned (wire.AnswerForm), the second (other
    values) read by it, the third of another form read as any answer, the fourth as the first."""
    target, inputs, filt, form, batch, seed = case

    def answer(turn: int):
        if by_metadata:
            return _answer_from_metadata(batch, seed + turn)(target.signature)
        return _answer(form, batch, seed + turn)
    answers = [answer(0), answer(1), _answer(other, (2, *batch), seed + 2), answer(3)]
    ups = [RecordingTriton(answers), RecordingTriton(answers)]
    services = [Service(GatewayContext(Settings(), up), config.TFServingConfig()) for up in ups]
    services[1]._wire = False  # noqa: SLF001 - the neutral path
    for _ in answers:
        results = [asyncio.run(_run(s, target, inputs, filt)) for s in services]
        assert ups[0].sent == ups[1].sent
        _same(results[0], results[1])


def test_the_common_predict_takes_the_wire():
    """The test above compares something: a plain FP32 predict is planned for the wire (and the
    neutral service is not)."""
    sig = Signature("serving_default", "predict", "m", 0, (("x", TensorSpec("x", "FP32", (-1,))),),
                    (("y", TensorSpec("y", "FP32", (-1,))),))
    up = RecordingTriton(_answer_from_metadata((4,), 1)(sig))
    service = Service(GatewayContext(Settings(), up), config.TFServingConfig())
    version, outs = asyncio.run(_run(service, Target("m", None, sig), {"x": np.ones(4, np.float32)}, ()))
    (plan,) = service._plans.values()  # noqa: SLF001
    assert plan.wire is not None and version == "7" and outs["y"][0].shape == (4,)
    assert service_pb2.ModelInferRequest.FromString(up.sent[0]).id == "req-1"


def test_an_element_wise_predict_takes_the_wire_and_gets_its_shape_back():
    """saved_model_half_plus_three's kind (``elementwise``): the input is sent flat, each output
    comes back in the input's shape, as on the neutral path."""
    sig = Signature("serving_default", "predict", "m", 0, (("x", TensorSpec("x", "FP32", (-1,))),),
                    (("y", TensorSpec("y", "FP32", (-1,))),), elementwise=True)
    up = RecordingTriton(_answer_from_metadata((6,), 1)(sig))
    service = Service(GatewayContext(Settings(), up), config.TFServingConfig())
    version, outs = asyncio.run(_run(service, Target("m", None, sig), {"x": np.ones((2, 3), np.float32)}, ()))
    (plan,) = service._plans.values()  # noqa: SLF001
    assert plan.wire is not None and plan.like == (2, 3)
    assert list(service_pb2.ModelInferRequest.FromString(up.sent[0]).inputs[0].shape) == [6]
    assert outs["y"][0].shape == (2, 3)
