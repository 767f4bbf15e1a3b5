"""One set of acceptance checks, each dialect through its real client, run against any gateway given
its listeners' ports on a host: the test session's gateway (tests/contract/test_acceptance.py) and
the compose stack's published ports (`make compose-test`, tests/compose). The same assertions, so
that the two cannot drift apart.

Each check takes an :class:`Endpoints` and raises AssertionError (or the client's own error) when
the gateway answers otherwise. Only what every shipped configuration serves is asked: the models of
model_repository/ under their Triton names (gateway.yaml, config/docker.yaml, tests/config/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HP3 = "saved_model_half_plus_three"
PROMPT = [{"role": "user", "content": "Once upon a time"}]


@dataclass(frozen=True)
class Endpoints:
    ports: dict[str, int]  # listener name (gateway.dialects.LISTENERS) -> port on ``host``
    host: str = "127.0.0.1"

    def url(self, listener: str) -> str:
        return f"http://{self.host}:{self.ports[listener]}"

    def target(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"


def _http(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# -- admin ----------------------------------------------------------------------------------------
def admin_health_and_metrics(ep: Endpoints) -> None:
    status, body = _http(ep.url("admin_http") + "/health")
    assert status == 200 and b'"ready"' in body, (status, body)
    status, body = _http(ep.url("admin_http") + "/metrics")
    assert status == 200 and b"gateway_upstream_ready 1.0" in body and b"gateway_requests_total" in body


# -- KServe V2: tritonclient HTTP and gRPC --------------------------------------------------------
def v2_http_tritonclient(ep: Endpoints) -> None:
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    c = httpclient.InferenceServerClient(ep.target("v2_http"), network_timeout=30)
    try:
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(HP3, "123")
        assert c.get_server_metadata()["version"] == "2.51.0"
        x = httpclient.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32))
        r = c.infer(HP3, [x])
        assert r.as_numpy("y").tolist() == [3.5, 4.0, 5.5] and r.get_response()["model_version"] == "123"
        try:
            c.infer("no_such_model", [x])
            raise AssertionError("an unknown model was answered")
        except InferenceServerException as e:
            assert e.message() == "Request for unknown model: 'no_such_model' is not found", e.message()
    finally:
        c.close()


def v2_grpc_tritonclient(ep: Endpoints) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    c = grpcclient.InferenceServerClient(ep.target("v2_grpc"))
    try:
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(HP3, "123")
        assert c.get_server_metadata().version == "2.51.0"
        x = grpcclient.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32))
        r = c.infer(HP3, [x], client_timeout=30)
        assert r.as_numpy("y").tolist() == [3.5, 4.0, 5.5] and r.get_response().model_version == "123"
        try:
            c.infer("no_such_model", [x], client_timeout=30)
            raise AssertionError("an unknown model was answered")
        except InferenceServerException as e:
            assert e.status() == "StatusCode.NOT_FOUND", e.status()
            assert e.message() == "Request for unknown model: 'no_such_model' is not found", e.message()
    finally:
        c.close()


def v2_grpc_stream_tiny_llm(ep: Endpoints) -> None:
    """A decoupled model streamed through tritonclient: several responses, then the final flag."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    def inputs():
        text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hello there"]], dtype=object))
        mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
        mt.set_data_from_numpy(np.array([[5]], dtype=np.int32))
        stream = grpcclient.InferInput("stream", [1, 1], "BOOL")
        stream.set_data_from_numpy(np.array([[True]], dtype=bool))
        return [text, mt, stream]

    got: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(ep.target("v2_grpc"))
    c.start_stream(callback=lambda result, error: got.put((result, error)), stream_timeout=60)
    tokens, final = [], False
    try:
        c.async_stream_infer("tiny_llm", inputs(), enable_empty_final_response=True)
        while not final:
            result, error = got.get(timeout=30)
            assert error is None, error
            resp = result.get_response()
            if resp.outputs:
                tokens.append(result.as_numpy("text_output").reshape(-1)[0].decode())
            final = resp.parameters["triton_final_response"].bool_param
    finally:
        c.stop_stream()
        c.close()
    assert len(tokens) == 5 and all(tokens), tokens


# -- TensorFlow Serving: REST (its documented bytes) and tensorflow-serving-api gRPC --------------
def tfserving_rest(ep: Endpoints) -> None:
    base = ep.url("tfserving_rest")
    status, body = _http(f"{base}/v1/models/{HP3}")
    assert status == 200 and body == (
        b'{\n "model_version_status": [\n  {\n   "version": "123",\n   "state": "AVAILABLE",\n'
        b'   "status": {\n    "error_code": "OK",\n    "error_message": ""\n   }\n  }\n ]\n}\n'), body
    status, body = _http(f"{base}/v1/models/{HP3}:predict", b'{"instances": [1.0,2.0,5.0]}')
    assert (status, body) == (200, b'{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}'), body
    req = b'{"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, {"x": 2.0}]}'
    status, body = _http(f"{base}/v1/models/{HP3}:regress", req)
    assert (status, body) == (200, b'{\n    "results": [3.5, 4.0]\n}'), body
    status, body = _http(f"{base}/v1/models/half:predict", b'{"instances": [1.0,5.0]}')
    assert (status, body) == (404, b'{\n    "error": "Servable not found for request: Latest(half)"\n}'), body


