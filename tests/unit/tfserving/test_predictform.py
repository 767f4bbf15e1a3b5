"""TF Serving gRPC Predict requests read by their learned form (gateway/dialects/tfserving/predictform.py):
a request matched by a form another request taught reads as parsing it reads (protocodec), and
requests whose values are not in one place of their bytes teach nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._proto.tensorflow.core.framework import tensor_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2
from gateway.dialects.tfserving import protocodec
from gateway.dialects.tfserving.predictform import Forms

# TF dtype -> (numpy type, the TensorProto field its values may take besides tensor_content)
DTYPES = {types_pb2.DT_FLOAT: (np.float32, "float_val"), types_pb2.DT_DOUBLE: (np.float64, "double_val"),
          types_pb2.DT_INT32: (np.int32, None), types_pb2.DT_INT64: (np.int64, None),
          types_pb2.DT_UINT8: (np.uint8, None), types_pb2.DT_HALF: (np.float16, None)}
names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)


def _request(model, signature, version, alias, dtype, shape, values, content, output_filter):
    r = predict_pb2.PredictRequest()
    r.model_spec.name = model
    if signature:
        r.model_spec.signature_name = signature
    if version is not None:
        r.model_spec.version.value = version
    t = r.inputs[alias]
    t.dtype = dtype
    for d in shape:
        t.tensor_shape.dim.add(size=d)
    if content:
        t.tensor_content = values.tobytes()
    else:
        getattr(t, DTYPES[dtype][1]).extend(values.tolist())
    r.output_filter.extend(output_filter)
    return r.SerializeToString()


def _parsed(data: bytes):
    """What Predict's parsed path reads: (spec, alias, array, V2 type, output filter)."""
    r = predict_pb2.PredictRequest.FromString(data)
    (alias, tp), = r.inputs.items()
    arr, v2 = protocodec.tensor_from_proto(tp, alias)
    return protocodec.spec_from_proto(r.model_spec), alias, arr, v2, tuple(r.output_filter), tp


@st.composite
def request_pairs(draw):
    """Two requests differing only in their values."""
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    content = DTYPES[dtype][1] is None or draw(st.booleans())
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    n = int(np.prod(shape))
    np_type = DTYPES[dtype][0]
    if np.issubdtype(np_type, np.floating):
        elems = st.floats(width=np.finfo(np_type).bits, allow_nan=False)  # sNaN: see predictform's docstring
    else:
        info = np.iinfo(np_type)
        elems = st.integers(int(info.min), int(info.max))
    a, b = (np.array(draw(st.lists(elems, min_size=n, max_size=n)), dtype=np_type) for _ in range(2))
    args = (draw(names), draw(st.sampled_from(["", "serving_default"])), draw(st.none() | st.integers(1, 300)),
            draw(names), dtype, shape)
    output_filter = draw(st.lists(names, max_size=2))
    return (_request(*args, a, content, output_filter), _request(*args, b, content, output_filter))


@settings(max_examples=300, deadline=None)
@given(request_pairs())
def test_a_request_read_by_the_form_another_taught_reads_as_parsed(pair):
    first, second = pair
    forms = Forms()
    spec, alias, arr, v2, output_filter, tp = _parsed(first)
    assert forms.learn(first, tp, spec, alias, arr, v2, output_filter) is not None
    form = forms.match(second)
    assert form is not None
    spec2, alias2, arr2, v2_2, filter2, _ = _parsed(second)
    got = form.values(second)
    assert (form.spec, form.alias, form.v2, form.output_filter) == (spec2, alias2, v2_2, filter2)
    assert got.dtype == arr2.dtype and got.shape == arr2.shape and got.tobytes() == arr2.tobytes()


def _learned(data: bytes):
    forms = Forms()
    spec, alias, arr, v2, output_filter, tp = _parsed(data)
    return forms, forms.learn(data, tp, spec, alias, arr, v2, output_filter)


def test_requests_of_another_length_or_frame_are_not_matched():
    x = np.arange(4, dtype=np.float32)
    forms, form = _learned(_request("m", "", None, "x", types_pb2.DT_FLOAT, (4,), x, False, []))
    assert form is not None
    assert forms.match(_request("m", "", None, "x", types_pb2.DT_FLOAT, (4,), x, True, [])) is None  # tensor_content
    assert forms.match(_request("n", "", None, "x", types_pb2.DT_FLOAT, (4,), x, False, [])) is None  # another model
    assert forms.match(_request("m", "", None, "x", types_pb2.DT_FLOAT, (2, 2), x, False, [])) is None  # shape
    assert forms.match(_request("m", "", None, "x", types_pb2.DT_FLOAT, (5,), np.arange(5, dtype=np.float32),
                                False, [])) is None


def test_values_not_in_one_place_teach_nothing():
    # fewer values than the shape holds (TF's fill rule)
    short = predict_pb2.PredictRequest()
    short.model_spec.name = "m"
    t = short.inputs["x"]
    t.dtype = types_pb2.DT_FLOAT
    t.tensor_shape.dim.add(size=4)
    t.float_val.append(1.0)
    assert _learned(short.SerializeToString())[1] is None
    # the same entry twice (the last one wins when parsed), and the values in two packed runs
    entry = predict_pb2.PredictRequest()
    entry.inputs["x"].CopyFrom(t)
    one = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0])
    one.tensor_shape.dim.add(size=4)
    twice = one.SerializeToString() + tensor_pb2.TensorProto(float_val=[3.0, 4.0]).SerializeToString()
    for data in (short.SerializeToString() + entry.SerializeToString(),
                 predict_pb2.PredictRequest(model_spec=short.model_spec).SerializeToString()
                 + b"\x12" + bytes([len(b"\n\x01x\x12" + bytes([len(twice)]) + twice)]) + b"\n\x01x\x12"
                 + bytes([len(twice)]) + twice):
        spec, alias, arr, v2, output_filter, tp = _parsed(data)
        assert arr.size == 4
        assert Forms().learn(data, tp, spec, alias, arr, v2, output_filter) is None
    # unpacked floats (a tag before each value)
    unpacked = b"".join(b"\x2d" + np.float32(v).tobytes() for v in (1, 2, 3, 4))
    tensor = b"\x08\x01\x12\x04\x12\x02\x08\x04" + unpacked  # dtype DT_FLOAT, shape [4], then the values
    data = b"\x0a\x03\x0a\x01m" + b"\x12" + bytes([5 + len(tensor)]) + b"\n\x01x\x12" + bytes([len(tensor)]) + tensor
    spec, alias, arr, v2, output_filter, tp = _parsed(data)
    assert arr.tolist() == [1, 2, 3, 4]
    assert Forms().learn(data, tp, spec, alias, arr, v2, output_filter) is None


def test_forms_are_bounded():
    forms = Forms()
    for n in range(1, 600):
        data = _request("m", "", None, "x", types_pb2.DT_FLOAT, (n,), np.zeros(n, dtype=np.float32), False, [])
        spec, alias, arr, v2, output_filter, tp = _parsed(data)
        forms.learn(data, tp, spec, alias, arr, v2, output_filter)
    assert len(forms._by_size) <= 256
    for i in range(10):  # one length, many forms: the newest few are kept
        data = _request(f"m{i}", "", None, "x", types_pb2.DT_FLOAT, (1,), np.zeros(1, np.float32), False, [])
        spec, alias, arr, v2, output_filter, tp = _parsed(data)
        forms.learn(data, tp, spec, alias, arr, v2, output_filter)
    assert len(forms._by_size[len(data)]) == 4 and forms.match(data).spec.name == "m9"
