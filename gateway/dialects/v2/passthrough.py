"""KServe V2 gRPC passthrough: every ``inference.GRPCInferenceService`` RPC forwarded as raw bytes.

Nothing is decoded. One generic handler catches the whole service and nothing else (so the health
service beside it on the same server is found); the edge wraps each call
(request id, admission, deadline, metrics). Calls go out as TritonUpstream's relay calls: on the h2
transport (gateway/h2/client.py, a ModelStreamInfer written message by message as Triton's windows
allow), on grpc.aio under ``upstream.transport: grpc``. For each call we forward the caller's metadata (minus
hop-by-hop keys), the deadline (the client's, or the listener's default when the client gives
none or a longer one), and cancellation as ``upstream.cancel`` says (gateway/upstream/cancel.py:
by default a stream whose caller went away is cancelled, a unary call left to finish); status
codes, details and trailing metadata come back exactly as Triton sent them. Triton's control plane
(model load/unload, shared-memory registration and unregistration, trace and log settings)
answers PERMISSION_DENIED unless ``dialects.v2.control_plane`` is true; the shared-memory status
calls change nothing and pass. The message is never
rewritten: a V2 client's own ``id`` field is Triton's request id. With ``dialects.v2.triton_models``
(the ModelScope of gateway/access.py), a request naming another model is NOT_FOUND before it reaches
Triton (a stream ends NOT_FOUND at the first such message), and the repository index and every
model's statistics are decoded and filtered; the gateway's API key (``authorization``) is not
forwarded to Triton.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from gateway.access import AUTHORIZATION, ModelScope, unknown_model
from gateway.call import current
from gateway.core.protowire import read_varint
from gateway.edge import Edge
from gateway.observe import tracing
from gateway.upstream import cancel

from .errors import Denied, UpstreamStatus
from .state import State

SERVICE = "inference.GRPCInferenceService"
PREFIX = f"/{SERVICE}/"
# the service's own methods (Triton's proto): their handlers are kept
METHODS = frozenset(service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name)
STREAMING = frozenset({"ModelStreamInfer"})
# Triton's control plane: refused with PERMISSION_DENIED unless dialects.v2.control_plane is true
# (the shared-memory status calls are read-only: not in it)
CONTROL = frozenset({"RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryRegister",
                     "SystemSharedMemoryUnregister", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
                     "TraceSetting", "LogSettings"})
# RPCs whose request message has the model name in field 1 (the metrics' model label)
PER_MODEL = frozenset({"ModelInfer", "ModelStreamInfer", "ModelMetadata", "ModelReady", "ModelConfig",
                       "ModelStatistics"})
_HOP_KEYS = frozenset({"user-agent", "te", "content-type", "host", "connection"})
_RESERVED = ("grpc-", ":")  # gRPC's own keys and HTTP/2 pseudo-headers
MAX_NAME = 256


def forward_metadata(md, drop: frozenset[str] = frozenset()) -> tuple[tuple[str, str | bytes], ...]:
    """``drop``: more keys kept from Triton (``authorization`` when it carried this gateway's API key)."""
    return _forwarded(md, _HOP_KEYS | drop)


def _forwarded(md, skip: frozenset[str]) -> tuple[tuple[str, str | bytes], ...]:
    """``md`` less the keys in ``skip`` (hop-by-hop keys and ``drop``, merged once per RPC) and gRPC's own."""
    return tuple([(k, v) for k, v in md or () if k not in skip and not k.startswith(_RESERVED)])  # a list: cheaper than a generator


def model_name(raw: bytes, max_fields: int = 16, field: int = 1) -> str:
    """Field 1 (a string; or ``field``) of a serialized request, read without decoding the rest.

    Serializers write fields in number order, so it is the first; the scan gives up after a few
    fields or at anything malformed (Triton will say what is wrong with the request). A request
    that starts with field 1 and a one-byte length (a name under 128 bytes: nearly every one) is
    read at once.
    """
    if field == 1 and len(raw) > 1 and raw[0] == 0x0A and raw[1] < 0x80:
        return raw[2:2 + raw[1]].decode("utf-8", "replace")
    return _scan(raw, max_fields, field)


def _scan(raw: bytes, max_fields: int = 16, field: int = 1) -> str:
    """model_name's field by field scan."""
    i, n = 0, len(raw)
    try:
        for _ in range(max_fields):
            if i >= n:
                break
            key, i = read_varint(raw, i)
            wire = key & 7
            if wire == 2:
                length, i = read_varint(raw, i)
                if key >> 3 == field:
                    return raw[i:i + min(length, MAX_NAME)].decode("utf-8", "replace")
                i += length
            elif wire == 0:
                _, i = read_varint(raw, i)
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return ""
    except DecodeError:
        return ""
    return ""


class Passthrough(grpc.GenericRpcHandler):
    def __init__(self, edge: Edge, state: State):
        self._edge = edge
        self._upstream = state.ctx.worker.upstream  # its relay calls (unscoped: scopes are kept here): h2 or grpc.aio
        self._scope = state.ctx.scope  # dialects.v2.triton_models: the models it may name (None: every one)
        self._control = state.config.control_plane
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._drop = frozenset({AUTHORIZATION}) if edge.keys is not None else frozenset()
        self._cancels = cancel.streams_cancelled(state.ctx.settings.upstream.cancel)  # a stream whose caller left

    def service_name(self) -> str:
        """The service it serves (its grpc.health.v1 name, gateway/ops/grpchealth.py)."""
        return SERVICE

    def service(self, handler_call_details):
        method = handler_call_details.method
        if not method.startswith(PREFIX):
            return None
        handler = self._handlers.get(method)
        if handler is None:
            handler = self._make(method)
            if method[len(PREFIX):] in METHODS:  # bounded: a name outside the service is passed on, not kept
                self._handlers[method] = handler
        return handler

    def _make(self, method: str) -> grpc.RpcMethodHandler:
        name = method[len(PREFIX):]
        model_of = model_name if name in PER_MODEL else None
        if name in STREAMING:  # no serializers on either side: bytes
            fn = _stream(self._upstream.relay_stream(method), self._drop, self._scope, name, self._cancels)
            return grpc.stream_stream_rpc_method_handler(self._edge.stream(name, fn))
        now = None
        if name in CONTROL and not self._control:
            fn = _denied(name)
        else:
            # on an h2 listener that leaves unary handlers to finish, the call needs no shield of its own
            cancel = True if self._edge.unary_outlives_client else None
            fn = _unary(self._upstream.relay(method, cancel), self._drop, name)
            if self._scope is not None:
                fn = _scoped(name, fn, self._scope)
            else:  # on the h2 server and the h2 client: begun from the request's frames, no task
                now = _now(self._edge, self._upstream.relay_now(method, cancel), self._drop, name, model_of)
        handler = grpc.unary_unary_rpc_method_handler(self._edge.unary(name, fn, model_of))
        if now is not None:
            handler.now = now
        return handler


def _denied(name: str):
    async def denied(_request: bytes, _context):
        raise Denied(name)

    return denied


def _unary(upstream, drop: frozenset[str], name: str):
    skip = _HOP_KEYS | drop

    async def unary(request: bytes, context):
        edge_call = current()
        # tracing on: the caller's traceparent replaced by the gateway's client span (gateway/observe/tracing.py)
        with tracing.upstream(name, edge_call.model, _forwarded(edge_call.metadata, skip)) as md:
            try:
                # the caller went away (this task cancelled): Triton's call is cancelled with the await
                # under upstream.cancel all, else left to finish (tests/unit/test_passthrough_semantics.py)
                return await upstream(request, edge_call.remaining(), md)
            except grpc.aio.AioRpcError as err:
                raise UpstreamStatus(err) from None

    return unary


def _now(edge: Edge, start, drop: frozenset[str], name: str, model_of):
    """``_unary``'s call as the edge begins it at once (``Edge.unary_now``), where the upstream can
    (``relay_now``: the h2 client) and tracing is off; None otherwise."""
    if start is None:
        return None
    skip = _HOP_KEYS | drop

    def begin(request: bytes, edge_call, done):
        return start(request, edge_call.remaining(), _forwarded(edge_call.metadata, skip), done)

    return edge.unary_now(name, begin, model_of, _upstream_error)


def _upstream_error(exc: BaseException) -> BaseException:
    return UpstreamStatus(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc


# RPCs that name a model in another field than 1, and answers that list models (filtered by a scope)
_MODEL_FIELD = {"RepositoryModelLoad": 2, "RepositoryModelUnload": 2}
_LISTINGS = {"RepositoryIndex": (service_pb2.RepositoryIndexResponse, "models"),
             "ModelStatistics": (service_pb2.ModelStatisticsResponse, "model_stats")}


def _scoped(name: str, fn, scope: ModelScope):
    """A unary RPC restricted to the scope's models: a request naming another model is NOT_FOUND in
    Triton's words before it reaches Triton; a listing (repository index, statistics of every model)
    is decoded and filtered; other RPCs pass unchanged."""
    field = _MODEL_FIELD.get(name, 1 if name in PER_MODEL else None)
    listing = _LISTINGS.get(name)
    if field is None and listing is None:
        return fn

    async def scoped(request: bytes, context):
        if field is not None:
            model = model_name(request, field=field)
            if not scope.allows(model) and not (model == "" and listing is not None):
                raise unknown_model(model)
        answer = await fn(request, context)
        if listing is not None:
            cls, attr = listing
            msg = cls.FromString(answer)
            kept = [m for m in getattr(msg, attr) if scope.allows(m.name)]
            del getattr(msg, attr)[:]
            getattr(msg, attr).extend(kept)
            answer = msg.SerializeToString()
        return answer

    return scoped


def _stream(upstream, drop: frozenset[str], scope: ModelScope | None = None, name: str = "ModelStreamInfer",
            cancels: bool = True):
    """ModelStreamInfer: the two directions forwarded independently, message for message. The
    client's messages go to Triton from a task of their own (``_forward``) while the handler hands
    Triton's answers back, so neither waits for the other (a message is forwarded while an earlier
    one's answers are still coming). Per stream, not per message: the metadata, the deadline, the
    model label (read from the first message), the metrics and the access line. A caller that
    goes away cancels Triton's call, or with ``cancels`` False (``upstream.cancel: none``) leaves it
    half-closed and read to its end (gateway/upstream/cancel.py)."""
    if scope is not None:
        return _scoped_stream(upstream, drop, scope, name, cancels)

    async def stream(request_iterator, context) -> AsyncIterator[bytes]:
        edge_call = current()
        with tracing.upstream(name, "", forward_metadata(edge_call.metadata, drop)) as md:
            try:
                call = await upstream(edge_call.remaining(stream=True), md)
            except grpc.aio.AioRpcError as err:
                raise UpstreamStatus(err) from None
            pump = asyncio.ensure_future(_forward(request_iterator, call, edge_call, cancels))
            reader = None if cancels else cancel.Reader(call)
            try:
                async for item in call if reader is None else reader:
                    yield item
            except grpc.aio.AioRpcError as err:
                raise UpstreamStatus(err) from None
            finally:
                if cancels:  # (under none the pump ends with the client's messages: a write or half-close
                    pump.cancel()  # cancelled would cancel the call, grpc.aio's way)
                cancel.finish(call, False, cancels, reader)  # the caller went away or failed: Triton's work stopped

    return stream


async def _forward(request_iterator, call, edge_call, cancels: bool = True) -> None:
    """The client's messages to Triton as they come, then its half-close; the first names the
    stream's model (metrics, access line). A write to a call that has ended (Triton answered with
    an error, or the stream was cancelled) stops the forwarding: the handler reads that status. A
    client stream that breaks cancels Triton's call, as grpc.aio does for a request iterator (with
    ``cancels`` False, ``upstream.cancel: none``, it half-closes it)."""
    try:
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is not None:
            if not edge_call.model:  # (a scoped stream named it at its first message, refused or not)
                edge_call.model = model_name(first)
            await call.write(first)
            async for item in requests:
                await call.write(item)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass
    except Exception:  # noqa: BLE001 - the handler sees the cancelled call
        if cancels:
            call.cancel()
        else:
            with contextlib.suppress(Exception):
                await call.done_writing()


_END = object()
SCOPED_STREAM_QUEUE = 64  # answers held for a slow reader before Triton's are no longer read (backpressure)


def _stream_error(request: bytes, model: str) -> bytes:
    """What Triton streams back for a request it cannot run (the stream stays open): the error text,
    and the request's id so that the client knows which request failed."""
    try:
        request_id = service_pb2.ModelInferRequest.FromString(request).id
    except Exception:  # noqa: BLE001 - unparsable: Triton would not know the id either
        request_id = ""
    return service_pb2.ModelStreamInferResponse(
        error_message=unknown_model(model).message,
        infer_response=service_pb2.ModelInferResponse(id=request_id),
    ).SerializeToString()


def _scoped_stream(upstream, drop: frozenset[str], scope: ModelScope, name: str = "ModelStreamInfer",
                   cancels: bool = True):
    """ModelStreamInfer when the dialect's models are restricted: a message naming another model is
    answered in the stream, as Triton answers an unknown model, and never reaches Triton; the stream
    goes on. Triton's answers and these are merged through one bounded queue."""

    async def stream(request_iterator, context) -> AsyncIterator[bytes]:
        edge_call = current()
        out: asyncio.Queue = asyncio.Queue(SCOPED_STREAM_QUEUE)
        failure: list[BaseException] = []

        async def requests():
            async for item in request_iterator:
                name = model_name(item)
                if not edge_call.model:
                    edge_call.model = name
                if scope.allows(name):
                    yield item
                else:
                    await out.put(_stream_error(item, name))

        span = tracing.upstream(name, "", forward_metadata(edge_call.metadata, drop))
        try:
            call = await upstream(edge_call.remaining(stream=True), span.__enter__())
        except grpc.aio.AioRpcError as err:
            span.__exit__(type(err), err, None)
            raise UpstreamStatus(err) from None
        writer = asyncio.ensure_future(_forward(requests(), call, edge_call, cancels))
        reader = None if cancels else cancel.Reader(call)

        async def pump():
            try:
                async for item in call if reader is None else reader:
                    await out.put(item)
            except Exception as err:  # noqa: BLE001 - re-raised by the reader below
                failure.append(err)
            finally:
                await out.put(_END)

        task = asyncio.ensure_future(pump())
        with span:
            try:
                while (item := await out.get()) is not _END:
                    yield item
                if failure:
                    raise failure[0]
            except grpc.aio.AioRpcError as err:
                raise UpstreamStatus(err) from None
            finally:
                task.cancel()
                if cancels:
                    writer.cancel()
                cancel.finish(call, False, cancels, reader)  # the caller went away or failed: Triton's work stopped

    return stream


def attach(server: grpc.aio.Server, edge: Edge, state: State) -> None:
    server.add_generic_rpc_handlers((Passthrough(edge, state),))
