"""The upstream client: KServe V2 gRPC to Triton, on the HTTP/2 client (gateway/h2/client.py) or,
with ``upstream.transport: grpc``, grpc.aio.

One ``TritonUpstream`` per worker process, connected inside the running loop (never at import
time). Every grpc error is turned into a ``GatewayError`` here (``_translate``), so nothing above
this package sees grpc. Idempotent calls (metadata, readiness, config, index) retry on UNAVAILABLE
with tenacity (``_idempotent``); inference is never retried behind the caller's back.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any, Protocol

import grpc
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential
from tritonclient.grpc import service_pb2

from gateway.call import current
from gateway.core.errors import GRPC_STATUS, ErrorKind, GatewayError, from_grpc_code
from gateway.core.tensors import InferRequest, InferResponse, ModelIndexEntry, ModelMetadata
from gateway.h2 import client as h2call
from gateway.observe import metrics, tracing

from . import cancel, codec, shm, wire
from .unary import UnaryCall, over_grpc, over_h2

# Message sizes on the upstream hop as large as Triton's own (the 4 MiB grpc default breaks real
# tensors): requests unlimited, answers up to INT32_MAX, Triton's gRPC maximum (upstream.max_answer_bytes)
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", h2call.MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    # Triton restarts (deploys, OOM kills): reconnect within ~2 s instead of grpc's 120 s backoff cap
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


def keepalive() -> h2call.Keepalive:
    """CHANNEL_OPTIONS' keepalive for the h2 channel (gateway/h2/client.py), so that both
    transports ping Triton alike: one place holds the figures."""
    opts = dict(CHANNEL_OPTIONS)
    return h2call.Keepalive(opts["grpc.keepalive_time_ms"] / 1000, opts["grpc.keepalive_timeout_ms"] / 1000,
                            bool(opts["grpc.keepalive_permit_without_calls"]))


LB_POLICIES = ("pick_first", "round_robin")
SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]


def methods(channel: grpc.aio.Channel | None, unary: Callable[..., UnaryCall],
            cancel_unary: bool = True) -> SimpleNamespace:
    """Triton's RPCs by name, with the serializers of its generated stub but not as registered
    methods, which cost every call more with grpcio 1.85 (gateway/ops/grpchealth.py,
    ``ServiceNames``). A unary RPC is made by ``unary(path, serializer, deserializer, cancel)``, the
    transport's (gateway/upstream/unary.py; ``cancel_unary``: a caller that goes away cancels it);
    a streaming one is grpc.aio's multicallable on ``channel`` (none without a channel: the HTTP/2
    client makes its streams itself)."""
    rpcs = {}
    for m in SERVICE.methods:
        path = f"/{SERVICE.full_name}/{m.name}"
        serializer = getattr(service_pb2, m.input_type.name).SerializeToString
        deserializer = getattr(service_pb2, m.output_type.name).FromString
        if not (m.client_streaming or m.server_streaming):
            rpcs[m.name] = unary(path, serializer, deserializer, cancel_unary)
        elif channel is not None:
            kind = {(False, True): channel.unary_stream, (True, False): channel.stream_unary,
                    (True, True): channel.stream_stream}[m.client_streaming, m.server_streaming]
            rpcs[m.name] = kind(path, request_serializer=serializer, response_deserializer=deserializer)
    return SimpleNamespace(**rpcs)


MODEL_INFER = f"/{SERVICE.full_name}/ModelInfer"


_PATHS = frozenset(f"/{SERVICE.full_name}/{m.name}" for m in SERVICE.methods)  # Triton's own methods


def channel_options(lb_policy: str = "pick_first", max_answer: int = h2call.MAX_MESSAGE) -> tuple[tuple[str, Any], ...]:
    """CHANNEL_OPTIONS plus the load-balancing policy, as a service config.

    ``round_robin`` spreads calls over every address the target resolves to: several Triton
    replicas behind one ``dns:///name:port`` (a headless Service) or an ``ipv4:a:p,b:p`` list.
    Streams stay on the replica they started on; each new call picks the next ready one.
    """
    if lb_policy not in LB_POLICIES:
        raise ValueError(f"lb_policy must be one of {LB_POLICIES}, not {lb_policy!r}")
    config = json.dumps({"loadBalancingConfig": [{lb_policy: {}}]})
    options = tuple(("grpc.max_receive_message_length", max_answer) if k == "grpc.max_receive_message_length"
                    else (k, v) for k, v in CHANNEL_OPTIONS)
    return (*options, ("grpc.service_config", config))


class Upstream(Protocol):
    """What the dialects need from Triton, in neutral terms (fakes implement this in unit tests)."""

    async def infer(self, req: InferRequest, views: bool = False) -> InferResponse:
        """ModelInfer; ``views``: BYTES elements of a large answer as memoryviews of the bytes gRPC
        received (``wire.decode_response``), for a caller that writes them out as they are."""
        ...

    async def infer_bytes(self, model: str, request: wire.Planned) -> bytes:
        """ModelInfer of a request planned as wire bytes (``wire.Planned``), written here with the
        call's request id as ``infer`` stamps it, under ``infer``'s deadline, errors, metrics and
        tracing: the ModelInferResponse's bytes as gRPC received them (``wire.parse_answer`` parses
        them; a planned request's answers are read by their learned form, ``wire.AnswerForm``)."""
        ...

    def stream(self, req: InferRequest) -> AsyncIterator[InferResponse]: ...

    def unary(self, method: str, serializer: Callable[[Any], bytes] | None = None,
              deserializer: Callable[[bytes], Any] | None = None, cancel: bool | None = None) -> UnaryCall:
        """``call(request, *, timeout=None, metadata=None)``: the unary RPC ``method`` to Triton,
        made as the gateway's own calls are (on the worker's transport: gateway/upstream/unary.py),
        for a dialect that writes a V2 call itself (the V2 gRPC passthrough: ``relay``). ``cancel``:
        whether a caller that goes away cancels it (None: as ``upstream.cancel`` says; True where the edge never cancels its caller, an h2
        listener's unary-unary handler under streams or none: no shield needed)."""
        ...

    def relay(self, method: str, cancel: bool | None = None) -> Callable[[bytes, float, Any], Awaitable[bytes]]:
        """The V2 passthrough's unary call ``method`` on bytes: ``call(request, timeout, metadata)``."""
        ...

    def relay_now(self, method: str, cancel: bool | None = None) -> Callable[..., Any] | None:
        """``relay``'s call begun at once, not awaited: ``start(request, timeout, metadata, done)``,
        ``done`` given the answer's bytes or the AioRpcError; it returns what ``cancel``s the call, or
        None where the call cannot begin at once (``relay``'s then). None: no such calls here."""
        ...

    def relay_stream(self, method: str) -> Callable[[float, Any], Awaitable[Any]]:
        """The V2 passthrough's ModelStreamInfer on bytes: ``await open(timeout, metadata)``, a call both ways."""
        ...

    async def stream_one(self, request: bytes, deserialize: Callable[[bytes], Any], timeout: float, metadata=None):
        """ModelStreamInfer of one request's wire bytes (half-closed with it), its answers ``deserialize``d
        as they come: a call to iterate, ``cancel`` and hand to ``cancel.finish``."""
        ...

    def body_buffer(self, size: int) -> tuple[memoryview, Callable[[], None]] | None:
        """Where a large HTTP body is best read (``Edge.bodies``): a writable view and the function
        that gives it back, or None (a buffer of the caller's own)."""
        ...

    def shared_arena(self):
        """The shared-memory region (``shm.Arena``) in which a caller writing its own ModelInfer bytes
        places its large inputs (``wire.serialize_message``); None: every input on the wire."""
        ...

    def shared_from(self) -> int | None:
        """The size from which ``infer`` hands an input to Triton through shared memory (None: never);
        a caller writing its own request bytes for ``infer_bytes`` writes only smaller inputs."""
        ...

    async def model_metadata(self, model: str, version: str = "") -> ModelMetadata: ...

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]: ...

    async def model_ready(self, model: str, version: str = "") -> bool: ...

    async def server_ready(self) -> bool: ...

    async def server_metadata(self) -> dict[str, Any]: ...

    async def repository_index(self) -> list[ModelIndexEntry]: ...

    def cached_index(self) -> list[ModelIndexEntry] | None:
        """``repository_index()``'s value while it is fresh in the cache, without a call (None: not cached)."""
        ...

    def cached_metadata(self, model: str, version: str = "") -> ModelMetadata | None:
        """``model_metadata()``'s value while it is fresh in the cache, without a call (None: not cached)."""
        ...


