"""gateway/edge/httpbody.py: a large body read into one buffer is the body sanic's own reader gives, byte for
byte, through a real sanic server (Content-Length, Expect: 100-continue, chunked, over the limit)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import ssl

import aiohttp
import numpy as np
import pytest
import trustme
from sanic import response

from gateway.edge import httpbody
from gateway.edge.http import make_app
from gateway.settings import Settings
from tests.support import free_port, worker_settings

LIMIT = 8 << 20

def _make_server(tls: ssl.SSLContext | None = None):
    settings: Settings = worker_settings({}, "127.0.0.1:1", LIMITS__MAX_REQUEST_BYTES=str(LIMIT))
    app = make_app(f"httpbody_test{'_tls' if tls else ''}", settings)

    async def echo(request):
        stream = request.stream
        stream.request_max_size = request.app.config.REQUEST_MAX_SIZE  # as the edge does
        buffered = httpbody.wants_buffer(stream)
        reader = "buffer"
        if buffered:
            body = await httpbody.read_into_buffer(stream)
        elif (body := httpbody.received(stream)) is not None:  # the edge's order (gateway/edge/__init__.py _read_body)
            reader = "received"
        else:
            reader = "sanic"
            await request.receive_body()
            body = request.body
        return response.json({"buffered": buffered, "type": type(body).__name__, "size": len(body),
                              "sha": hashlib.sha256(body).hexdigest(), "reader": reader})

    app.add_route(echo, "/echo", methods=["POST"], stream=True)
    return app


@contextlib.asynccontextmanager
async def _serving(tls: ssl.SSLContext | None = None, client_ssl: ssl.SSLContext | None = None):
    app = _make_server(tls)
    port = free_port()
    srv = await app.create_server(host="127.0.0.1", port=port, ssl=tls, return_asyncio_server=True, access_log=False)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    scheme = "https" if tls else "http"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl or False)) as http:
        yield f"{scheme}://127.0.0.1:{port}/echo", http
    srv.close()
    await srv.wait_closed()


@pytest.fixture
async def server():
    async with _serving() as served:
        yield served


def _body(size: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", [0, 17, httpbody.MIN_BYTES - 1, httpbody.MIN_BYTES, 3 * 2**20 + 7, LIMIT])
async def test_the_body_is_the_bytes_sent_whichever_reader_takes_it(server, size):
    url, http = server
    body = _body(size, size)
    for _ in range(2):  # a second request on the same keep-alive connection starts where the first ended
        async with http.post(url, data=io.BytesIO(body), headers={"Content-Type": "application/octet-stream",
                                                                 "Content-Length": str(size)}) as r:
            got = await r.json()
        assert r.status == 200
        got.pop("reader")
        assert got == {"buffered": size >= httpbody.MIN_BYTES, "type": "memoryview" if size >= httpbody.MIN_BYTES
                       else "bytes", "size": size, "sha": hashlib.sha256(body).hexdigest()}


async def test_expect_100_continue_and_pipelined_requests(server):
    url, _http = server
    port = int(url.split(":")[2].split("/")[0])
    body = _body(httpbody.MIN_BYTES + 5, 1)
    head = (f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            f"Expect: 100-continue\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    plain = (f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    writer.write(body + plain + body)  # the second request right behind the first body
    for _ in range(2):
        head_out = await reader.readuntil(b"\r\n\r\n")
        length = int(head_out.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        doc = await reader.readexactly(length)
        assert head_out.startswith(b"HTTP/1.1 200")
        assert hashlib.sha256(body).hexdigest().encode() in doc and b'"buffered":true' in doc
    writer.close()


async def test_a_chunked_body_takes_sanics_reader(server):
    url, http = server
    body = _body(httpbody.MIN_BYTES * 2, 2)

    async def chunks():
        for i in range(0, len(body), 300_000):
            yield body[i : i + 300_000]

    async with http.post(url, data=chunks()) as r:
        got = await r.json()
    assert got == {"buffered": False, "type": "bytes", "size": len(body), "sha": hashlib.sha256(body).hexdigest(),
                   "reader": "sanic"}


async def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    url, http = server
    async with http.post(url, data=io.BytesIO(_body(LIMIT + 1, 3)), headers={"Content-Length": str(LIMIT + 1)}) as r:
        assert r.status == 413


@pytest.mark.parametrize("text", [b'{"a": [1, 2.5, "x"]}', b'{"a": Infinity}', b'{"a": -Inf}', b'{"a": ', b"", b"[1,]",
                                  b'{"\xff": 1}'])
def test_the_buffered_routes_parse_a_memoryview_body_as_bytes(text):
    """GRPS predict and V2 REST take a large body as a memoryview: their JSON readers answer the same."""
    from gateway.core.errors import GatewayError
    from gateway.dialects.grps import codec as grps_codec
    from gateway.dialects.v2 import jsonbody

    for read in (grps_codec.load_json, jsonbody.loads):
        outcomes = []
        for body in (text, memoryview(np.frombuffer(text, dtype=np.uint8).copy())):
            try:
                outcomes.append(("ok", read(body)))
            except GatewayError as e:
                outcomes.append(("error", e.kind, str(e)))
        assert outcomes[0] == outcomes[1]


async def test_a_client_gone_mid_body_leaves_the_server_serving(server):
    url, http = server
    port = int(url.split(":")[2].split("/")[0])
    size = 4 * httpbody.MIN_BYTES
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode() + _body(size // 2, 4))
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.05)
    body = _body(size, 5)
    async with http.post(url, data=io.BytesIO(body), headers={"Content-Length": str(size)}) as r:
        assert (await r.json())["sha"] == hashlib.sha256(body).hexdigest()


async def test_over_tls_a_large_body_is_read_into_the_buffer_too():
    """A TLS listener's transport decrypts into sanic's buffer: the body is taken from there."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    async with _serving(server_ctx, client_ctx) as (url, http):
        for size in (httpbody.MIN_BYTES, 3 * 2**20 + 7):
            body = _body(size, 6)
            async with http.post(url, data=io.BytesIO(body), headers={"Content-Length": str(size)}) as r:
                assert await r.json() == {"buffered": True, "type": "memoryview", "size": size,
                                          "sha": hashlib.sha256(body).hexdigest(), "reader": "buffer"}


