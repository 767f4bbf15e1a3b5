"""The V2 passthrough's unary calls to Triton, made on grpc.aio's own Cython call in the caller's
task (``unary``), and the stream multiplexer's reach into grpc.aio's stream calls (``stream_op``).

Every other call to Triton goes on the HTTP/2 client (gateway/h2/client.py), or with
``upstream.transport: grpc`` through grpc.aio's public call (gateway/upstream/unary.py). The V2
gRPC passthrough keeps this one while its errors must carry Triton's initial and trailing metadata
as they came, which the HTTP/2 client does not yet give (``TritonUpstream.unary``'s
``passthrough``); this fence goes once neither it nor the multiplexer needs it.

``channel.unary_unary(method)(request)`` in grpc.aio (1.85) builds a ``Metadata`` object (an ABC
check of the metadata given), a ``UnaryUnaryCall`` with a census context, a task of its own that
runs the call, a weak-set entry on the channel and a debug log call; the caller then waits on that
task. ``unary(channel, method)`` gives the same call without them: the Cython call object grpc.aio
itself creates (``AioChannel.call``) runs its one batch (``_AioCall.unary_unary``: send metadata,
message and half-close, receive metadata, message and status) in the task that awaits it.

What a caller sees is what the public call gives: the answer (through ``deserializer``), or
``grpc.aio.AioRpcError`` built by grpc.aio's own function from the call's status (code, details,
initial and trailing metadata, debug string); the deadline (``timeout``) and the metadata go to
core as grpc.aio sends them; a cancelled caller cancels the RPC in core ("Locally cancelled by
application!", grpc.aio's words), so Triton's work stops, unless ``cancel`` is False
(``upstream.cancel`` streams or none: the call then runs on in a task of its own). Two things differ, neither used by the
gateway: the call is not on the channel's list of active calls, so ``channel.close(grace)`` does
not wait for it or cancel it (the gateway closes its channel once its servers have stopped and
their handlers are done), and grpc's observability plugins see no census context.

It rests on grpc.aio's private layer, so it is used only where that layer has what it uses (its
Cython channel with ``call``, its call object with the methods below) and the channel has no client
interceptors; elsewhere ``unary`` gives grpc.aio's public multicallable, called the same way.
tests/unit/test_direct_call.py holds the two to the same answers, errors, deadlines and
cancellation on a real grpc.aio server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc

from gateway.observe import fastpaths

from .cancel import uncancelled
from .unary import UnaryCall

try:  # grpc.aio's private layer: present in the pinned grpcio (1.85.1)
    from grpc._cython import cygrpc
    from grpc.aio._call import _LOCAL_CANCELLATION_DETAILS as CANCELLED_DETAILS
    from grpc.aio._call import _create_rpc_error
except ImportError:  # pragma: no cover - another grpcio
    cygrpc = _create_rpc_error = None
    CANCELLED_DETAILS = "Locally cancelled by application!"
_NEEDED = ("unary_unary", "cancel", "done", "is_ok", "status", "initial_metadata", "is_locally_cancelled")


def _missing() -> list[str]:
    """What the pinned grpcio's private layer has and this one lacks (empty: the direct call is on)."""
    if cygrpc is None or _create_rpc_error is None:
        return ["grpc._cython.cygrpc / grpc.aio._call._create_rpc_error"]
    missing = [] if hasattr(getattr(cygrpc, "AioChannel", None), "call") else ["cygrpc.AioChannel.call"]
    return missing + [f"cygrpc._AioCall.{n}" for n in _NEEDED if not hasattr(getattr(cygrpc, "_AioCall", None), n)]


ON = fastpaths.declare("grpc_direct_call", _missing())


def available(channel: grpc.aio.Channel) -> bool:
    """Whether calls on ``channel`` can be made directly: grpc.aio's Cython layer as grpcio 1.85
    has it, and no client interceptors (which only the public call runs)."""
    if not ON:
        return False
    core = getattr(channel, "_channel", None)
    if not isinstance(core, getattr(cygrpc, "AioChannel", ())) or not hasattr(core, "call"):
        return False
    if any(getattr(channel, f"_{kind}_interceptors", None) for kind in
           ("unary_unary", "unary_stream", "stream_unary", "stream_stream")):
        return False
    return True


def unary(channel: grpc.aio.Channel, method: str, serializer: Callable[[Any], bytes] | None = None,
          deserializer: Callable[[bytes], Any] | None = None, cancel: bool = True) -> UnaryCall:
    """``call(request, *, timeout=None, metadata=None)``: the unary RPC ``method`` on ``channel``,
    awaited; ``request`` is bytes unless ``serializer`` makes them, the answer is its bytes unless
    ``deserializer`` reads them. ``cancel``: a caller that goes away cancels the RPC (False: it
    runs on, ``uncancelled``)."""
    if not available(channel):  # grpc.aio's multicallable: called the same way, its call awaited
        rpc = channel.unary_unary(method, request_serializer=serializer, response_deserializer=deserializer)
        if cancel:
            return rpc
        return lambda request, **kw: uncancelled(rpc(request, **kw))

    core = channel._channel
    path = method.encode()
    open_call = core.call

    async def call(request, *, timeout: float | None = None, metadata=None):
        if serializer is not None:
            request = serializer(request)
        rpc = open_call(path, None if timeout is None else time.time() + timeout, None, None, 0)
        try:
            if cancel:
                answer = await rpc.unary_unary(request, tuple(metadata) if metadata else (), None)
            else:
                answer = await uncancelled(rpc.unary_unary(request, tuple(metadata) if metadata else (), None))
        except asyncio.CancelledError:
            if cancel and not rpc.done():
                rpc.cancel(CANCELLED_DETAILS)  # Triton's call is cancelled with the caller
            raise
        if answer is None and not rpc.is_ok():  # grpc.aio's own error, from the same status
            if rpc.is_locally_cancelled():
                raise asyncio.CancelledError()
            raise _create_rpc_error(await rpc.initial_metadata(), await rpc.status())
        return answer if deserializer is None else deserializer(answer)

    return call


def stream_op(call, name: str):
    """The Cython call's own ``name`` of a grpc.aio stream call (``send_serialized_message``,
    ``receive_serialized_message``: the bytes as they are, without the checks ``write``/``read``
    make once a message, which only the first needs), or None: the public method serves. Only with
    the direct call on (``ON``) and a call without serializers."""
    if not ON or getattr(call, "_request_serializer", 1) is not None:
        return None
    return getattr(getattr(call, "_cython_call", None), name, None)
