"""The one scripted Upstream of the unit tests (it implements gateway.upstream.Upstream).

    FakeUpstream(
        metas=[ModelMetadata...],   what model_metadata / model_ready / repository_index serve
        script=[...],               what stream() yields: InferResponse items, a GatewayError raises
        infer=fn(req) -> resp,      what infer() answers (default: UNAVAILABLE, i.e. not scripted)
        index=[ModelIndexEntry...], the repository index (default: one READY version per meta)
        ready=True,                 server readiness
        hold=asyncio.Event(),       infer() and stream() wait for it first (requests kept in flight)
    )

Every request is recorded in ``requests`` as ``(request, timeout)``.

Where a test needs Triton's gRPC port itself (the V2 passthrough, health, tracing, TLS), or only an
address for a worker whose upstream is a FakeUpstream, ``fake_triton(*handlers)`` serves the
handlers (grpc.GenericRpcHandler: the test's scripted Triton) on a free 127.0.0.1 port.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from gateway.call import current
from gateway.core import datatypes
from gateway.core.errors import ErrorKind, GatewayError, not_found
from gateway.core.tensors import (
    InferRequest,
    InferResponse,
    ModelIndexEntry,
    ModelMetadata,
    Tensor,
    TensorSpec,
)
from gateway.upstream import wire
from gateway.upstream.unary import over_grpc

TRTLLM_INPUTS = ("text_input", "max_tokens", "stream", "temperature", "top_p", "top_k", "seed",
                 "repetition_penalty", "stop_words", "exclude_input_in_output")


def trtllm_meta(name: str = "llm", extra: tuple[str, ...] = ()) -> ModelMetadata:
    ins = tuple(TensorSpec(n, "BYTES", (-1, 1)) for n in TRTLLM_INPUTS + extra)
    outs = (TensorSpec("text_output", "BYTES", (-1, -1)),)
    return ModelMetadata(name, ("1",), "python", ins, outs, max_batch_size=8, decoupled=True)


def vllm_meta(name: str = "vllm_model") -> ModelMetadata:
    ins = tuple(TensorSpec(n, "BYTES", (1,)) for n in
                ("text_input", "stream", "sampling_parameters", "exclude_input_in_output", "return_finish_reason"))
    outs = (TensorSpec("text_output", "BYTES", (-1,)), TensorSpec("finish_reason", "BYTES", (-1,)))
    return ModelMetadata(name, ("1",), "vllm", ins, outs, decoupled=True)


def text_response(text: str, final: bool = False, name: str = "text_output", **extra) -> InferResponse:
    outs = [Tensor(name, np.array([[text.encode()]], dtype=object), "BYTES")]
    for key, value in extra.items():
        if isinstance(value, str):
            outs.append(Tensor(key, np.array([value.encode()], dtype=object), "BYTES"))
        else:
            outs.append(Tensor(key, np.array([value], dtype=np.uint32)))
    return InferResponse("llm", "1", outs, final=final)


@contextlib.asynccontextmanager
async def fake_triton(*handlers: grpc.GenericRpcHandler, options=None,
                      credentials: grpc.ServerCredentials | None = None) -> AsyncIterator[tuple[grpc.aio.Server, str]]:
    """(server, "127.0.0.1:port"): a grpc.aio server answering with ``handlers`` (none: a server that
    knows no method) on a free loopback port, over TLS with ``credentials``; stopped at the end."""
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers(handlers)
    address = "127.0.0.1:0"
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    await server.start()
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def _deadline(stream: bool = False) -> float | None:
    """The seconds a real upstream call would be given: the current request's (None outside one)."""
    call = current()
    return call.remaining(stream) if call is not None else None

