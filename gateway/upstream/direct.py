"""The stream multiplexer's reach into grpc.aio's Cython call (gateway/upstream/streammux.py, off by
default): ``stream_op`` gives a stream call's own ``send_serialized_message`` /
``receive_serialized_message``, which skip the checks ``write``/``read`` make once a message.

The unary calls that once went through grpc.aio's private layer here go on the HTTP/2 client
(gateway/h2/client.py), or with ``upstream.transport: grpc`` through grpc.aio's public call
(gateway/upstream/unary.py). This fence goes with the multiplexer.
"""

from __future__ import annotations

from gateway.observe import fastpaths

try:  # grpc.aio's private layer: present in the pinned grpcio (1.85.1)
    from grpc._cython import cygrpc
    from grpc.aio._call import _create_rpc_error
except ImportError:  # pragma: no cover - another grpcio
    cygrpc = _create_rpc_error = None
_NEEDED = ("unary_unary", "cancel", "done", "is_ok", "status", "initial_metadata", "is_locally_cancelled")


def _missing() -> list[str]:
    """What the pinned grpcio's private layer has and this one lacks (empty: the direct path is on)."""
    if cygrpc is None or _create_rpc_error is None:
        return ["grpc._cython.cygrpc / grpc.aio._call._create_rpc_error"]
    missing = [] if hasattr(getattr(cygrpc, "AioChannel", None), "call") else ["cygrpc.AioChannel.call"]
    return missing + [f"cygrpc._AioCall.{n}" for n in _NEEDED if not hasattr(getattr(cygrpc, "_AioCall", None), n)]


ON = fastpaths.declare("grpc_direct_call", _missing())


def stream_op(call, name: str):
    """The Cython call's own ``name`` of a grpc.aio stream call (``send_serialized_message``,
    ``receive_serialized_message``: the bytes as they are, without the checks ``write``/``read``
    make once a message, which only the first needs), or None: the public method serves. Only with
    the direct path on (``ON``) and a call without serializers."""
    if not ON or getattr(call, "_request_serializer", 1) is not None:
        return None
    return getattr(getattr(call, "_cython_call", None), name, None)
