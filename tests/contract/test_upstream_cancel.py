"""``upstream.cancel`` against a real Triton (a Triton of the test's own: the pinned stand-in, 2.51,
is one of the releases that can crash on a cancelled call). A client that goes away in the middle
of a unary call (TF Serving REST, on the HTTP/2 client; V2 REST, on the same client) leaves
Triton's call to finish under ``streams``, the default (the model, which polls
``request.is_cancelled()``, logs that it finished) and cancels it under ``all`` (the model logs the
cancellation); a client that leaves a V2 generate_stream SSE response cancels Triton's stream under
``streams`` (tiny_llm logs that it was cancelled and stops) and under ``none`` the stream runs to
its end. The gateway's start-up warning names this Triton as one that crashes on a cancellation."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil

import aiohttp
import pytest

from gateway.app import Worker
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, worker_settings

pytestmark = pytest.mark.contract

SLOW = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            tag = int(x.reshape(-1)[0])
            for _ in range(40):  # 2 s, the cancellation looked for every 50 ms
                if request.is_cancelled():
                    pb_utils.Logger.log_info(f"slow: request {tag} cancelled")
                    out.append(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)))
                    break
                time.sleep(0.05)
            else:
                pb_utils.Logger.log_info(f"slow: request {tag} finished")
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x.astype(np.float32))]))
        return out
'''

SLOW_CONFIG = '''name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU, count: 2 } ]
'''


@pytest.fixture(scope="module")
def slow_triton(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cancel")
    repo = tmp / "models"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (repo / "slow" / "1" / "model.py").write_text(SLOW)
    shutil.copytree(ROOT / "model_repository" / "tiny_llm", repo / "tiny_llm")
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(repo),
                      workdir=str(ROOT / ".run" / "cancel-triton"), http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), startup_timeout_s=120)
    log = tmp / "triton.log"
    proc = localtriton.start(cfg, ROOT, log_path=log)
    yield cfg, log, proc
    proc.stop()


async def _gateway(cfg, mode: str) -> tuple[Worker, dict[str, int]]:
    ports = {"tfserving_rest": free_port(), "v2_http": free_port()}
    w = Worker(worker_settings(ports, f"127.0.0.1:{cfg.grpc_port}", UPSTREAM__CANCEL=mode))
    await w.start()
    return w, ports


async def _leave(url: str, body: dict, after: float) -> None:
    """A client that sends ``body`` and goes away (its connection closed) ``after`` seconds later."""
    async with aiohttp.ClientSession() as http:
        with pytest.raises(asyncio.TimeoutError):
            async with asyncio.timeout(after):
                async with http.post(url, json=body) as r:
                    async for _ in r.content.iter_any():  # an SSE response: its first events read
                        pass


async def _logged(log, pattern: str, timeout: float = 8.0) -> re.Match | None:
    for _ in range(int(timeout / 0.1)):
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        await asyncio.sleep(0.1)
    return None


def _alive(proc) -> None:
    assert proc.proc.poll() is None, f"Triton exited with {proc.proc.returncode}"


@pytest.mark.parametrize(("mode", "outcome"), [("streams", "finished"), ("all", "cancelled")])
async def test_a_unary_call_whose_client_left(slow_triton, mode, outcome):
    cfg, log, proc = slow_triton
    w, ports = await _gateway(cfg, mode)
    tag = {"streams": 10, "all": 20}[mode]
    try:
        # TF Serving REST: ModelInfer on the HTTP/2 client
        await _leave(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/slow:predict",
                     {"instances": [float(tag)]}, 0.4)
        assert await _logged(log, rf"slow: request {tag} (finished|cancelled)") is not None
        assert re.search(rf"slow: request {tag} (\w+)", log.read_text()).group(1) == outcome
        # V2 REST: ModelInfer on the HTTP/2 client
        await _leave(f"http://127.0.0.1:{ports['v2_http']}/v2/models/slow/infer",
                     {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [tag + 1.0]}]}, 0.4)
        assert await _logged(log, rf"slow: request {tag + 1} (finished|cancelled)") is not None
        assert re.search(rf"slow: request {tag + 1} (\w+)", log.read_text()).group(1) == outcome
        _alive(proc)
    finally:
        await w.stop(grace=0.1)


@pytest.mark.parametrize(("mode", "cancelled"), [("streams", True), ("none", False)])
async def test_a_stream_whose_client_left(slow_triton, mode, cancelled):
    cfg, log, proc = slow_triton
    w, ports = await _gateway(cfg, mode)
    prompt = f"long prompt 12 {mode}"
    before = log.read_text(errors="replace").count("tiny_llm: request")
    try:
        body = {"text_input": prompt, "max_tokens": 24, "stream": True}
        await _leave(f"http://127.0.0.1:{ports['v2_http']}/v2/models/tiny_llm/generate_stream", body, 0.15)
        await asyncio.sleep(1.0)  # 24 tokens at 15 ms: the stream would be over by now
        found = log.read_text(errors="replace").count("tiny_llm: request") > before
        assert found is cancelled
        _alive(proc)
    finally:
        await w.stop(grace=0.1)


async def test_the_start_up_warning_names_this_triton(slow_triton, caplog):
    cfg, _, _ = slow_triton
    caplog.set_level(logging.WARNING, logger="gateway")
    w, _ = await _gateway(cfg, "streams")
    try:
        for _ in range(50):
            if any("older than 2.59.0" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.1)
        said = [r.getMessage() for r in caplog.records if "older than 2.59.0" in r.getMessage()]
        assert said and said[0].startswith("Triton 2.51.0 is older than 2.59.0 (NGC 25.06)")
    finally:
        await w.stop(grace=0.1)
