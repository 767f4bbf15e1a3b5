"""The plain gtensors path (gateway/dialects/grps/gtensors.py, plans.py, answer.py) held to the general one.

For generated bodies, ``gtensors.tensors`` either declines (None) or gives the request the general path
(``codec.message_from_json`` + ``mapping.to_request``) gives: the same ModelInfer wire bytes, or the
same error. For generated Triton answers, ``answer.write`` either declines or writes the bytes of
``codec.message_to_json(mapping.from_response(...))``, pretty and compact. And over a fake Triton,
``GrpsService.predict_plain`` answers what ``predict`` + the general writer answer.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gateway.context import GatewayContext
from gateway.core import datatypes
from gateway.core.bounded import LIMITS
from gateway.core.errors import GatewayError
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.grps import answer, codec, config, gtensors, mapping, plans
from gateway.dialects.grps import service as service_module
from gateway.dialects.grps.service import GrpsService
from gateway.settings import Settings
from gateway.upstream.wire import decode_response, serialize_request
from tests.fakes import FakeUpstream

# one input per GRPS type (and one the request may not name), as grps_echo has; a required one too
_GRPS_ROWS = [r for r in datatypes.TABLE if r.grps_name is not None]
INPUTS = tuple(TensorSpec(f"in_{r.v2.lower()}", r.v2, (-1,), True) for r in _GRPS_ROWS)
META = ModelMetadata("echo", ("1",), "python", INPUTS + (TensorSpec("max_tokens", "INT32", (1,), True),),
                     tuple(TensorSpec(f"out_{r.v2.lower()}", r.v2, (-1,)) for r in datatypes.TABLE))
STRICT = ModelMetadata("strict", ("1",), "python", INPUTS[:3] + (TensorSpec("need", "FP32", (-1,)),), ())
CFG = config.GrpsSettings()
BENCH_BODY = {"gtensors": {"tensors": [  # bench/cases.py GRPS_GTENSORS
    {"name": "in1", "dtype": "DT_INT32", "shape": [3, 2], "flat_int32": [1, 2, 3, 4, 5, 6]},
    {"name": "in2", "dtype": "DT_FLOAT64", "shape": [3, 3], "flat_double": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]},
]}}
ECHO = ModelMetadata("grps_echo", ("1",), "python",
                     (TensorSpec("in1", "INT32", (-1, -1), True), TensorSpec("in2", "FP64", (-1, -1), True)),
                     (TensorSpec("out1", "INT32", (-1, -1)), TensorSpec("out2", "FP64", (-1, -1))))


def _outcome(fn):
    try:
        return "ok", fn()
    except GatewayError as e:
        return "error", (e.kind, e.message, type(e))


def _general_request(doc: dict, meta: ModelMetadata):
    def run():
        msg, nd = codec.message_from_json(copy.deepcopy(doc))
        target = mapping.resolve(msg.model, CFG)
        return serialize_request(mapping.to_request(msg, nd, meta, target, CFG, False))
    return _outcome(run)


def _plain_request(doc: dict, meta: ModelMetadata):
    before = copy.deepcopy(doc)
    found = gtensors.tensors(doc)
    assert doc == before  # the general path may still need the body as it came
    if found is None:
        return None
    model, inputs = found

    def run():
        target = mapping.resolve(model, CFG)
        planned = plans.make(inputs, meta, target, CFG, None)  # refuses as gtensors_request does
        req = mapping.gtensors_request(list(inputs), meta, target, CFG)
        req.id = "req-7"
        if planned is not None:  # the plan's bytes are the general request's, id included
            assert planned.request(inputs).write("req-7") == serialize_request(req)
        req.id = ""
        return serialize_request(req)
    return _outcome(run)


# -- requests -------------------------------------------------------------------------------------
_NAMES = st.sampled_from([r.grps_name for r in _GRPS_ROWS] + ["DT_INVALID", "DT_BOOL", "dt_int32", "FLOAT"])
_FLAT_KEYS = [f.name for f in codec.grps_pb2.GenericTensor.DESCRIPTOR.fields if f.name.startswith("flat_")]
_ANY_INT = st.one_of(st.integers(-300, 300), st.integers(-(2**65), 2**65),
                     st.sampled_from([-(2**31), 2**31 - 1, 2**31, 2**32 - 1, 2**32, -(2**63), 2**63 - 1, 2**63,
                                      2**64 - 1, 2**64, 2**53 + 1, 2**1100, 65504, 65520]))
_ANY_FLOAT = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(width=32),
                       st.floats(width=16), st.sampled_from([3.4028235e38, 3.4028236e38, 3.5e38, 1e-45, 5e-324,
                                                             -0.0, 65504.0, 65520.0, 1e308]))
_VALUE = st.one_of(_ANY_INT, _ANY_FLOAT, st.booleans(), st.sampled_from(["NaN", "1", None, [1]]))


def _rare(draw, n: int = 12) -> bool:
    """A perturbation, once in ``n`` draws: most generated bodies stay plain, so the fast path runs."""
    return draw(st.integers(0, n - 1)) == 0


def _values_of(row) -> st.SearchStrategy:
    """Values a client plausibly sends for ``row`` (mostly valid, at and past its edges sometimes)."""
    if row.numpy.kind in "iu":
        info = np.iinfo(row.numpy)
        good = st.integers(int(info.min), int(info.max))
        edges = st.sampled_from([int(info.min), int(info.max), int(info.min) - 1, int(info.max) + 1])
        return st.one_of(*[good] * 12, edges)
    width = {"FP16": 16, "FP32": 32}.get(row.v2, 64)
    good = st.floats(allow_nan=False, allow_infinity=False, width=width)
    near = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**70), 2**70),
                     st.floats(-1e6, 1e6))
    return st.one_of(*[good] * 6, near, st.integers(-1000, 1000))


@st.composite
def _tensor(draw):
    row = draw(st.sampled_from([r for r in _GRPS_ROWS if not r.is_bytes]))
    dtype, key = row.grps_name, codec.flat_field(row)
    if key == "flat_float64" and draw(st.booleans()):
        key = "flat_double"
    if _rare(draw):
        dtype = draw(_NAMES)
    if _rare(draw):
        key = draw(st.sampled_from(_FLAT_KEYS + ["flatInt32", "flatFloat64"]))
    element = _values_of(row) if not _rare(draw) else _VALUE
    low, high = draw(st.sampled_from([(0, 4), (0, 4), (33, 40)]))  # numpy checks lists past 32 values
    values = draw(st.lists(element, min_size=low, max_size=high))
    if _rare(draw) and values:
        values[draw(st.integers(0, len(values) - 1))] = draw(st.one_of(_VALUE, _ANY_INT, _ANY_FLOAT))
    name = f"in_{row.v2.lower()}"
    if _rare(draw):
        name = draw(st.sampled_from(["in_int32", "in_fp64", "", "nope", "need", "x" * 1100]))
    t = {"name": name, "dtype": dtype, key: values}
    shape = draw(st.sampled_from(["exact"] * 4 + ["none"] * 2 + ["empty", "zero"]
                                 + (["wrong", "weird"] if _rare(draw, 4) else [])))
    if shape == "exact":
        t["shape"] = [len(values)] if len(values) % 2 else [2, len(values) // 2]
    elif shape == "empty":
        t["shape"] = []
    elif shape == "wrong":
        t["shape"] = [len(values) + 1]
    elif shape == "zero":
        t["shape"] = [0, 3] if not values else [len(values), 1]
    elif shape == "weird":
        t["shape"] = draw(st.sampled_from([[-1], [True], [2**32], [0, 2**32], [1.0], "3", None]))
    if _rare(draw, 10):
        t[draw(st.sampled_from(["extra", "flat_string", "flat_int8", "flatFloat32", "shape", "name", "dtype"]))] = \
            draw(st.one_of(_VALUE, st.lists(_VALUE, max_size=2)))
    if _rare(draw, 30):
        return draw(st.sampled_from([["not a dict"], {"name": "in_int32", "flat_int32": [1]}]))
    return t


@st.composite
def _doc(draw):
    doc = {"gtensors": {"tensors": draw(st.lists(_tensor(), min_size=0 if _rare(draw) else 1, max_size=3))}}
    if draw(st.booleans()):
        doc["model"] = draw(st.sampled_from(["echo-1", "echo-1", ""] + ([7, None, "m" * 1100] if _rare(draw, 4) else [])))
    extra = draw(st.integers(0, 40))
    if extra == 0:
        doc["gtensors"]["extra"] = 1
    elif extra == 1:
        doc["str_data"] = "x"
    elif extra == 2:
        doc["unknown"] = 1
    elif extra == 3:
        doc["gtensors"] = draw(st.sampled_from([[], None, {"tensors": {}}, {"tensors": None}, {}]))
    return doc


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_doc(), st.sampled_from([META] * 4 + [STRICT]))
@example(BENCH_BODY, ECHO)
def test_plain_request_is_the_general_request_or_declines(doc, meta):
    fast = _plain_request(doc, meta)
    if fast is not None:
        assert fast == _general_request(doc, meta)


def test_plain_request_takes_the_common_bodies():
    assert _plain_request(BENCH_BODY, ECHO) == _general_request(BENCH_BODY, ECHO)
    assert _plain_request(BENCH_BODY, ECHO)[0] == "ok"
    for row in _GRPS_ROWS:
        if row.is_bytes:
            continue
        doc = {"model": "echo-1", "gtensors": {"tensors": [
            {"name": f"in_{row.v2.lower()}", "dtype": row.grps_name, "shape": [2], codec.flat_field(row): [1, 2]}]}}
        assert _plain_request(doc, META) == _general_request(doc, META)
        assert _plain_request(doc, META)[0] == "ok", row.v2
    # a double between two float16 values, rounded to float32 first (as protobuf's float field does)
    # lands on their midpoint, then on the even one: not the float16 nearest the double
    tie = 1 + 2**-11 + 2**-40
    doc = {"gtensors": {"tensors": [{"name": "in_fp16", "dtype": "DT_FLOAT16", "flat_float16": [tie, -tie]}]}}
    assert _plain_request(doc, META) == _general_request(doc, META)
    # the general path's errors once the tensors are read: unknown input, wrong type, missing input
    for meta, name in ((META, "nope"), (META, "in_fp32"), (STRICT, "in_uint8")):
        doc = {"gtensors": {"tensors": [{"name": name, "dtype": "DT_UINT8", "flat_uint8": [1]}]}}
        fast = _plain_request(doc, meta)
        assert fast[0] == "error" and fast == _general_request(doc, meta)


@pytest.mark.parametrize("row", [r for r in _GRPS_ROWS if not r.is_bytes], ids=lambda r: r.v2)
@pytest.mark.parametrize("length", [1, 40])  # short lists are checked value by value, long ones by numpy
def test_plain_request_at_the_edges_of_each_type(row, length):
    if row.numpy.kind in "iu":
        info = np.iinfo(row.numpy)
        edges = [int(info.min) - 1, int(info.min), int(info.max), int(info.max) + 1, 2**64, True, 1.0, "1"]
    else:
        top = float(np.finfo(np.float32).max)
        edges = [top, np.nextafter(top, np.inf), -top * 2, 2**128, 2**1024, 1e308, float("nan"), float("inf"),
                 5e-324, 1e-45, 65520.0, 65519.99, True, "NaN", None]
    for edge in edges:
        doc = {"gtensors": {"tensors": [{"name": f"in_{row.v2.lower()}", "dtype": row.grps_name,
                                         codec.flat_field(row): [0] * (length - 1) + [edge]}]}}
        fast = _plain_request(doc, META)
        assert fast is None or fast == _general_request(doc, META), edge


@pytest.mark.parametrize("tensor", [
    {"name": "in_int32", "dtype": "DT_INT32", "shape": [0, 2**32], "flat_int32": []},
    {"name": "in_int32", "dtype": "DT_INT32", "shape": [1], "flat_int32": [1], "flat_int8": ["x"]},
    {"name": "in_int32", "dtype": "DT_INT32", "flat_int32": [1], "flatInt32": [2]},
    {"name": "in_fp64", "dtype": "DT_FLOAT64", "flat_double": [1], "flat_float64": [2]},
    {"name": "in_int32", "dtype": "DT_INT32", "shape": None, "flat_int32": [1]},
])
def test_plain_request_declines_what_protobuf_reads_otherwise(tensor):
    doc = {"gtensors": {"tensors": [tensor]}}
    assert _plain_request(doc, META) is None


def test_plain_request_declines_past_the_tensor_limit(monkeypatch):
    doc = {"gtensors": {"tensors": [{"name": "in_fp64", "dtype": "DT_FLOAT64", "flat_float64": [1.0] * 4}]}}
    monkeypatch.setattr(LIMITS, "max_tensor_bytes", 16)
    assert gtensors.tensors(doc) is None and _general_request(doc, META)[0] == "error"
    monkeypatch.setattr(LIMITS, "max_tensor_bytes", 32)
    assert gtensors.tensors(doc) is not None


# -- answers --------------------------------------------------------------------------------------
_OUT_NAMES = st.sampled_from([f"out_{r.v2.lower()}" for r in datatypes.TABLE] + ["", "zz", 'q"\\\u00e9\u2028\x01'])


@st.composite
def _output(draw):
    row = draw(st.sampled_from(datatypes.TABLE))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if row.is_bytes:
        data = np.array(draw(st.lists(st.binary(max_size=4), min_size=math.prod(shape), max_size=math.prod(shape))),
                        dtype=object).reshape(shape) if math.prod(shape) else np.empty(shape, dtype=object)
    elif row.v2 == "BF16":  # hypothesis draws no bfloat16: float32 values cast
        data = draw(hnp.arrays(np.float32, shape)).astype(row.numpy)
    else:
        data = draw(hnp.arrays(row.numpy, shape))
    return Tensor(draw(_OUT_NAMES), data, row.v2)


def _general_answer(resp, meta, pretty):
    def run():
        msg, _ = mapping.from_response(resp, "gtensors", meta, mapping.ModelRule())
        return codec.message_to_json(msg, pretty)
    return _outcome(run)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_output(), max_size=3), st.booleans())
def test_plain_answer_is_the_general_answer_or_declines(outputs, pretty):
    resp = InferResponse("echo", "1", outputs)
    fast = answer.write(resp, META, pretty)
    numeric = all(t.datatype in answer._ANSWER and t.name for t in outputs)
    assert (fast is not None) == (numeric and bool(outputs))
    if fast is not None:
        assert ("ok", fast) == _general_answer(resp, META, pretty)


def test_plain_answer_floats_and_order():
    outs = [Tensor("out_fp64", np.array([[0.1, -0.0], [1e300, np.nan]])),
            Tensor("zz", np.array([1.5, np.inf, 1e-45, 3.4028235e38], dtype=np.float32)),
            Tensor("out_fp16", np.array([65504, -np.inf, 6e-8], dtype=np.float16)),
            Tensor("out_int64", np.array([-(2**63), 2**63 - 1])),
            Tensor("out_uint8", np.array([[255]], dtype=np.uint8)),
            Tensor("out_int32", np.zeros((0, 2), dtype=np.int32))]
    resp = InferResponse("echo", "1", outs)
    for pretty in (True, False):
        assert ("ok", answer.write(resp, META, pretty)) == _general_answer(resp, META, pretty)
    text = answer.write(resp, META, False)
    assert text.index(b'"zz"') > text.index(b'"out_int32"')  # an output the metadata does not list: last


# -- the service ----------------------------------------------------------------------------------
def _echo(req):
    return InferResponse(req.model, "1", [Tensor("out" + t.name[2:], t.data, t.datatype) for t in req.inputs])


class _Cached(FakeUpstream):
    """Metadata as the real upstream's cache serves it while fresh (``cached_metadata``, no call)."""

    def cached_metadata(self, model, version=""):
        return self.metas.get(model)


