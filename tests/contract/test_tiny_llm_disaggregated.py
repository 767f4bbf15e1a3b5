"""tiny_llm's disaggregated requests straight on Triton (TensorRT-LLM's contract: request
parameter ``request_type``, UINT8 ``context_phase_params`` out of the context phase and back in)."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient


def _inputs(prompt: str, max_tokens: int, stream: bool, ctx: np.ndarray | None = None):
    values = [("text_input", np.array([[prompt.encode()]], dtype=object), "BYTES"),
              ("max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
              ("stream", np.array([[stream]], dtype=bool), "BOOL"),
              ("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL")]
    if ctx is not None:
        values.append(("context_phase_params", ctx, "UINT8"))
    out = []
    for name, data, dtype in values:
        t = grpcclient.InferInput(name, list(data.shape), dtype)
        t.set_data_from_numpy(data)
        out.append(t)
    return out


@pytest.fixture(scope="module")
def run(triton):
    client = grpcclient.InferenceServerClient(triton.grpc_target)

    def call(inputs, **params):
        results: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer("tiny_llm", inputs, parameters=params or None, enable_empty_final_response=True)
            got = []
            while True:
                result, error = results.get(timeout=30)
                if error is not None:
                    return got, error
                final = result.get_response().parameters["triton_final_response"].bool_param
                if result.as_numpy("text_output") is not None:
                    got.append(result)
                if final:
                    return got, None
        finally:
            client.stop_stream()

    yield call
    client.close()


def _texts(results):
    return [r.as_numpy("text_output").reshape(-1)[0].decode() for r in results]


def test_context_then_generation_equals_the_whole_generation(run):
    whole, err = run(_inputs("split me", 10, True))
    assert err is None
    ctx, err = run(_inputs("split me", 10, True), request_type="context_only")
    assert err is None and len(ctx) == 1
    params = ctx[0].as_numpy("context_phase_params")
    assert params.dtype == np.uint8 and params.shape[0] == 1 and params.shape[1] > 0
    assert _texts(ctx) == _texts(whole)[:1]
    gen, err = run(_inputs("split me", 10, True, params), request_type="generation_only")
    assert err is None and _texts(gen) == _texts(whole)[1:]
    assert all(r.as_numpy("context_phase_params") is None for r in gen)


def test_generation_only_needs_matching_context_params(run):
    _, err = run(_inputs("split me", 10, True), request_type="generation_only")
    assert err is not None and "context_phase_params" in str(err)
    ctx, _ = run(_inputs("split me", 10, True), request_type="context_only")
    _, err = run(_inputs("another prompt", 10, True, ctx[0].as_numpy("context_phase_params")),
                 request_type="generation_only")
    assert err is not None and "do not belong" in str(err)


def test_unknown_request_type_runs_both_phases_as_tensorrt_llm_does(run):
    whole, _ = run(_inputs("split me", 6, False))
    odd, err = run(_inputs("split me", 6, False), request_type="sideways")
    assert err is None and _texts(odd) == _texts(whole) and len(_texts(whole)[0].split()) == 6
