"""The dense reading of image-sized predict bodies (codec.dense_body + dense_inputs, core.densejson)
against the general path (jsonio.loads + parse_predict): for every body the dense reading accepts,
the same arrays, bit for bit; every body it declines is left to the general path."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.core import densejson
from gateway.core.errors import GatewayError
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import codec, jsonio
from gateway.dialects.tfserving.mapping import Signature


def sig(*inputs):
    ins = tuple((n, TensorSpec(n, t, (-1,))) for n, t in inputs)
    return Signature("serving_default", "predict", "m", 0, ins, (("y", TensorSpec("y", "FP32", (-1,))),))


def general(body: bytes, s: Signature):
    doc = jsonio.loads(body)
    return codec.parse_predict(doc, s, codec.may_hold_bools(body))


def dense(body: bytes, s: Signature):
    found = codec.dense_body(body)
    if found is None:
        return None
    inputs = codec.dense_inputs(found[0], s)
    return None if inputs is None else (inputs, found[1])


def same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert a[k].tobytes() == b[k].tobytes()  # bit for bit: -0.0, NaN payloads, rounding


numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.integers(min_value=-(10**15) + 1, max_value=10**15 - 1),
    st.sampled_from([0.0, -0.0, 1e-310, 5e-324, 3.4028235e38, 3.4028236e38, 1e39, 0.1, 16777217.0, 2**53 + 1.0]),
)


@st.composite
def dense_docs(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    flat = draw(st.lists(numbers, min_size=math.prod(shape), max_size=math.prod(shape)))
    nested = np.array(flat, dtype=object).reshape(shape).tolist()
    return draw(st.sampled_from(["instances", "inputs"])), nested


@settings(max_examples=300, deadline=None)
@given(doc=dense_docs(), dtype=st.sampled_from(["FP32", "FP64"]), spaces=st.sampled_from(["", " ", "\n\t "]))
@example(doc=("instances", [1, 2, 3]), dtype="FP32", spaces="")
@example(doc=("instances", [[1.5, -0.0], [1e-45, 7e-46]]), dtype="FP32", spaces="")
def test_dense_reads_what_the_general_path_reads(doc, dtype, spaces):
    key, value = doc
    text = json.dumps({key: value}, indent=1 if spaces else None)
    body = (spaces + text + spaces).encode()
    s = sig(("x", dtype))
    got = dense(body, s)
    assert got is not None, body
    want_inputs, want_row = general(body, s)
    same(got[0], want_inputs)
    assert got[1] == want_row


@pytest.mark.parametrize("body", [
    b'{"instances": [1, true]}', b'{"instances": [1, null]}', b'{"instances": [1, "2"]}',
    b'{"instances": [[1, 2], [3]]}', b'{"instances": [1, [2]]}', b'{"instances": [[1], 2]}',
    b'{"instances": []}', b'{"instances": [[]]}', b'{"instances": [1,]}', b'{"instances": [1 2]}',
    b'{"instances": [1e400]}', b'{"instances": [1.2.3]}', b'{"instances": [01]}', b'{"instances": [NaN]}',
    b'{"instances": [1234567890123456]}', b'{"instances": [-0.5e]}',
    b'{"instances": [1], "signature_name": "s"}', b'{"signature_name": "s", "instances": [1]}',
    b'{"instances": [1]} trailing', b'{"instances": [1]', b'[1, 2]', b'{"instances": {"x": [1]}}',
    b'{"instance": [1]}', b'{"instances": [1], "instances": [2]}',
])
def test_dense_declines_what_it_does_not_read_exactly(body):
    assert codec.dense_body(body) is None


def test_dense_declines_signatures_it_does_not_read():
    values, _ = codec.dense_body(b'{"instances": [1.0, 2.0]}')
    assert codec.dense_inputs(values, sig(("x", "INT32"))) is None
    assert codec.dense_inputs(values, sig(("x", "FP32"), ("z", "FP32"))) is None
    assert codec.dense_inputs(values, sig(("x", "FP16"))) is None  # client dtype FP16: the general path


def test_dense_checks_the_tensor_limit_as_the_general_path_does(monkeypatch):
    from gateway.core import bounded

    monkeypatch.setattr(bounded.LIMITS, "max_tensor_bytes", 8)
    body = b'{"instances": [1.0, 2.0, 3.0]}'
    with pytest.raises(GatewayError) as d:
        dense(body, sig(("x", "FP32")))
    with pytest.raises(GatewayError) as g:
        general(body, sig(("x", "FP32")))
    assert d.value.message == g.value.message and d.value.kind == g.value.kind


def test_dense_leaves_too_deep_documents_to_the_general_path():
    body = b'{"instances": [[[1.0]]]}'
    assert codec.dense_body(body, max_depth=3) is None
    assert codec.dense_body(body, max_depth=4)[0].shape == (1, 1, 1)


def test_densejson_parser_is_reusable_after_a_refused_number():
    assert densejson.dense_array(b"[1e400]", 0) is None
    assert densejson.dense_array(b"[1,2]", 0)[0].tolist() == [1.0, 2.0]