def _from_raw(raw: bytes, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype == "BYTES":
        return datatypes.decode_bytes(raw, shape)
    return np.frombuffer(raw, dtype=datatypes.by_v2(datatype).numpy).reshape(shape)


class FakeUpstream:
    def __init__(self, script=None, metas=None, *, infer: Callable[[InferRequest], InferResponse] | None = None,
                 index: list[ModelIndexEntry] | None = None, ready: bool = True, hold: asyncio.Event | None = None):
        self.script = list(script or [])
        self.metas = {m.name: m for m in (metas if metas is not None else [trtllm_meta()])}
        self._infer = infer
        self.index = index
        self.ready = ready
        self.hold = hold
        self.requests: list[tuple[InferRequest, float | None]] = []
        self.closed = 0
        self.consumed = 0
        self.shared: int | None = None  # shared_from(): inputs from this size go through shared memory
        self.wired = 0  # requests that came as ModelInfer bytes (infer_bytes)

    async def connect(self) -> None:
        pass

    channel = None  # a fake with a gRPC server standing in for Triton sets its channel here

    def unary(self, method: str, serializer=None, deserializer=None, cancel: bool | None = None):
        return over_grpc(self.channel, method, serializer, deserializer, True if cancel is None else cancel)

    def relay(self, method: str, cancel: bool | None = None):
        """The V2 passthrough's unary call (TritonUpstream.relay), on ``channel`` as grpc.aio makes it."""
        call = self.unary(method, cancel=cancel)
        return lambda request, timeout, metadata: call(request, timeout=timeout, metadata=metadata)

    def relay_now(self, method: str, cancel: bool | None = None):
        """None: the fake's relayed calls are awaited (``relay``), as under upstream.transport grpc."""
        return None

    def relay_stream(self, method: str):
        """The V2 passthrough's ModelStreamInfer (TritonUpstream.relay_stream), grpc.aio's stream call."""

        async def open_call(timeout, metadata):
            return self.channel.stream_stream(method)(timeout=timeout, metadata=metadata)

        return open_call

    async def stream_one(self, request: bytes, deserialize, timeout: float, metadata=None):
        """ModelStreamInfer of one request (TritonUpstream.stream_one), grpc.aio's stream call on ``channel``."""
        multicallable = self.channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                                   response_deserializer=deserialize)
        return multicallable(iter((request,)), timeout=timeout, metadata=metadata)

    def body_buffer(self, size: int):
        return None  # large bodies in a buffer of the edge's own

    def shared_from(self):
        return self.shared

    def shared_arena(self):
        return None  # a fake Triton maps no region: every input on the wire

    async def close(self) -> None:
        pass

    async def infer(self, req, views: bool = False):
        self.requests.append((req, _deadline()))
        if self.hold is not None:
            await self.hold.wait()
        if self._infer is None:
            raise GatewayError(ErrorKind.UNAVAILABLE, "no infer scripted")
        return self._infer(req)

    async def infer_bytes(self, model: str, request: wire.Planned) -> bytes:
        """``infer`` of a planned request: written with the call's request id (as the real upstream
        stamps it), recorded and answered as ``infer``'s (the bytes decoded), the answer as Triton's
        ModelInferResponse bytes with raw contents."""
        self.wired += 1
        call = current()
        msg = service_pb2.ModelInferRequest.FromString(request.write(call.request_id if call is not None else ""))
        assert msg.model_name == model
        tensors = [Tensor(t.name, _from_raw(raw, t.datatype, tuple(t.shape)), t.datatype)
                   for t, raw in zip(msg.inputs, msg.raw_input_contents, strict=True)]
        req = InferRequest(msg.model_name, tensors, msg.model_version, [o.name for o in msg.outputs], id=msg.id)
        resp = await self.infer(req)
        out = service_pb2.ModelInferResponse(model_name=resp.model, model_version=resp.version, id=resp.id)
        for t in resp.outputs:
            out.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
            out.raw_output_contents.append(datatypes.encode_bytes(t.data) if t.datatype == "BYTES"
                                           else np.ascontiguousarray(t.data).tobytes())
        return out.SerializeToString()

    async def stream(self, req):
        self.requests.append((req, _deadline(stream=True)))
        try:
            if self.hold is not None:
                await self.hold.wait()
            for item in self.script:
                if isinstance(item, GatewayError):
                    raise item
                self.consumed += 1
                yield item
            yield InferResponse(req.model, "1", [], final=True)
        finally:
            self.closed += 1

    async def model_metadata(self, model, version=""):
        try:
            return self.metas[model]
        except KeyError:
            raise not_found(f"Request for unknown model: '{model}' is not found") from None

    async def model_config(self, model, version=""):
        await self.model_metadata(model, version)
        return {"name": model}

    async def repository_index(self):
        if self.index is not None:
            return list(self.index)
        return [ModelIndexEntry(n, "1", "READY") for n in self.metas]

    def cached_index(self):
        return None  # nothing is cached: every resolution asks (repository_index)

    def cached_metadata(self, model, version=""):
        return None

    async def server_ready(self):
        return self.ready

    async def server_metadata(self):
        return {"name": "fake", "version": "0", "extensions": []}

    async def model_ready(self, model, version=""):
        return model in self.metas


class FakeDNS:
    """A minimal authoritative DNS server on loopback UDP: `name` -> A records `addresses`; any
    other question gets an empty NOERROR answer. Enough for grpc's c-ares resolver."""

    def __init__(self, name: str, addresses: list[str]):
        import socket
        import threading

        self.name, self.addresses, self.queries = name.lower(), addresses, []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import struct

        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            pos, labels = 12, []
            while data[pos]:
                labels.append(data[pos + 1:pos + 1 + data[pos]].decode())
                pos += 1 + data[pos]
            qtype = struct.unpack(">H", data[pos + 1:pos + 3])[0]
            question = data[12:pos + 5]
            name = ".".join(labels).lower()
            self.queries.append((name, qtype))
            answers = self.addresses if (name == self.name and qtype == 1) else []
            flags = 0x8180 if name == self.name else 0x8183  # NOERROR, or NXDOMAIN for other names
            out = struct.pack(">HHHHHH", struct.unpack(">H", data[:2])[0], flags, 1, len(answers), 0, 0) + question
            for addr in answers:
                out += struct.pack(">HHHIH", 0xC00C, 1, 1, 1, 4) + bytes(int(b) for b in addr.split("."))
            self.sock.sendto(out, peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
