"""streammux's wire readers against protobuf's own reading of the same bytes."""

from __future__ import annotations

import grpc
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.protowire import delimited
from gateway.upstream import streammux


def _request(rid: str = "", **kw) -> bytes:
    msg = service_pb2.ModelInferRequest(model_name="m", id=rid, **kw)
    msg.inputs.add(name="x", datatype="FP32", shape=[300])
    msg.raw_input_contents.append(b"\x01" * 1200)  # a length of two varint bytes
    return msg.SerializeToString()


@pytest.mark.parametrize("rid", ["", "a", "x" * 200])
def test_request_id_is_the_one_protobuf_reads(rid):
    data = _request(rid, model_version="3")
    assert streammux.request_id(data) == rid.encode()
    again = data + delimited(3, b"later")  # the last one written wins, as in protobuf
    assert service_pb2.ModelInferRequest.FromString(again).id == "later"
    assert streammux.request_id(again) == b"later"


def test_request_id_refuses_what_is_no_message():
    data = _request("abc")
    with pytest.raises(ValueError):
        streammux.request_id(data[:-5])
    with pytest.raises(ValueError):
        streammux.request_id(b"\x0f")  # wire type 7


def _stream_answer(rid: str, final: bool = True, error: str = "", more_params: bool = False) -> bytes:
    resp = service_pb2.ModelInferResponse(model_name="m", model_version="1", id=rid)
    if more_params:
        resp.parameters["sequence_id"].int64_param = 7
    if final:
        resp.parameters["triton_final_response"].bool_param = True
    resp.outputs.add(name="y", datatype="FP32", shape=[2])
    resp.raw_output_contents.append(b"\0" * 8)
    return service_pb2.ModelStreamInferResponse(error_message=error, infer_response=resp).SerializeToString()


@pytest.mark.parametrize("more_params", [False, True])
def test_split_answer_gives_the_unary_answer(more_params):
    key, answer, error = streammux.split_answer(_stream_answer("r7", more_params=more_params))
    assert key == b"r7" and error == ""
    msg = service_pb2.ModelInferResponse.FromString(answer)
    assert "triton_final_response" not in msg.parameters
    assert ("sequence_id" in msg.parameters) is more_params
    assert msg.id == "r7" and msg.outputs[0].name == "y" and msg.raw_output_contents[0] == b"\0" * 8


def test_split_answer_of_an_error():
    key, _, error = streammux.split_answer(_stream_answer("e1", error="[request id: e1] unexpected shape"))
    assert key == b"e1" and error == "[request id: e1] unexpected shape"


@pytest.mark.parametrize("text, code", [
    ("Request for unknown model: 'm' is not found", grpc.StatusCode.NOT_FOUND),
    ("[request id: a] inference input 'x' data-type is 'INT32', but model 'm' expects 'FP32'",
     grpc.StatusCode.INVALID_ARGUMENT),
    ("Failed to process the request(s) for model 'm', message: boom", grpc.StatusCode.INTERNAL),
    ("Failed to process the request(s) for model 'm', message: invalid value, expected 3", grpc.StatusCode.INTERNAL),
    ("Stub process 'm_0_0' is not healthy.", grpc.StatusCode.INTERNAL),
    ("unable to find expected response output", grpc.StatusCode.INTERNAL),  # seen in make soak, Triton killed
])
def test_status_of_triton_texts(text, code):
    assert streammux.status_of(text) is code


async def test_a_triton_that_is_not_there_fails_as_the_unary_call_does():
    from gateway.core.errors import ErrorKind, GatewayError
    from gateway.upstream import TritonUpstream
    from tests.support import free_port

    up = TritonUpstream(f"127.0.0.1:{free_port()}", stream_mux=(2, 1 << 16))  # nothing listens there
    await up.connect()
    try:
        data = _request("r1")
        errors = []
        for plain in (True, False):  # on a stream, then as a unary call
            up._plain["m"] = plain
            with pytest.raises(GatewayError) as err:
                await up.infer_bytes("m", data)
            errors.append((err.value.kind, err.value.message))
        assert errors[0] == errors[1] and errors[0][0] is ErrorKind.UNAVAILABLE
    finally:
        await up.close()