@pytest.mark.parametrize("doc", [
    BENCH_BODY,
    {"model": "grps_echo-1", **BENCH_BODY},
    {"model": "nope-1", **BENCH_BODY},
    {"model": "x" * 2000, **BENCH_BODY},
    {"gtensors": {"tensors": [{"name": "in3", "dtype": "DT_INT32", "flat_int32": [1]}]}},
    {"gtensors": {"tensors": [{"name": "in2", "dtype": "DT_INT32", "flat_int32": [1]}]}},
])
@pytest.mark.parametrize("pretty", [True, False])
@pytest.mark.parametrize("upstream", [FakeUpstream, _Cached])
async def test_predict_plain_answers_as_predict(doc, pretty, upstream):
    def service():
        cfg = config.GrpsSettings(pretty_json=pretty)
        return GrpsService(GatewayContext(Settings(), upstream(metas=[ECHO], infer=_echo)), cfg)

    async def general():
        svc = service()
        msg, nd = codec.message_from_json(orjson.loads(orjson.dumps(doc)))
        out, _ = await svc.predict(msg, nd)
        return codec.message_to_json(out, pretty), svc.monitor.series("*qps[grps_echo-1]") is not None

    async def fast(svc):
        model, inputs = gtensors.tensors(doc)
        return await svc.predict_plain(model, inputs), svc.monitor.series("*qps[grps_echo-1]") is not None

    async def outcome(fn, *args):
        try:
            return "ok", await fn(*args)
        except GatewayError as e:
            return "error", (e.kind, e.message, type(e))

    expected, svc = await outcome(general), service()
    for _ in range(3):  # the plan made, its answer's form learned, then read by it (or refused every time)
        assert await outcome(fast, svc) == expected