class _translate:  # noqa: N801 - used as a context manager, like contextlib's
    """Re-raise grpc errors as GatewayError (foreign exceptions never escape); with ``method``, time
    the call (``gateway_upstream_request_duration_seconds{method, model, code}``). A class rather
    than a @contextmanager generator: it wraps every Triton call, and costs a third as much."""

    __slots__ = ("method", "model", "start")

    def __init__(self, method: str = "", model: str = ""):
        self.method, self.model = method, model

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, kind, exc, _tb) -> bool:
        code = "OK"
        try:
            if exc is None:
                return False
            if isinstance(exc, grpc.aio.AioRpcError):
                code = exc.code().name
                raise from_grpc_code(exc.code(), exc.details()) from None
            if isinstance(exc, asyncio.TimeoutError):
                code = "DEADLINE_EXCEEDED"
                raise GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
            if isinstance(exc, GatewayError):  # an in-stream error_message (the call itself ended OK)
                code = GRPC_STATUS[exc.kind].name
            elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):  # caller gone, stream closed early
                code = "CANCELLED"
            return False
        finally:
            if self.method:
                metrics.observe_upstream(self.method, self.model, code, time.perf_counter() - self.start)


async def _unconnected(*_args, **_kw):
    """``infer_bytes``'s call before ``connect()`` (and after ``close()``)."""
    raise GatewayError(ErrorKind.INTERNAL, "upstream used before connect()")