async def test_a_body_sent_slowly_in_pieces_is_read_whole(server):
    """The direct read takes what arrives, as it arrives: a body trickled in four pieces, with pauses
    longer than one read, is the body sent (and the connection serves the next request)."""
    url, _http = server
    port = int(url.split(":")[2].split("/")[0])
    body = _body(httpbody.MIN_BYTES + 3, 7)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    quarter = len(body) // 4
    for i in range(4):
        writer.write(body[i * quarter : None if i == 3 else (i + 1) * quarter])
        await writer.drain()
        await asyncio.sleep(0.05)
    for expected in (body, body[:17]):
        head_out = await reader.readuntil(b"\r\n\r\n")
        length = int(head_out.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        doc = await reader.readexactly(length)
        assert head_out.startswith(b"HTTP/1.1 200") and hashlib.sha256(expected).hexdigest().encode() in doc
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n" + body[:17])
    writer.close()


async def _answers(reader, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert head.startswith(b"HTTP/1.1 200"), head
        out.append(json.loads(await reader.readexactly(length)))
    return out


async def test_a_small_body_that_came_whole_is_taken_as_sanic_would_read_it(server):
    """``httpbody.received``: a small body in the same read as its header is taken as it is, and a
    request pipelined right behind it stays for the next round; a body still on its way, one
    awaiting its 100 Continue, an empty one and a chunked one take sanic's reader, with the same
    bytes."""
    url, _http = server
    port = int(url.split(":")[2].split("/")[0])
    small, other = _body(333, 8), _body(41, 9)

    def post(body: bytes, extra: str = "") -> bytes:
        return f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(small) + post(other) + post(b""))  # pipelined, all in one write
    got = await _answers(reader, 3)
    assert [(g["reader"], g["size"], g["sha"]) for g in got] == [
        ("received", 333, hashlib.sha256(small).hexdigest()), ("received", 41, hashlib.sha256(other).hexdigest()),
        ("sanic", 0, hashlib.sha256(b"").hexdigest())]
    head = post(small)[: -len(small)]
    writer.write(head + small[:100])  # the rest of the body later
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(small[100:])
    writer.write(post(other, "Expect: 100-continue\r\n")[: -len(other)])
    (late,) = await _answers(reader, 1)
    assert (late["reader"], late["sha"]) == ("sanic", hashlib.sha256(small).hexdigest())
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(other)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + f"{len(other):x}\r\n".encode() + other + b"\r\n0\r\n\r\n")
    continued, chunked = await _answers(reader, 2)
    assert (continued["reader"], continued["sha"]) == ("sanic", hashlib.sha256(other).hexdigest())
    assert (chunked["reader"], chunked["sha"]) == ("sanic", hashlib.sha256(other).hexdigest())
    writer.close()
