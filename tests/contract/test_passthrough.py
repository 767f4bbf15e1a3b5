"""KServe V2 gRPC passthrough (:8001) against the real Triton: tritonclient cannot tell the difference."""

from __future__ import annotations

import queue
import time
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def direct(triton):
    c = grpcclient.InferenceServerClient(triton.grpc_target)
    yield c
    c.close()


@pytest.fixture(scope="module")
def proxied(gateway):
    c = grpcclient.InferenceServerClient(gateway.target("v2_grpc"))
    yield c
    c.close()


def _x(values):
    inp = grpcclient.InferInput("x", [len(values)], "FP32")
    inp.set_data_from_numpy(np.asarray(values, dtype=np.float32))
    return inp


def test_server_metadata_and_readiness_match(direct, proxied):
    assert proxied.is_server_live() and proxied.is_server_ready()
    assert proxied.get_server_metadata() == direct.get_server_metadata()
    assert proxied.get_server_metadata().version == "2.51.0"
    assert proxied.is_model_ready("saved_model_half_plus_three", "123")
    assert not proxied.is_model_ready("saved_model_half_plus_three", "7")


def test_model_metadata_and_config_match(direct, proxied):
    for name in ("saved_model_half_plus_three", "tiny_llm"):
        assert proxied.get_model_metadata(name) == direct.get_model_metadata(name)
        assert proxied.get_model_config(name) == direct.get_model_config(name)
    assert proxied.get_model_repository_index() == direct.get_model_repository_index()


def test_shared_memory_status_passes_and_registration_does_not(direct, proxied):
    """The status calls change nothing: passed through (read-only); registration is the closed
    control plane's (dialects.v2.control_plane false)."""
    assert proxied.get_system_shared_memory_status() == direct.get_system_shared_memory_status()
    assert proxied.get_cuda_shared_memory_status() == direct.get_cuda_shared_memory_status()
    for kind in ("system", "cuda"):
        with pytest.raises(InferenceServerException) as got:
            getattr(proxied, f"get_{kind}_shared_memory_status")("no_such_region")
        with pytest.raises(InferenceServerException) as want:
            getattr(direct, f"get_{kind}_shared_memory_status")("no_such_region")
        assert (got.value.status(), got.value.message()) == (want.value.status(), want.value.message())
    for register in (lambda: proxied.register_system_shared_memory("r", "/no_such_key", 64),
                     proxied.unregister_system_shared_memory, proxied.unregister_cuda_shared_memory):
        with pytest.raises(InferenceServerException) as err:
            register()
        assert err.value.status() == "StatusCode.PERMISSION_DENIED"
        assert "dialects.v2.control_plane is false" in err.value.message()


def test_half_plus_three_answers_as_tf_serving_documents(proxied):
    result = proxied.infer("saved_model_half_plus_three", [_x([1.0, 2.0, 5.0])])
    np.testing.assert_array_equal(result.as_numpy("y"), np.array([3.5, 4.0, 5.5], dtype=np.float32))
    assert result.get_response().model_version == "123"


def test_16_mib_tensor_goes_through(proxied):
    n = 4 * 1024 * 1024  # 16 MiB of float32, four times grpc's default message limit
    x = np.arange(n, dtype=np.float32)
    result = proxied.infer("saved_model_half_plus_three", [_x(x)])
    y = result.as_numpy("y")
    assert y.shape == (n,)
    np.testing.assert_allclose(y[[0, 1, n - 1]], 0.5 * x[[0, 1, n - 1]] + 3)


def test_unknown_model_is_not_found_with_tritons_message(direct, proxied):
    with pytest.raises(InferenceServerException) as via_gateway:
        proxied.infer("no_such_model", [_x([1.0])])
    with pytest.raises(InferenceServerException) as via_triton:
        direct.infer("no_such_model", [_x([1.0])])
    assert via_gateway.value.status() == "StatusCode.NOT_FOUND"
    assert via_gateway.value.message() == via_triton.value.message()


def test_decoupled_model_on_unary_infer_is_unimplemented_as_in_triton(proxied):
    inp = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"hi"]], dtype=object))
    mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    mt.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as err:
        proxied.infer("tiny_llm", [inp, mt])
    assert err.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "decoupled" in err.value.message()


def _llm_inputs(prompt: str, max_tokens: int):
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[prompt.encode()]], dtype=object))
    mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    mt.set_data_from_numpy(np.array([[max_tokens]], dtype=np.int32))
    stream = grpcclient.InferInput("stream", [1, 1], "BOOL")
    stream.set_data_from_numpy(np.array([[True]], dtype=bool))
    return [text, mt, stream]


def _stream(target: str, prompt: str, max_tokens: int, cancel_after: int | None = None):
    """Stream one request with tritonclient's sync client; return (tokens, saw_final_flag)."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(target)

    def callback(q, result, error):
        q.put((result, error))

    client.start_stream(callback=partial(callback, results))
    client.async_stream_infer("tiny_llm", _llm_inputs(prompt, max_tokens), enable_empty_final_response=True)
    tokens, final = [], False
    try:
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            resp = result.get_response()
            if resp.outputs:
                tokens.append(result.as_numpy("text_output").reshape(-1)[0].decode())
            if resp.parameters["triton_final_response"].bool_param:
                final = True
                break
            if cancel_after is not None and len(tokens) >= cancel_after:
                break
    finally:
        client.stop_stream(cancel_requests=cancel_after is not None)
        client.close()
    return tokens, final


def test_tiny_llm_streams_several_responses_then_a_final_flag(gateway, triton):
    via_gateway = _stream(gateway.target("v2_grpc"), "hello there", 5)
    via_triton = _stream(triton.grpc_target, "hello there", 5)
    tokens, final = via_gateway
    assert final
    assert len(tokens) == 5
    assert via_gateway == via_triton


def test_cancelled_stream_is_cancelled_in_triton(gateway, triton):
    prompt = "please cancel me"
    tokens, final = _stream(gateway.target("v2_grpc"), prompt, 1000, cancel_after=2)
    assert len(tokens) == 2 and not final
    deadline = time.monotonic() + 10
    needle = "tiny_llm: request"
    while time.monotonic() < deadline:
        if any(needle in line and "cancelled" in line for line in triton.log_tail(200).splitlines()):
            break
        time.sleep(0.2)
    else:
        pytest.fail("tiny_llm never saw the cancellation:\n" + triton.log_tail(30))
