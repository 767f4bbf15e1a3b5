"""One trace from each dialect's client through the gateway into Triton (issue 24).

A Triton of its own, started with OpenTelemetry tracing (``--trace-config mode=opentelemetry``,
rate 1, level TIMESTAMPS) and a gateway with ``tracing.enabled`` both export to an OTLP/HTTP receiver
inside this test (Triton 2.51 posts OTLP JSON, the gateway's SDK OTLP protobuf; both are decoded
with opentelemetry-proto's messages). For a TF REST predict, a GRPS gRPC predict, an OpenAI stream
and a V2 passthrough infer, each sent by the dialect's own client with a ``traceparent``, the
gateway's server span continues the client's span, its Triton call is a client span under it, and
Triton's request span is a child of that client span: all under the client's trace id.

Triton 2.51 (the bundled tritonserver) does not continue every caller's context: measured with
grpc.aio ModelInfer calls straight to it (no gateway), 192 and 164 of 200 requests carrying a
``traceparent`` got Triton spans in the caller's trace, the others a new trace of Triton's own (a
synchronous client: 119 of 120). So each case sends its request up to ATTEMPTS times, each with a
new client context, checks the gateway's spans every time, and needs Triton's to join at least once.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
import urllib.request

import grpc
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway.dialects import LISTENERS
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

ATTEMPTS = 5
SERVER, CLIENT = trace_pb2.Span.SPAN_KIND_SERVER, trace_pb2.Span.SPAN_KIND_CLIENT
TRITON_SERVICE = "triton-inference-server"


class Receiver:
    """A tiny OTLP/HTTP receiver: every span posted to /v1/traces, as (service, Span)."""

    def __init__(self):
        self.spans: list[tuple[str, trace_pb2.Span]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.add(self.headers.get("content-type", ""), body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, content_type: str, body: bytes) -> None:
        if content_type.startswith("application/json"):
            msg = _from_otlp_json(body)
        else:
            msg = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for rs in msg.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    self.spans.extend((service, span) for span in ss.spans)

    def trace(self, trace_id: str) -> list[tuple[str, trace_pb2.Span]]:
        with self.lock:
            return [(svc, s) for svc, s in self.spans if s.trace_id.hex() == trace_id]

    def wait(self, trace_id: str, done, timeout: float = 10.0) -> list[tuple[str, trace_pb2.Span]]:
        """The trace's spans once ``done(spans)`` holds (exporters batch; Triton's spans come later)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.trace(trace_id)
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def _from_otlp_json(body: bytes) -> trace_service_pb2.ExportTraceServiceRequest:
    """OTLP JSON is protobuf's JSON mapping except that trace and span ids are hex, not base64."""
    doc = json.loads(body)
    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = _b64(bytes.fromhex(span[key]))
    return json_format.ParseDict(doc, trace_service_pb2.ExportTraceServiceRequest(), ignore_unknown_fields=True)


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(scope="module")
def traced_stack(receiver, tmp_path_factory):
    """Triton with OpenTelemetry tracing into the receiver, and a gateway tracing into it too."""
    work = tmp_path_factory.mktemp("traced")
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
                      workdir=str(ROOT / ".run" / "test-triton-traced"), http_port=free_port(),
                      grpc_port=free_port(), metrics_port=free_port(), startup_timeout_s=180)
    trace_args = ["--trace-config", "mode=opentelemetry", "--trace-config", "rate=1",
                  "--trace-config", "level=TIMESTAMPS",
                  "--trace-config", f"opentelemetry,url={receiver.url.removeprefix('http://')}",
                  "--trace-config", "opentelemetry,bsp_schedule_delay=100"]
    prepare = localtriton.prepare
    with pytest.MonkeyPatch.context() as mp:  # the same start-up as the session's Triton, plus tracing
        mp.setattr(localtriton, "prepare", lambda c, root: (lambda cmd_env: (cmd_env[0] + trace_args,
                                                                              cmd_env[1]))(prepare(c, root)))
        triton = localtriton.start(cfg, ROOT, log_path=work / "triton.log")
    dialects: dict = {}
    for f in sorted((ROOT / "tests" / "config").glob("*.yaml")):
        dialects.update((yaml.safe_load(f.read_text()) or {}).get("dialects") or {})
    extra = {"dialects": dialects, "tracing": {"enabled": True, "endpoint": receiver.url,
                                               "export_interval_ms": 100, "service_name": "gateway-under-test"}}
    gw = start_gateway(gateway_config(triton.grpc_target, {n: free_port() for n in LISTENERS}, extra), work)
    yield gw
    stop_gateway(gw)
    triton.stop()


def _context() -> tuple[str, str, str]:
    """A client's own span: (trace id, span id, traceparent)."""
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _joined(spans) -> bool:
    """The gateway's server span and a Triton span parented on a gateway client span are there."""
    clients = {s.span_id for svc, s in spans if svc == "gateway-under-test" and s.kind == CLIENT}
    return any(svc == "gateway-under-test" and s.kind == SERVER for svc, s in spans) and any(
        svc == TRITON_SERVICE and s.parent_span_id in clients for svc, s in spans)


