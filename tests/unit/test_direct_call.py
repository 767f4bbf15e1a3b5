"""gateway/upstream/direct.py (the V2 passthrough's unary calls): a direct unary call gives what
grpc.aio's public call gives.

A real grpc.aio server in this process answers both kinds of call the same way; every case sends the
same request through ``direct.unary`` and through ``channel.unary_unary`` and compares what comes
back: the answer, the error (code, details, initial and trailing metadata), the deadline, the
metadata the server received, and the cancellation the server sees when the caller goes away.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.upstream import direct
from tests.support import free_port
from tests.unit.test_upstream_unary import SERVICE, serving


@pytest.fixture
async def served():
    async with serving() as (impl, channel, _):
        yield impl, channel


def _both(channel, name: str, serializer=None, deserializer=None):
    path = f"/{SERVICE}/{name}"
    public = channel.unary_unary(path, request_serializer=serializer, response_deserializer=deserializer)

    async def public_call(request, **kw):
        return await public(request, **kw)

    return direct.unary(channel, path, serializer, deserializer), public_call


async def _errors(channel, name: str, request: bytes, timeout: float) -> list[tuple]:
    """The error each call (direct, public) raises: code, details, initial and trailing metadata."""
    errors = []
    for call in _both(channel, name):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(request, timeout=timeout)
        err = info.value
        errors.append((err.code(), err.details(), tuple(err.initial_metadata()), tuple(err.trailing_metadata())))
    return errors


async def test_the_pinned_grpcio_takes_the_direct_path(served):
    """If a grpcio upgrade lost what the direct call needs, this says so (the gateway would still
    work, through the public call, and cost more)."""
    _, channel = served
    assert direct.available(channel)
    assert direct.unary(channel, f"/{SERVICE}/Echo").__name__ == "call"  # the direct call, not grpc.aio's multicallable


async def test_an_answer_and_the_metadata_sent_are_the_same(served):
    impl, channel = served
    md = (("x-request-id", "abc"), ("traceparent", "00-1-2-01"), ("key-bin", b"\xff\x00"))
    results = []
    for call in _both(channel, "Echo", serializer=str.encode, deserializer=bytes.decode):
        results.append(await call("hello", timeout=5, metadata=md))
        results.append(await call("again"))  # no deadline, no metadata
    assert results == ["olleh", "niaga"] * 2
    assert [sorted(got) for got in impl.received] == [sorted(md), []] * 2


async def test_an_error_is_grpcs_own_error(served):
    _, channel = served
    errors = await _errors(channel, "Fail", b"that", timeout=5)
    assert errors[0] == errors[1]
    assert errors[0] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "no room for that", (("initial-key", "i"),),
                         (("trailing-key", "t"), ("trailing-bin", b"\x00\x01")))


async def test_the_deadline_is_kept(served):
    _, channel = served
    errors = await _errors(channel, "Slow", b"", timeout=0.2)
    assert errors[0][:2] == errors[1][:2] == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


@pytest.mark.parametrize("kind", ["direct", "public"])
async def test_a_cancelled_caller_cancels_the_call(served, kind):
    impl, channel = served
    call = _both(channel, "Slow")[0 if kind == "direct" else 1]
    task = asyncio.ensure_future(call(b"", timeout=30))
    await asyncio.sleep(0.3)  # the server is in its handler
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(impl.cancelled.wait(), 5)  # the server heard it
    assert await _both(channel, "Echo")[0](b"ok", timeout=5) == b"ko"  # the channel still serves


async def test_an_unreachable_server_is_unavailable():
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}")
    try:
        errors = await _errors(channel, "Echo", b"x", timeout=5)
        assert [err[0] for err in errors] == [grpc.StatusCode.UNAVAILABLE] * 2
    finally:
        await channel.close()


class _Tag(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self):
        self.seen = 0

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        self.seen += 1
        return await continuation(client_call_details, request)


async def test_a_channel_with_interceptors_takes_the_public_call(served):
    """Interceptors run only in grpc.aio's public call: with one, ``unary`` gives that call."""
    impl, plain = served
    tag = _Tag()
    channel = grpc.aio.insecure_channel(plain.address, interceptors=[tag])
    try:
        assert not direct.available(channel)
        assert await direct.unary(channel, f"/{SERVICE}/Echo")(b"abc", timeout=5) == b"cba"
        assert tag.seen == 1
    finally:
        await channel.close()