def _answers(answer, shared=None) -> FakeUpstream:
    """Triton's answers to the echo as a test scripts them; ``shared_from`` as given."""
    upstream = FakeUpstream(metas=[ECHO], infer=answer)
    upstream.shared = shared
    return upstream


async def test_predict_plain_reads_answers_of_another_form_as_the_general_path(monkeypatch):
    """The plan learns the first answer's outputs; an answer with other names, order, types or
    shapes is decoded as any other, and the text is the general writer's each time."""
    forms = [
        lambda req: [Tensor("out1", req.inputs[0].data, "INT32"), Tensor("out2", req.inputs[1].data, "FP64")],
        lambda req: [Tensor("out2", req.inputs[1].data, "FP64"), Tensor("out1", req.inputs[0].data, "INT32")],
        lambda req: [Tensor("out1", req.inputs[0].data.reshape(-1), "INT32"), Tensor("out2", req.inputs[1].data, "FP64")],
        lambda req: [Tensor("out1", req.inputs[0].data.astype(np.int64), "INT64")],
        lambda req: [Tensor("out1", req.inputs[0].data, "INT32"), Tensor("zz", np.array([b"a"], dtype=object), "BYTES")],
        lambda req: [Tensor("out1", req.inputs[0].data, "INT32"), Tensor("out2", req.inputs[1].data, "FP64")],
    ]
    sequence = [0, 0, 1, 1, 2, 0, 3, 0, 4, 0, 0, 5, 1]
    turn = (forms[i] for i in sequence)
    current_form = []

    def answer(req):
        form = next(turn)
        current_form[:] = [form]
        return InferResponse(req.model, "1", form(req))

    decoded = []

    def decode(msg, raws=None, views=False):
        decoded.append(1)
        return decode_response(msg, raws, views)

    monkeypatch.setattr(service_module.wire, "decode_response", decode)
    upstream = _answers(answer)
    svc = GrpsService(GatewayContext(Settings(), upstream), config.GrpsSettings())
    for _ in sequence:
        model, inputs = gtensors.tensors(BENCH_BODY)
        text = await svc.predict_plain(model, inputs)
        msg, nd = codec.message_from_json(orjson.loads(orjson.dumps(BENCH_BODY)))
        req = mapping.to_request(msg, nd, ECHO, mapping.resolve("", svc.cfg), svc.cfg, False)
        general, _ = mapping.from_response(InferResponse("grps_echo", "1", current_form[0](req)), "gtensors", ECHO,
                                           mapping.resolve("", svc.cfg).rule)
        assert text == codec.message_to_json(general, svc.cfg.pretty_json)
    assert upstream.wired == len(sequence)
    # decoded (and learned): each answer whose form (outputs' names, types, shapes and order) is not
    # the last one learned; an answer with a BYTES output is decoded, and nothing is learned from it
    assert len(decoded) == 9  # 0, 1, 2, 0, 3, 0, 4, 0, the last 1; the second 0, the second 1, 0 after 0, 5


async def test_predict_plain_leaves_inputs_for_shared_memory_to_the_general_path():
    upstream = _answers(_echo, shared=48)  # in2's 9 doubles (72 bytes) would go through shared memory
    svc = GrpsService(GatewayContext(Settings(), upstream), config.GrpsSettings())
    model, inputs = gtensors.tensors(BENCH_BODY)
    text = await svc.predict_plain(model, inputs)
    assert upstream.wired == 0 and len(upstream.requests) == 1  # Upstream.infer, not the planned bytes
    assert b'"out2"' in text
    upstream.shared = 1 << 20
    svc = GrpsService(GatewayContext(Settings(), upstream), config.GrpsSettings())
    assert await svc.predict_plain(*gtensors.tensors(BENCH_BODY)) == text
    assert upstream.wired == 1
