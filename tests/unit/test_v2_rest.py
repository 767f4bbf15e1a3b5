"""V2 REST pieces without Triton: rapidjson's text, Triton's body parsing and its words, the generate
conversion. The answers as a whole are checked against Triton itself (tests/contract/
test_v2_http_differential.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.errors import GatewayError
from gateway.core.tensors import ModelMetadata, TensorSpec
from gateway.dialects.v2 import documents, generate, jsonbody, jsontensor, rjson


@pytest.mark.parametrize("value, text", [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (2.5, "2.5"), (1e20, "100000000000000000000.0"), (1e21, "1e21"),
    (1e-6, "0.000001"), (1.5e-6, "0.0000015"), (1e-7, "1e-7"), (1.2345e-7, "1.2345e-7"), (3e38, "3e38"),
    (float(np.float32(0.1)), "0.10000000149011612"), (float("nan"), "NaN"), (float("-inf"), "-Infinity"),
])
def test_doubles_as_rapidjson_writes_them(value, text):
    assert rjson.double(value) == text
    assert rjson.floats(np.array([value])) == f"[{text}]".encode()


def test_strings_escape_only_what_rapidjson_escapes():
    assert rjson.string(b'a"b\\c\n\x01\xff/\xc3\xa9') == b'"a\\"b\\\\c\\n\\u0001\xff/\xc3\xa9"'
    assert rjson.error("it's \"bad\"") == b'{"error":"it\'s \\"bad\\""}'


@pytest.mark.parametrize("body, words", [
    (b'{"inputs":[1 2]}', "Missing a comma or ']' after an array element. at 13"),
    (b'{"a":1 "b"}', "Missing a comma or '}' after an object member. at 7"),
    (b'{"inputs":[tru]}', "Invalid value. at 14"),
    (b'{"a":1} x', "The document root must not be followed by other values. at 8"),
    (b"   ", "The document is empty. at 3"),
    (b'{"a":"b', "Missing a closing quotation mark in string. at 7"),
])
def test_malformed_json_in_rapidjsons_words(body, words):
    with pytest.raises(GatewayError) as err:
        jsonbody.loads(body)
    assert err.value.message == f"failed to parse the request JSON buffer: {words}"


def test_nan_and_infinity_are_read():
    assert str(jsonbody.loads(b'[NaN, Infinity, -Inf]')) == "[nan, inf, -inf]"


def _parse(doc, binary=b""):
    return jsontensor.parse(doc, "m", "", memoryview(binary))


def test_json_and_binary_inputs_become_raw_contents():
    doc = {"id": "r", "parameters": {"binary_data_output": True, "k": 1.5},
           "inputs": [{"name": "a", "datatype": "INT8", "shape": [2, 2], "data": [[1, -1], [300, 4]]},
                      {"name": "b", "datatype": "FP16", "shape": [1], "parameters": {"binary_data_size": 2}},
                      {"name": "c", "datatype": "BYTES", "shape": [2], "data": ["x", "ü"]}],
           "outputs": [{"name": "o", "parameters": {"binary_data": False, "classification": 2}}]}
    p = _parse(doc, b"\x00\x3c")
    assert p.msg.id == "r" and p.binary_default and p.msg.parameters["k"].double_param == 1.5
    assert "binary_data_output" not in p.msg.parameters
    assert [bytes(r) for r in p.raws] == [bytes([1, 255, 44, 4]), b"\x00\x3c", b"\x01\x00\x00\x00x\x02\x00\x00\x00\xc3\xbc"]
    assert p.outputs["o"] == jsontensor.Output(False, 2)
    assert p.msg.outputs[0].parameters["classification"].int64_param == 2


@pytest.mark.parametrize("doc, words", [
    ({}, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, True]}]},
     "Unable to parse 'data': attempt to access JSON non-number as double"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}]},
     "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    ({"inputs": [{"name": "x", "datatype": "UINT8", "shape": [1], "data": [-1]}]},
     "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ({"inputs": [{"name": "x", "datatype": "FP16", "shape": [1], "data": [1]}]},
     "receiving FP16 data via JSON is not supported. Please use the binary data format for input x"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]},
     "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
     "'shared_memory_region' in 'parameters'. But no field is set"),
    ({"inputs": [], "parameters": {"triton_x": 1}},
     "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 12}}]},
     "unexpected size for input 'x', expecting 4 additional bytes for model 'm'"),
])
def test_tritons_words_for_bad_bodies(doc, words):
    with pytest.raises(GatewayError) as err:
        _parse(doc, b"\x00" * 8)
    assert err.value.message == words


def test_answers_json_and_binary_outputs():
    parsed = _parse({"inputs": [], "outputs": [{"name": "b", "parameters": {"binary_data": True}}]})
    resp = service_pb2.ModelInferResponse(model_name="m", model_version="1", id="q")
    resp.outputs.add(name="a", datatype="FP32", shape=[2])
    resp.outputs.add(name="b", datatype="INT32", shape=[1])
    resp.raw_output_contents.extend([np.array([1, 0.5], np.float32).tobytes(), np.array([7], np.int32).tobytes()])
    pieces, header = jsontensor.render(resp, parsed)
    body = b"".join(pieces)
    assert body[:header] == (b'{"id":"q","model_name":"m","model_version":"1","outputs":[{"name":"a","datatype":"FP32",'
                             b'"shape":[2],"data":[1.0,0.5]},{"name":"b","datatype":"INT32","shape":[1],'
                             b'"parameters":{"binary_data_size":4}}]}')
    assert body[header:] == np.array([7], np.int32).tobytes()


def test_generate_fills_the_metadata_shape_and_sorts_the_answer():
    meta = ModelMetadata("m", ("1",), "python", (TensorSpec("x", "FP32", (-1, 2)), TensorSpec("t", "BYTES", (1,))), ())
    p = generate.convert({"x": [1, 2, 3, 4], "t": "hi", "temperature": 0.5}, meta, "m", "")
    assert [list(i.shape) for i in p.msg.inputs] == [[2, 2], [1]]
    assert p.msg.parameters["temperature"].double_param == 0.5
    with pytest.raises(GatewayError, match="The schema can not convert input 'x' to tensor with proper shape"):
        generate.convert({"x": [1, 2, 3]}, meta, "m", "")
    resp = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    resp.outputs.add(name="z", datatype="FP32", shape=[1])
    resp.outputs.add(name="b", datatype="BYTES", shape=[1])
    resp.raw_output_contents.extend([np.array([2], np.float32).tobytes(), b"\x02\x00\x00\x00ok"])
    resp.parameters[generate.FINAL].bool_param = True
    assert generate.render(resp) == b'{"b":"ok","model_name":"m","model_version":"1","z":2.0}'


def test_documents_write_int64_as_numbers_in_declaration_order():
    stats = service_pb2.ModelStatisticsResponse()
    s = stats.model_stats.add(name="m", version="1", last_inference=5)
    s.batch_stats.add(batch_size=1)
    s.inference_stats.success.count = 1
    doc = documents.statistics(stats)
    assert doc.startswith(b'{"model_stats":[{"name":"m","version":"1","last_inference":5,"inference_count":0,')
    assert list(json.loads(doc)["model_stats"][0])[5:8] == ["inference_stats", "response_stats", "batch_stats"]