def _is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, GatewayError) and exc.kind is ErrorKind.UNAVAILABLE


def _stream_error(message: str) -> GatewayError:
    """In-stream errors carry only text; classify the few shapes Triton uses for client mistakes."""
    low = message.lower()
    if "unknown model" in low or "is not found" in low:
        return GatewayError(ErrorKind.NOT_FOUND, message)
    client_words = ("expected", "unexpected", "invalid", "must", "mismatch", "does not match", "unable to parse")
    if any(w in low for w in client_words):
        return GatewayError(ErrorKind.INVALID_ARGUMENT, message)
    return GatewayError(ErrorKind.UPSTREAM_FAILED, message)


RETRY_WAIT_S, RETRY_WAIT_MAX_S = 0.05, 0.5  # an idempotent call's waits before its retries: doubling, capped
REFRESH_AHEAD = 0.75  # of cache_ttl: a cached entry this old is fetched again behind the request that reads it


class _TTLCache:
    def __init__(self, ttl: float):
        self.ttl = ttl
        self._data: dict[tuple, tuple[float, Any]] = {}

    def get(self, key: tuple) -> Any | None:
        hit = self._data.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        return None

    def lookup(self, key: tuple) -> tuple[Any | None, bool]:
        """``get`` and whether the fresh entry is in the last quarter of its life (time to fetch it
        again behind it), from one look at the entry and the clock."""
        hit = self._data.get(key)
        if hit is not None:
            age = time.monotonic() - hit[0]
            if age < self.ttl:
                return hit[1], age >= REFRESH_AHEAD * self.ttl
        return None, False

    def forget(self, key: tuple) -> None:
        self._data.pop(key, None)

    def put(self, key: tuple, value: Any) -> Any:
        if len(self._data) > 1024:  # bounded: drop everything rather than grow without limit
            self._data.clear()
        self._data[key] = (time.monotonic(), value)
        return value