def _check(receiver: Receiver, send, triton_method: str, server_name: str, keep: str = ""):
    """``send(traceparent)`` with a new client context until Triton's spans join (see the docstring);
    the gateway's side is checked on every attempt. The joined trace's server span and Triton's roots."""
    for _ in range(ATTEMPTS):
        trace_id, client_span, traceparent = _context()
        send(traceparent)
        spans = receiver.wait(trace_id, _joined)
        ours = [s for svc, s in spans if svc == "gateway-under-test"]
        theirs = [s for svc, s in spans if svc == TRITON_SERVICE]
        servers = [s for s in ours if s.kind == SERVER]
        assert len(servers) == 1, [(s.name, s.kind) for s in ours]
        server = servers[0]
        assert server.name == server_name
        assert server.parent_span_id.hex() == client_span  # continues the client's span
        calls = [s for s in ours if s.kind == CLIENT and s.name.endswith("/" + triton_method)]
        assert calls and all(c.parent_span_id == server.span_id for c in calls)
        if not theirs:
            continue  # Triton started a trace of its own this time
        # Triton's request span hangs under the gateway's client span; its own spans under that one
        roots = [s for s in theirs if s.parent_span_id in {c.span_id for c in calls}]
        assert roots, [(s.name, s.parent_span_id.hex()) for s in theirs]
        ids = {s.span_id for s in ours} | {s.span_id for s in theirs}
        assert all(s.parent_span_id in ids for s in theirs)
        if keep:
            _keep(spans, keep)
        return server, roots
    raise AssertionError(f"Triton's spans never joined the client's trace in {ATTEMPTS} requests")


def _keep(spans, name: str) -> None:
    """The joined trace as JSON in .run/trace-<name>.json (tools/trace_picture.py draws it)."""
    out = ROOT / ".run" / f"trace-{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps([{"service": svc, "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(), "parent_span_id": s.parent_span_id.hex(),
                                "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano}
                               for svc, s in spans], indent=1))


def test_tf_rest_predict_is_one_trace_with_tritons_spans(traced_stack, receiver):
    def send(traceparent):
        req = urllib.request.Request(
            traced_stack.url("tfserving_rest") + "/v1/models/saved_model_half_plus_three:predict",
            data=b'{"instances": [1.0, 2.0, 5.0]}', headers={"traceparent": traceparent})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read()) == {"predictions": [3.5, 4.0, 5.5]}

    server, roots = _check(receiver, send, "ModelInfer", "POST /<path:path>", keep="tfserving-rest")
    attrs = {a.key: a.value for a in server.attributes}
    assert attrs["gateway.dialect"].string_value == "tfserving"
    assert attrs["gateway.model"].string_value == "saved_model_half_plus_three"
    assert attrs["http.response.status_code"].int_value == 200
    assert any(s.name == "InferRequest" for s in roots)


def test_grps_grpc_predict_is_one_trace_with_tritons_spans(traced_stack, receiver):
    def send(traceparent):
        with grpc.insecure_channel(traced_stack.target("grps_grpc")) as channel:
            r = grps_pb2_grpc.GrpsServiceStub(channel).Predict(
                grps_pb2.GrpsMessage(str_data="hello"), metadata=(("traceparent", traceparent),), timeout=30)
        assert r.str_data == "hello"

    server, _ = _check(receiver, send, "ModelInfer", "grps.protos.v1.GrpsService/Predict")
    attrs = {a.key: a.value for a in server.attributes}
    assert attrs["rpc.system"].string_value == "grpc" and attrs["gateway.listener"].string_value == "grps_grpc"


def test_openai_stream_is_one_trace_with_tritons_spans(traced_stack, receiver):
    client = openai.OpenAI(base_url=traced_stack.url("mindie_http") + "/v1", api_key="unused", max_retries=0)

    def send(traceparent):
        chunks = list(client.chat.completions.create(
            model="llama2_7b", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=5,
            extra_headers={"traceparent": traceparent}))
        assert chunks

    with client:
        server, _ = _check(receiver, send, "ModelStreamInfer", "POST /v1/chat/completions")
    attrs = {a.key: a.value for a in server.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["gen_ai.request.model"].string_value == "tiny_llm"
    assert attrs["gen_ai.usage.output_tokens"].int_value > 0


def test_v2_passthrough_infer_is_one_trace_with_tritons_spans(traced_stack, receiver):
    client = grpcclient.InferenceServerClient(traced_stack.target("v2_grpc"))

    def send(traceparent):
        x = grpcclient.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32))
        result = client.infer("saved_model_half_plus_three", [x], headers={"traceparent": traceparent})
        assert result.as_numpy("y").tolist() == [3.5, 4.0, 5.5]

    _check(receiver, send, "ModelInfer", "inference.GRPCInferenceService/ModelInfer")
    client.close()
