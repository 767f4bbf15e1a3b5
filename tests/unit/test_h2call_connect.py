"""The HTTP/2 client's connection (gateway/h2/client.py) is Triton's only once Triton's
preface (its SETTINGS) has been read, as grpc's connector has it: a peer that closes, speaks TLS or
HTTP/1, or says nothing before it failed to connect, whatever the timing; a call that finds its
connection closed since it was picked was never started and goes on a new one. Every failure of
the connection reads as grpc-core's do to a client: UNAVAILABLE, "Triton is unreachable"."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.core.errors import UNREACHABLE, ErrorKind, from_grpc_code
from gateway.h2 import client as h2call
from tests.support import free_port


class Peer(asyncio.Protocol):
    """Not an HTTP/2 server: on the client's preface it writes ``reply`` and closes (``close``), or
    says nothing at all."""

    def __init__(self, reply: bytes, close: bool):
        self.reply, self.close = reply, close

    def data_received(self, data: bytes) -> None:
        if self.reply:
            self.transport.write(self.reply)
        if self.close:
            self.transport.close()

    def connection_made(self, transport) -> None:
        self.transport = transport


async def _outcome(call):
    try:
        return "ok", await call
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details()


TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x46"  # what a TLS-only server may answer a plaintext client with
HTTP1 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize(("reply", "close", "why"), [
    (b"", True, "Socket closed before the HTTP/2 preface"),
    (TLS_ALERT, True, "Socket closed before the HTTP/2 preface"),
    (HTTP1, True, "HTTP/2 error 6 from the server before the HTTP/2 preface"),
    (b"", False, "no HTTP/2 preface (SETTINGS) from the server"),
], ids=["closed", "tls", "http1", "silent"])
async def test_a_peer_that_never_speaks_http2_failed_to_connect(monkeypatch, reply, close, why):
    monkeypatch.setattr(h2call.Channel, "CONNECT_S", 0.5)
    port = free_port()
    server = await asyncio.get_running_loop().create_server(lambda: Peer(reply, close), "127.0.0.1", port)
    chan = h2call.Channel([("127.0.0.1", port)])
    try:
        for _ in range(3):  # the same every time (and on the address's backoff)
            code, details = await _outcome(chan.call(b"x", 5))
            assert (code, details) == (grpc.StatusCode.UNAVAILABLE,
                                       f"failed to connect to all addresses; last error: 127.0.0.1:{port}: {why}")
            err = from_grpc_code(code, details)
            assert (err.kind, err.message) == (ErrorKind.UNAVAILABLE, UNREACHABLE)
            assert chan._conns[0] is None  # never handed to a call
        call = chan.stream_call(bytes, 5)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.write(b"x")
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE and info.value.details().endswith(why)
    finally:
        await chan.close()
        server.close()


async def test_a_connection_closed_since_it_was_picked_never_started_the_call():
    conn = h2call.Connection()
    conn.closed = conn.lost = True
    with pytest.raises(h2call.Unprocessed) as info:
        await conn.open(b"", b"x", asyncio.get_running_loop().time() + 5)
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.UNAVAILABLE, "Socket closed")
    conn.lost = False  # a GOAWAY read
    with pytest.raises(h2call.Unprocessed) as info:
        await conn.open(b"", b"x", asyncio.get_running_loop().time() + 5)
    assert info.value.details() == "GOAWAY received"


@pytest.mark.parametrize("details", [
    "failed to connect to all addresses; last error: 127.0.0.1:1: Socket closed before the HTTP/2 preface",
    "Socket closed", "Connection lost: [Errno 104] Connection reset by peer",
    "Connection lost: [Errno 32] Broken pipe", "GOAWAY received", "keepalive watchdog timeout",
    "HTTP/2 error 1 from the server"])
def test_every_broken_connection_reads_triton_is_unreachable(details):
    err = from_grpc_code(grpc.StatusCode.UNAVAILABLE, details)
    assert (err.kind, err.message) == (ErrorKind.UNAVAILABLE, UNREACHABLE)


def test_tritons_own_unavailable_answers_keep_their_words():
    text = "Request for unknown model: 'm' has no available versions"
    assert from_grpc_code(grpc.StatusCode.UNAVAILABLE, text).message == text