class TritonUpstream:
    """Deadlines and request ids: a call made while the edge handles a request takes the request's
    remaining deadline (gateway.call: the listener's, or the client's when shorter) and, when the
    request has no id of its own, the edge's request id; outside a request, ``default_timeout`` /
    ``stream_timeout`` apply."""

    def __init__(self, target: str, *, default_timeout: float = 60.0, cache_ttl: float = 2.0, retries: int = 3,
                 stream_timeout: float = 600.0, lb_policy: str = "pick_first",
                 credentials: grpc.ChannelCredentials | None = None, extra_options: tuple = (),
                 shared_memory: tuple[int, int] | None = None,
                 h2: h2call.Channel | None = None, cancel_mode: str = "streams",
                 max_answer_bytes: int = h2call.MAX_MESSAGE):
        self.target = target
        self.options = (*channel_options(lb_policy, max_answer_bytes), *extra_options)
        self.credentials = credentials  # TLS / mTLS to Triton (gateway.access.channel_credentials); None: plaintext
        self.default_timeout = default_timeout
        self.stream_timeout = stream_timeout
        self.retries = retries
        self._cache = _TTLCache(cache_ttl)
        self._pending: dict[tuple, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._channel: grpc.aio.Channel | None = None  # grpc.aio's, made by connect() under upstream.transport: grpc
        self._stub: SimpleNamespace | None = None  # Triton's RPCs (``methods``): None until connect()
        self._model_infer_bytes: UnaryCall = _unconnected
        self._shm_sizes = shared_memory  # (pool_bytes, min_bytes): large inputs through shm.Arena
        self.arena: shm.Arena | None = None
        self._arena_opening: asyncio.Task | None = None
        self._h2 = h2  # upstream.transport h2 (the factory's choice): the calls as HTTP/2 frames on the loop (h2call.py)
        # upstream.cancel (gateway/upstream/cancel.py): what a caller that goes away cancels (the factory gives
        # the h2 channel the same, h2call.Channel cancel_unary)
        self.cancel_mode = cancel_mode
        self._cancel_unary = cancel.unary_cancelled(cancel_mode)
        self._cancel_streams = cancel.streams_cancelled(cancel_mode)

    # -- lifecycle -------------------------------------------------------------------------
    async def connect(self) -> None:
        """Make the calls in the running loop (call from a server-start hook); grpc.aio's channel only
        for ``upstream.transport: grpc``: on the HTTP/2 client nothing rides on it."""
        if self._stub is None:
            # the one choice of transport for every call (the HTTP/2 client, else grpc.aio's channel,
            # which then also carries the streams: the V2 passthrough's, V2 REST's, ``stream``'s)
            if self._h2 is None:
                self._grpc_channel()
            self._unary_of = self._h2_unary if self._h2 is not None else self._grpc_unary
            self._stub = methods(self._channel, self._unary_of, self._cancel_unary)
            # ModelInfer with requests written as wire bytes (wire.serialize_request, wire.Planned),
            # answers as gRPC received them (wire.parse_answer: a large answer's tensor data not copied)
            self._model_infer_bytes = self._unary_of(MODEL_INFER, None, None, self._cancel_unary)
            if self._shm_sizes is not None and self.arena is None:
                # registered in the background: a worker starts at once, Triton up or not
                self.arena = shm.Arena(*self._shm_sizes, register=self._shm_register,
                                       unregister=self._shm_unregister, transient=_is_unavailable)
                self._arena_opening = asyncio.ensure_future(self._open_arena())

    def _grpc_channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            if self.credentials is not None:
                self._channel = grpc.aio.secure_channel(self.target, self.credentials, options=self.options)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=self.options)
        return self._channel

    def _h2_unary(self, method: str, serializer, deserializer, cancel: bool) -> UnaryCall:
        return over_h2(self._h2, method, serializer, deserializer, cancel)

    def _grpc_unary(self, method: str, serializer, deserializer, cancel: bool) -> UnaryCall:
        return over_grpc(self._channel, method, serializer, deserializer, cancel)

    def body_buffer(self, size: int):
        """Where a large HTTP body is best read (``Edge.bodies``): a slice of the shared-memory region,
        so that a tensor which is that body goes to Triton without another copy (shm.Arena.body);
        None without a registered region."""
        arena = self.arena
        return arena.body(size) if arena is not None else None

    def shared_arena(self):
        """The region while this worker has one (registered or being registered again: ``place``
        answers None until it is, and the input goes on the wire)."""
        return self.arena

    def shared_from(self) -> int | None:
        """``upstream.shared_memory.min_bytes`` when it is enabled (the region open or not yet)."""
        return self._shm_sizes[1] if self._shm_sizes is not None else None

    async def _open_arena(self) -> None:
        if not await self.arena.open() and self.arena.discarded:  # refused for good: the wire
            self.arena = None

    async def _shm_register(self, name: str, key: str, size: int) -> None:
        await self._idempotent("SystemSharedMemoryRegister", service_pb2.SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=0, byte_size=size), timeout=5.0)

    async def _shm_unregister(self, name: str) -> None:
        await self._idempotent("SystemSharedMemoryUnregister",
                               service_pb2.SystemSharedMemoryUnregisterRequest(name=name), timeout=5.0)

    async def close(self) -> None:
        if self._arena_opening is not None:
            self._arena_opening.cancel()
        if self.arena is not None:
            await self.arena.close()
            self.arena = None
        if self._h2 is not None:
            await self._h2.close()
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
        self._stub, self._model_infer_bytes = None, _unconnected

    @property
    def channel(self) -> grpc.aio.Channel:
        """grpc.aio's channel to Triton, for a call only grpc.aio makes (a streaming method other than
        ModelStreamInfer on the HTTP/2 transport: made at its first use)."""
        if self._stub is None:
            raise GatewayError(ErrorKind.INTERNAL, "upstream channel used before connect()")
        return self._grpc_channel()

    def unary(self, method: str, serializer: Callable[[Any], bytes] | None = None,
              deserializer: Callable[[bytes], Any] | None = None, cancel: bool | None = None) -> UnaryCall:
        cancel = self._cancel_unary if cancel is None else cancel
        if self._stub is None:
            raise GatewayError(ErrorKind.INTERNAL, "upstream channel used before connect()")
        return self._unary_of(method, serializer, deserializer, cancel)

    def relay(self, method: str, cancel: bool | None = None) -> Callable[[bytes, float, Any], Awaitable[bytes]]:
        """The V2 passthrough's unary call ``method``: ``call(request, timeout, metadata)``, the
        request's and the answer's bytes as they are, or AioRpcError with Triton's code, details and
        trailing metadata; on the h2 channel where there is one (``upstream.transport: h2``), else
        ``unary``'s grpc.aio call. ``cancel``: as ``unary``'s."""
        if self._h2 is None:
            call = self.unary(method, cancel=cancel)
            return lambda request, timeout, metadata: call(request, timeout=timeout, metadata=metadata)
        blocks, cancel, send = *self._on_h2(method, cancel), self._h2.call
        return lambda request, timeout, metadata: send(request, timeout, blocks, metadata, cancel)

    def relay_now(self, method: str, cancel: bool | None = None) -> Callable[..., Any] | None:
        """``relay``'s call begun at once on the h2 channel (``Channel.start``: the answer handed to a
        callback in the turn it is read, no task); None under ``upstream.transport: grpc``."""
        if self._h2 is None:
            return None
        blocks, cancel, start = *self._on_h2(method, cancel), self._h2.start
        return lambda request, timeout, metadata, done: start(request, timeout, blocks, metadata, cancel, done)

    def _on_h2(self, method: str, cancel: bool | None) -> tuple[list[bytes], bool]:
        """A relayed method's header blocks on the h2 channel (kept for Triton's own methods only: a
        client's made-up name must not grow the map) and its cancel setting."""
        return self._h2.blocks(method, method in _PATHS), self._cancel_unary if cancel is None else cancel

    async def stream_one(self, request: bytes, deserialize: Callable[[bytes], Any], timeout: float, metadata=None):
        """ModelStreamInfer of one request's wire bytes, sent with the half-close (Triton answers on, a
        decoupled model's responses all), its answers ``deserialize``d as they come: h2call.StreamCall
        on the h2 channel, else grpc.aio's stream call (V2 REST's generate and generate_stream)."""
        h2 = self._h2
        if h2 is not None:
            call = h2.stream_call(deserialize, timeout, metadata)
            await call.write(request)
            return call
        multicallable = self.channel.stream_stream(h2call.STREAM_PATH, response_deserializer=deserialize)
        return multicallable(iter((request,)), timeout=timeout, metadata=metadata)

    def relay_stream(self, method: str) -> Callable[[float, Any], Awaitable[Any]]:
        """The V2 passthrough's ModelStreamInfer: ``await open(timeout, metadata)``, a call both ways on
        bytes (``write``, ``done_writing``, ``read``, ``cancel``, async iteration), with its header
        block sent: h2call.StreamCall on the h2 channel, else grpc.aio's stream call."""
        h2 = self._h2
        if h2 is not None and method == h2call.STREAM_PATH:
            return h2.stream
        multicallable = self.channel.stream_stream(method)

        async def open_call(timeout: float, metadata):
            return multicallable(timeout=timeout, metadata=metadata)

        return open_call

    @property
    def stub(self) -> SimpleNamespace:
        if self._stub is None:
            raise GatewayError(ErrorKind.INTERNAL, "upstream used before connect()")
        return self._stub

    def _timeout(self, stream: bool = False) -> float:
        """The one source of a call's deadline: the request's (gateway.call), else the defaults."""
        call = current()
        if call is not None:
            return call.remaining(stream)
        return self.stream_timeout if stream else self.default_timeout

    @staticmethod
    def _request_id(req: InferRequest) -> None:
        if not req.id:
            call = current()
            if call is not None:
                req.id = call.request_id

    @staticmethod
    def _planned(request: wire.Planned) -> bytes:
        """A planned request's wire bytes with the call's request id, as ``_request_id`` stamps ``infer``'s."""
        call = current()
        return request.write(call.request_id if call is not None else "")

    async def _idempotent(self, method: str, request, timeout: float | None = None):
        """A read-only call, retried on UNAVAILABLE (each attempt timed). Still UNAVAILABLE after
        the retries: the cached readiness is forgotten, so that the next ``server_ready`` asks
        Triton (a Triton that just died was otherwise "ready" for up to ``cache_ttl``, and a model's
        metadata it failed to give looked like an unknown model: found by make soak)."""
        rpc = getattr(self.stub, method)
        model = getattr(request, "name", "")
        timeout = timeout or min(self.default_timeout, 10.0)
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_is_unavailable),
                stop=stop_after_attempt(self.retries),
                wait=wait_exponential(multiplier=RETRY_WAIT_S, max=RETRY_WAIT_MAX_S),
                reraise=True,
            ):
                with attempt, _translate(method, model), tracing.upstream(method, model) as md:
                    return await rpc(request, timeout=timeout, metadata=md)
        except GatewayError as err:
            if err.kind is ErrorKind.UNAVAILABLE:
                self._cache.forget(_READY_KEY)
            raise
        raise AssertionError("unreachable")

    # -- inference -------------------------------------------------------------------------
    async def infer(self, req: InferRequest, views: bool = False) -> InferResponse:
        self._request_id(req)
        answer = await shm.send_placed(self.arena, lambda arena, leases: wire.serialize_request(req, arena, leases),
                                       lambda data: self.infer_bytes(req.model, data))
        return wire.decode_response(*wire.parse_answer(answer), views)

    async def infer_bytes(self, model: str, data: wire.Planned | bytes) -> bytes:
        """ModelInfer of a planned request (its id stamped here: ``_planned``) or of one already in
        wire bytes (``infer``'s): the answer's bytes as gRPC received them."""
        if type(data) is wire.Planned:
            data = self._planned(data)
        with _translate("ModelInfer", model), tracing.upstream("ModelInfer", model) as md:
            return await self._model_infer_bytes(data, timeout=self._timeout(), metadata=md)

    async def stream(self, req: InferRequest) -> AsyncIterator[InferResponse]:
        """ModelStreamInfer for one request: yields each response, ends on triton_final_response.

        Closing the generator early (client gone, task cancelled) cancels the call, which Triton
        passes on to the model (``response_sender.is_cancelled()``); with ``upstream.cancel: none``
        the call is read to its end instead (gateway/upstream/cancel.py). A stream whose final
        response was read is left to end with Triton's trailers.
        """
        self._request_id(req)
        if not req.id:
            req.id = f"gw-{next(self._ids)}"
        msg = wire.encode_request(req, stream=True)
        with tracing.upstream("ModelStreamInfer", req.model) as md:
            if self._h2 is not None:  # as HTTP/2 frames on the loop (h2call.StreamCall), traced or not
                call = self._h2.stream_call(service_pb2.ModelStreamInferResponse.FromString, self._timeout(stream=True),
                                            md)
            else:
                call = self.stub.ModelStreamInfer(timeout=self._timeout(stream=True), metadata=md)
            final = False
            reader = None if self._cancel_streams else cancel.Reader(call)
            read = call.read if reader is None else reader.read
            try:
                with _translate("ModelStreamInfer", req.model):
                    await call.write(msg)
                    while True:
                        item = await read()
                        if item is grpc.aio.EOF:
                            raise GatewayError(ErrorKind.UPSTREAM_FAILED, "stream ended without a final response")
                        if item.error_message:
                            raise _stream_error(item.error_message)
                        resp = wire.decode_response(item.infer_response)
                        final = resp.final
                        if resp.outputs or not final:
                            yield resp
                        if final:
                            if not resp.outputs:
                                yield resp  # an empty final marker: consumers see the end explicitly
                            break
                    await call.done_writing()
            finally:  # the final response read: left to end with its trailers; else cancelled (upstream.cancel)
                cancel.finish(call, final, self._cancel_streams, reader)

    # -- metadata and health (idempotent, cached briefly) ------------------------------------
    async def _cached(self, key: tuple, produce: Callable[[], Awaitable[Any]]) -> Any:
        """A fresh cached value, else one fetch shared by every concurrent caller (single flight)."""
        hit, ageing = self._cache.lookup(key)
        if hit is not None:
            if ageing and key not in self._pending:
                self._refresh_behind(key, produce)
            return hit
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(produce())
            pending.add_done_callback(lambda _f: self._pending.pop(key, None))
        # a cancelled or timed-out caller does not cancel the others' fetch; each caller waits no
        # longer than its own request's deadline (the fetch itself has a fixed one, see _idempotent)
        call = current()
        if call is None:
            value = await asyncio.shield(pending)
        else:
            try:
                value = await asyncio.wait_for(asyncio.shield(pending), call.remaining())
            except TimeoutError:
                raise GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        return self._cache.put(key, value)

    def _refresh_behind(self, key: tuple, produce: Callable[[], Awaitable[Any]]) -> None:
        """A fresh entry near its end fetched again in the background (single flight with ``_cached``):
        under steady traffic no request waits for Triton's metadata round trips (two for a model's
        metadata) once every ``cache_ttl``, and no value older than ``cache_ttl`` is ever served. A
        failed refresh leaves the entry to expire; the request after it fetches in-line and sees why."""
        pending = self._pending[key] = asyncio.ensure_future(produce())

        def done(f: asyncio.Future) -> None:
            self._pending.pop(key, None)
            if not f.cancelled() and f.exception() is None:
                self._cache.put(key, f.result())

        pending.add_done_callback(done)

    async def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        async def fetch() -> ModelMetadata:
            req = {"name": model, "version": version}
            meta = await self._idempotent("ModelMetadata", service_pb2.ModelMetadataRequest(**req))
            cfg = await self._idempotent("ModelConfig", service_pb2.ModelConfigRequest(**req))
            return codec.decode_metadata(meta, cfg.config)

        return await self._cached(_meta_key(model, version), fetch)

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        async def fetch() -> dict[str, Any]:
            cfg = await self._idempotent("ModelConfig", service_pb2.ModelConfigRequest(name=model, version=version))
            return codec.config_to_dict(cfg.config)

        return await self._cached(("config", model, version), fetch)

    async def model_ready(self, model: str, version: str = "") -> bool:
        async def fetch() -> bool:
            resp = await self._idempotent("ModelReady", service_pb2.ModelReadyRequest(name=model, version=version))
            return bool(resp.ready)

        return await self._cached(("ready", model, version), fetch)

    async def server_ready(self) -> bool:
        async def fetch() -> bool:
            try:
                resp = await self._idempotent("ServerReady", service_pb2.ServerReadyRequest(), timeout=2.0)
            except GatewayError:
                return False
            return bool(resp.ready)

        ready = await self._cached(_READY_KEY, fetch)
        if not ready:  # only "ready" is kept: a Triton back up is seen by the next check, not a cache_ttl later
            self._cache.forget(_READY_KEY)
        return ready

    async def server_metadata(self) -> dict[str, Any]:
        async def fetch() -> dict[str, Any]:
            resp = await self._idempotent("ServerMetadata", service_pb2.ServerMetadataRequest())
            return {"name": resp.name, "version": resp.version, "extensions": list(resp.extensions)}

        return await self._cached(("server_meta",), fetch)

    async def repository_index(self) -> list[ModelIndexEntry]:
        async def fetch() -> list[ModelIndexEntry]:
            return codec.decode_index(await self._idempotent("RepositoryIndex", service_pb2.RepositoryIndexRequest()))

        return await self._cached(_INDEX_KEY, fetch)

    def cached_index(self) -> list[ModelIndexEntry] | None:
        return self._cache.get(_INDEX_KEY)

    def cached_metadata(self, model: str, version: str = "") -> ModelMetadata | None:
        return self._cache.get(_meta_key(model, version))


# the cache's keys of what ``cached_index`` / ``cached_metadata`` read without a call
_INDEX_KEY = ("index",)
_READY_KEY = ("server_ready",)


def _meta_key(model: str, version: str) -> tuple:
    return ("meta", model, version)
