"""Unary calls to Triton on the transport the worker chose at start (gateway/upstream/factory.py,
``upstream.transport``): ``over_h2``, the HTTP/2 client (gateway/h2/client.py, the default), or
``over_grpc``, grpc.aio's public multicallable (``upstream.transport: grpc``).

Either is called as grpc.aio's call is, ``call(request, *, timeout=None, metadata=None)``, and
gives what it gives: the answer (through ``deserializer``; bytes without one), or
``grpc.aio.AioRpcError`` with grpc's code and details; ``request`` is bytes unless ``serializer``
makes them. ``cancel``: a caller that goes away cancels the call (False: it runs on to its end or
deadline, its answer dropped: ``upstream.cancel`` streams or none, gateway/upstream/cancel.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from gateway.h2 import client as h2call

from . import cancel as cancels

UnaryCall = Callable[..., Awaitable[Any]]  # (request, *, timeout=None, metadata=None) -> an awaitable answer
NO_DEADLINE = 99_999_999.0  # a call without a deadline: grpc-timeout's largest (8 digits of seconds)


def over_grpc(channel: grpc.aio.Channel, method: str, serializer: Callable[[Any], bytes] | None = None,
              deserializer: Callable[[bytes], Any] | None = None, cancel: bool = True) -> UnaryCall:
    """The unary RPC ``method`` as grpc.aio's multicallable on ``channel``."""
    rpc = channel.unary_unary(method, request_serializer=serializer, response_deserializer=deserializer)
    if cancel:
        return rpc
    return lambda request, **kw: cancels.uncancelled(rpc(request, **kw))


def over_h2(h2: h2call.Channel, method: str,
            serializer: Callable[[Any], bytes] | None = None, deserializer: Callable[[bytes], Any] | None = None,
            cancel: bool = True) -> UnaryCall:
    """The unary RPC ``method`` on the HTTP/2 client's ``h2`` (``Channel.call``, its header blocks
    made once; a call's metadata, a traced call's ``traceparent``, as header fields)."""
    blocks = h2.blocks(method)

    async def call(request, *, timeout: float | None = None, metadata=None):
        if serializer is not None:
            request = serializer(request)
        answer = await h2.call(request, NO_DEADLINE if timeout is None else timeout, blocks, metadata, cancel)
        return answer if deserializer is None else deserializer(answer)

    return call