@cache
def compiled_tensorflow_protos() -> Path:
    """TensorFlow's core messages compiled from proto/ (tensorflow-serving-api is installed without
    TensorFlow: requirements/legacy-clients.txt)."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="tf-core-protos-"))
    protos = [str(p.relative_to(ROOT / "proto")) for top in ("tensorflow", "xla")
              for p in (ROOT / "proto" / top).rglob("*.proto")]
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}", *protos]) == 0
    for d in [out, *(p for p in out.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    return out


def tfserving_grpc_tensorflow_serving_api(ep: Endpoints) -> None:
    """A client built on tensorflow-serving-api's own generated stubs, untouched (tests/legacy/
    tfserving_client.py), in a subprocess: its descriptors would clash with the gateway's copies."""
    legacy = ROOT / ".run" / "legacy-clients"
    if not (legacy / "tensorflow_serving" / "apis" / "prediction_service_pb2_grpc.py").exists():
        raise AssertionError("tensorflow-serving-api is not installed in .run/legacy-clients: run `make install`")
    protos = compiled_tensorflow_protos()
    env = dict(os.environ, PYTHONPATH=f"{protos}:{legacy}")
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "legacy" / "tfserving_client.py"),
                          ep.target("tfserving_grpc")], env=env, capture_output=True, text=True,
                         timeout=60, cwd=protos)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["predict"] == [3.5, 4.0, 5.5]
    assert got["signatures"] == ["serving_default", "tensorflow/serving/classify", "tensorflow/serving/regress"]
    assert got["serving_default_inputs"] == ["x"]
    assert got["regress"] == [3.5, 4.0]
    assert got["classify"] == [[["", 3.5]]]
    assert got["status"] == [[123, "AVAILABLE"]]
    assert got["missing"][0] == "NOT_FOUND"
    assert got["missing"][1].startswith("Servable not found for request: Latest(half)")


# -- GRPS: HTTP as its clients send it (JSON), gRPC through GrpsService stubs ----------------------
GRPS_OK = {"code": 200, "msg": "OK", "status": "SUCCESS"}


def grps_http(ep: Endpoints) -> None:
    base = ep.url("grps_http")
    status, body = _http(f"{base}/grps/v1/health/live")
    assert (status, json.loads(body)) == (200, {"status": GRPS_OK}), body
    for query in ("", "?model=your_model-1.0.0"):  # the default model, and the name GRPS's examples use
        status, body = _http(f"{base}/grps/v1/infer/predict{query}", b'{"str_data": "hello grps"}',
                             {"Content-Type": "application/json"})
        assert (status, json.loads(body)) == (200, {"status": GRPS_OK, "str_data": "hello grps"}), body


def grps_grpc(ep: Endpoints) -> None:
    import grpc

    from gateway._proto import grps_pb2, grps_pb2_grpc

    with grpc.insecure_channel(ep.target("grps_grpc")) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        live = stub.CheckLiveness(grps_pb2.GrpsMessage(), timeout=30)
        assert (live.status.code, live.status.status) == (200, grps_pb2.Status.SUCCESS)
        r = stub.Predict(grps_pb2.GrpsMessage(str_data="hello grps"), timeout=30)
        assert (r.status.code, r.status.msg, r.str_data) == (200, "OK", "hello grps"), r


# -- MindIE-style LLM API: the openai SDK and text-generation -------------------------------------
def mindie_openai(ep: Endpoints) -> None:
    import openai

    oai = openai.OpenAI(base_url=ep.url("mindie_http") + "/v1", api_key="unused", max_retries=0, timeout=30)
    whole = oai.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=4)
    assert whole.object == "chat.completion" and whole.model == "tiny_llm"
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 4
    chunks = list(oai.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=4, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    try:
        oai.chat.completions.create(model="no_such_model", messages=PROMPT)
        raise AssertionError("an unknown model was answered")
    except openai.UnprocessableEntityError as e:
        assert e.status_code == 422 and e.body == "Model no_such_model not found.", e.body


def mindie_text_generation(ep: Endpoints) -> None:
    from text_generation import Client
    from text_generation.errors import UnknownError

    tgi = Client(ep.url("mindie_http"), timeout=30)
    r = tgi.generate("My name is Olivier and I", max_new_tokens=5, seed=12)
    assert r.details.finish_reason.value == "length" and r.details.generated_tokens == 5 and r.details.seed == 12
    assert "".join(t.text for t in r.details.tokens) == r.generated_text
    streamed = list(tgi.generate_stream("My name is Olivier and I", max_new_tokens=5))
    assert streamed[-1].generated_text == "".join(s.token.text for s in streamed if not s.token.special)
    assert streamed[-1].generated_text == tgi.generate("My name is Olivier and I", max_new_tokens=5).generated_text
    try:
        tgi.generate("hi", max_new_tokens=-1)
        raise AssertionError("max_new_tokens=-1 was accepted")
    except UnknownError as e:
        assert "Parameter max_new_tokens" in str(e), e


CHECKS: dict[str, Callable[[Endpoints], None]] = {f.__name__: f for f in (
    admin_health_and_metrics,
    v2_http_tritonclient,
    v2_grpc_tritonclient,
    v2_grpc_stream_tiny_llm,
    tfserving_rest,
    tfserving_grpc_tensorflow_serving_api,
    grps_http,
    grps_grpc,
    mindie_openai,
    mindie_text_generation,
)}


def run_all(ep: Endpoints, out=sys.stdout) -> list[str]:
    """Every check; a line each; the names of those that failed."""
    failed = []
    for name, check in CHECKS.items():
        try:
            check(ep)
        except Exception as e:  # noqa: BLE001 (a report line per check, whatever its client raised)
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=out, flush=True)
        else:
            print(f"ok   {name}", file=out, flush=True)
    return failed
