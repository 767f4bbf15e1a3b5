"""V2 REST pieces without Triton, derived from Triton's sources (server src/http_server.cc, core
src/infer_request.cc ``Normalize``, server src/common.cc ``GetElementCount``, shared_memory_manager.cc
``GetStatus``): the raw-input mode's shape rules and words, shapes as Triton holds them, the
shared-memory status document. tests/contract/test_v2_http_differential.py compares the whole
answers with Triton's own HTTP."""

from __future__ import annotations

import struct

import pytest
from tritonclient.grpc import service_pb2

from gateway.core.errors import GatewayError
from gateway.core.tensors import ModelMetadata, TensorSpec
from gateway.dialects.v2 import documents, jsontensor, rawinput

PREFIX = "[request id: <id_unknown>] "


def _meta(*inputs: tuple[str, str, tuple], max_batch_size: int = 0) -> ModelMetadata:
    """Metadata as Triton answers it: a batching model's shapes start with -1."""
    lead = (-1,) if max_batch_size else ()
    return ModelMetadata("m", ("1",), "python", tuple(TensorSpec(n, t, lead + dims) for n, t, dims in inputs), (),
                         max_batch_size=max_batch_size)


@pytest.mark.parametrize("inputs, batch, size, shape", [
    ((("x", "FP32", (-1,)),), 0, 12, [3]),
    ((("x", "FP32", (-1,)),), 0, 0, [0]),
    ((("x", "FP32", (-1,)),), 0, 13, None),  # 3 elements (integer division), 12 bytes expected
    ((("x", "INT16", (3,)),), 8, 6, [1, 3]),  # a batching model: [1] first
    ((("x", "FP64", (2, -1)),), 4, 32, [1, 2, 2]),
    ((("t", "BYTES", (1,)),), 8, 5, [1, 1]),
    ((("t", "BYTES", (1,)),), 0, 0, [1]),
])
def test_raw_input_shape_from_the_configuration(inputs, batch, size, shape):
    meta = _meta(*inputs, max_batch_size=batch)
    if shape is not None:
        assert rawinput.shape(meta, "m", size) == shape
        return
    with pytest.raises(GatewayError) as err:
        rawinput.shape(meta, "m", size)
    assert err.value.message == (f"{PREFIX}input byte size mismatch for input 'raw_input' for model 'm'. "
                                 "Expected 12, got 13")


@pytest.mark.parametrize("inputs, words", [
    ((("a", "FP32", (-1,)), ("b", "FP32", (-1,))),
     "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model configuration"),
    ((("g", "FP32", (-1, -1)),),
     "The shape of the raw input 'g' can not be deduced because there are more than one variable-sized dimension"),
    ((("t", "BYTES", (-1,)),), "For BYTE datatype raw input 't', the model must have input shape [1]"),
    ((("t", "BYTES", (2,)),), "For BYTE datatype raw input 't', the model must have input shape [1]"),
    ((("t", "BYTES", (-1, -1)),),  # the dimensions are read before the type is looked at
     "The shape of the raw input 't' can not be deduced because there are more than one variable-sized dimension"),
])
def test_raw_input_refusals_in_tritons_words(inputs, words):
    with pytest.raises(GatewayError) as err:
        rawinput.shape(_meta(*inputs), "m", 4)
    assert err.value.message == PREFIX + words


def test_a_raw_bytes_input_is_one_element_with_its_length():
    parsed = rawinput.parse(_meta(("t", "BYTES", (1,)), max_batch_size=8), "m", "2", b"h\xffi")
    assert parsed.binary_default and not parsed.outputs
    assert (parsed.msg.model_name, parsed.msg.model_version) == ("m", "2")
    assert [(i.name, i.datatype, list(i.shape)) for i in parsed.msg.inputs] == [("t", "BYTES", [1, 1])]
    assert parsed.raws == [struct.pack("<I", 3) + b"h\xffi"]


@pytest.mark.parametrize("dims, count", [
    ([2, 3], 6), ([], 0), ([0, 5], 0), ([4, 1152921504606846978], 4611686018427387912),
    ([4, 4611686018427387904], 0),  # 2**64 wraps to 0
    ([2, 4611686018427387904], -(1 << 63)), ([3, 6148914691236517206], 2),
    ([9223372036854775808], -(1 << 63)), ([1, (1 << 64) - 1, 5], -1),
])
def test_element_counts_as_triton_computes_them(dims, count):
    assert jsontensor._count(dims) == count


@pytest.mark.parametrize("shape, sent", [
    ([4, 1152921504606846978], [4, 1152921504606846978]), ([9223372036854775808], [-(1 << 63)]),
    ([1, (1 << 64) - 1], [1, -1]),  # a count of -1: Triton's HTTP front end aborts (std::length_error); refused here
])
def test_overflowing_shapes_reach_tritons_checks_as_sent(shape, sent):
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": shape, "parameters": {"binary_data_size": 4}}]}
    parsed = jsontensor.parse(doc, "m", "", memoryview(b"\0" * 4))
    assert list(parsed.msg.inputs[0].shape) == sent
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": shape, "data": [1]}]}
    with pytest.raises(GatewayError) as err:  # Triton reads the one value and finds fewer than the shape says
        jsontensor.parse(doc, "m", "", memoryview(b""))
    assert err.value.message == "Unable to parse 'data': Shape does not match true shape of 'data' field"


def test_a_wrapped_zero_count_reads_no_data():
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 4611686018427387904], "data": ["not a number"]}]}
    assert jsontensor.parse(doc, "m", "", memoryview(b"")).raws == [b""]


def test_null_request_parameters_are_refused():
    with pytest.raises(GatewayError) as err:
        jsontensor.parse({"inputs": [], "parameters": None}, "m", "", memoryview(b""))
    assert err.value.message == "failed to get request params.: attempt to get members for non-object"


def test_shared_memory_status_in_tritons_layout():
    system = service_pb2.SystemSharedMemoryStatusResponse()
    for name, offset in (("zeta", 8), ("alpha", 0)):
        r = system.regions[name]
        r.name, r.key, r.offset, r.byte_size = name, "/" + name, offset, 64
    assert documents.shared_memory_status(system, True) == (
        b'[{"name":"alpha","key":"/alpha","offset":0,"byte_size":64},'
        b'{"name":"zeta","key":"/zeta","offset":8,"byte_size":64}]')
    cuda = service_pb2.CudaSharedMemoryStatusResponse()
    r = cuda.regions["g"]
    r.name, r.device_id, r.byte_size = "g", 1, 1024
    assert documents.shared_memory_status(cuda, False) == b'[{"name":"g","device_id":1,"byte_size":1024}]'
    assert documents.shared_memory_status(service_pb2.SystemSharedMemoryStatusResponse(), True) == b"[]"
