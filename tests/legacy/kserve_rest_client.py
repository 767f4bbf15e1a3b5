"""KServe's InferenceRESTClient (the ``kserve`` SDK, unchanged) against a V2 REST endpoint.

Run with PYTHONPATH=.run/kserve-client; prints one JSON document of what the client saw. The
package's ``__init__`` (which starts by importing KServe's model server: fastapi, uvicorn,
kubernetes...) is skipped: ``kserve`` is registered as a bare package over its own directory, so
``kserve.inference_client`` and what it imports load exactly as shipped.
"""

import asyncio
import importlib.util
import json
import sys
import types
from pathlib import Path

spec = importlib.util.find_spec("kserve")
pkg = types.ModuleType("kserve")
pkg.__path__ = [str(Path(spec.origin).parent)]
sys.modules["kserve"] = pkg

import numpy as np  # noqa: E402
from kserve.inference_client import InferenceRESTClient, RESTConfig  # noqa: E402
from kserve.protocol.infer_type import InferInput, InferRequest  # noqa: E402


async def _outcome(call):
    """The call's answer, or the name of what it raised."""
    try:
        return await call
    except Exception as e:  # noqa: BLE001 - what the client raises is what we report
        return type(e).__name__


async def main(base: str) -> dict:
    client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))
    out: dict = {}
    try:
        # the client reads the server health body as JSON; Triton's is empty (tests compare both servers)
        out["live"] = await _outcome(client.is_server_live(base))
        out["ready"] = await _outcome(client.is_server_ready(base))
        out["model_ready"] = await client.is_model_ready(base, "saved_model_half_plus_three")
        out["missing_ready"] = await client.is_model_ready(base, "no_such_model")
        x = InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32), binary_data=False)
        res = await client.infer(base, InferRequest("saved_model_half_plus_three", [x], request_id="r1"),
                                 model_name="saved_model_half_plus_three")
        out["json"] = res.outputs[0].as_numpy().tolist()
        xb = InferInput("x", [3], "FP32")
        xb.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32), binary_data=True)
        res = await client.infer(base, InferRequest("saved_model_half_plus_three", [xb], request_id="r2"),
                                 model_name="saved_model_half_plus_three")
        out["binary"] = res.outputs[0].as_numpy().tolist()
        out["id"] = res.id
        try:
            await client.infer(base, InferRequest("no_such_model", [x]), model_name="no_such_model")
        except Exception as e:  # noqa: BLE001 - what the client raises is what we report
            out["missing"] = str(e)
    finally:
        await client.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1])), default=str))
