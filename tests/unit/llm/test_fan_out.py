"""n and best_of: one Triton request per sequence (seeds seed + i), merged; best_of ranked by the
model's cumulative log probability."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gateway.core.tensors import InferResponse, Tensor, TensorSpec
from gateway.llm.served import ServedModels, ServedModelsSettings
from gateway.llm.service import GenerationService
from gateway.llm.types import Done, GenerateRequest, Sampling, Token
from tests.fakes import FakeUpstream, trtllm_meta


class SeededUpstream(FakeUpstream):
    """Answers ``seed<N>`` in two pieces; each piece's log probability is -(N % 5)."""

    async def stream(self, req):
        self.requests.append((req, None))
        seed = int({t.name: t.data for t in req.inputs}["seed"].reshape(-1)[0])
        for piece in (f"seed{seed}", " end"):
            yield InferResponse(req.model, "1", [
                Tensor("text_output", np.array([[piece.encode()]], dtype=object), "BYTES"),
                Tensor("output_log_probs", np.array([[[-(seed % 5)]]], dtype=np.float32))])
        yield InferResponse(req.model, "1", [], final=True)


def _up():
    meta = trtllm_meta("llm", extra=("return_log_probs",))
    meta = replace(meta, outputs=(*meta.outputs, TensorSpec("output_log_probs", "FP32", (-1, -1, -1))))
    return SeededUpstream(metas=[meta])


async def _run(up, req):
    model = await ServedModels(up, ServedModelsSettings()).resolve("llm")
    return [ev async for ev in GenerationService(up).generate(req, model)]


async def test_n_sequences_are_n_requests_with_consecutive_seeds_merged_by_index():
    up = _up()
    events = await _run(up, GenerateRequest("llm", "hi", 8, Sampling(seed=10), stream=True, n=3, best_of=3,
                                            request_id="r"))
    assert sorted(int(t.data.reshape(-1)[0]) for r, _ in up.requests for t in r.inputs if t.name == "seed") == [10, 11, 12]
    assert sorted(r.id for r, _ in up.requests) == ["r-0", "r-1", "r-2"]
    for i in range(3):
        assert "".join(e.text for e in events if isinstance(e, Token) and e.index == i) == f"seed{10 + i} end"
    dones = [e for e in events if isinstance(e, Done)]
    assert sorted(d.index for d in dones) == [0, 1, 2]


async def test_best_of_keeps_the_n_with_the_highest_cumulative_log_probability():
    up = _up()
    events = await _run(up, GenerateRequest("llm", "hi", 8, Sampling(seed=7), n=2, best_of=4))
    # seeds 7..10: log prob per piece -(seed % 5) = -2, -3, -4, 0 -> best 10 (0), then 7 (-2)
    assert [(e.index, e.text) for e in events] == [(0, "seed10 end"), (1, "seed7 end")]
    sent = {t.name for t in up.requests[0][0].inputs}
    assert "return_log_probs" in sent  # asked for, to rank, though the client did not ask
