"""gateway/edge/fastlane.py on both event loops (the workers run uvloop): a sanic app with one edge route
that echoes its body, served once with the fast lane and once without; the same raw bytes to both
give the same answers, in request order, also when a request is held while another waits in the lane
and when what is held passes sanic's read buffer (reading paused, then resumed)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.call import Admission
from gateway.dialect import DefaultRendering
from gateway.edge import Edge, httpbody
from gateway.edge.fastlane import FastLane
from gateway.edge.http import make_app
from gateway.edge.sanicx import touch_up
from tests.support import free_port, spy_on_lane, worker_settings


@contextlib.asynccontextmanager
async def _serving(lane: bool):
    app = make_app("lane_loops", worker_settings({}, "127.0.0.1:1"))
    edge = Edge("v2", "lane_loops", DefaultRendering(), Admission(8), 30.0, 600.0)

    async def echo(request):
        return httpbody.raw(bytes(request.body), content_type="text/plain")

    edge.route(app, echo, "/echo", ["POST"], "echo", fast=True)
    touch_up(app)  # once per process, as a worker does: without it the lane stays off
    port = free_port()
    srv = await app.create_server(host="127.0.0.1", port=port, return_asyncio_server=True, access_log=False,
                                  protocol=FastLane if lane else None)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    try:
        yield port
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.fixture
def gate(monkeypatch):
    """The lane's count of what it took; a request with the id ``gated`` waits in it for ``release``."""
    return spy_on_lane(monkeypatch)


def _post(body: bytes, rid: str, path: str = "/echo") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: {rid}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _answers(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        out.append(head + await asyncio.wait_for(reader.readexactly(length), 30))
    return out


async def _exchange(port: int, data: bytes, n: int) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await _answers(reader, n)
    finally:
        writer.close()


SMALL, QUERY = _post(b"abc", "small"), _post(b"q", "query", "/echo?x=1")
LARGE = _post(bytes(range(256)) * 8192, "large")  # 2 MiB: sanic's one-copy reader, not the lane
ANSWER_IN_PARTS = _post(b"p" * (httpbody.UNJOINED_MIN + 10), "parts")  # header, then the body


@pytest.mark.parametrize(("data", "answers", "taken"), [
    (SMALL, 1, 1), (QUERY, 1, 0), (LARGE, 1, 0), (SMALL + SMALL, 2, 0),
])
async def test_the_same_bytes_as_sanic_on_this_loop(gate, data, answers, taken):
    async with _serving(lane=True) as fast, _serving(lane=False) as plain:
        got = await _exchange(fast, data, answers)
        assert gate.taken == taken
        assert got == await _exchange(plain, data, answers)


async def test_an_answer_in_parts_on_this_loop(gate):
    async with _serving(lane=True) as fast, _serving(lane=False) as plain:
        reader, writer = await asyncio.open_connection("127.0.0.1", fast)
        writer.write(ANSWER_IN_PARTS)
        got = await _answers(reader, 1)
        writer.close()
        assert got == await _exchange(plain, ANSWER_IN_PARTS, 1)
        assert gate.taken in (0, 1)  # 65 KiB may come in one read or two: the bytes are the same either way


@pytest.mark.parametrize(("held", "taken"), [(SMALL, 2), (SMALL + QUERY, 1), (LARGE + SMALL, 1)],
                         ids=["one", "two", "past_the_buffer"])
async def test_bytes_held_while_a_request_waits_in_the_lane_are_answered_after_it(gate, held, taken):
    gated = _post(b"first", "gated")
    count = held.count(b"X-Request-Id: ")
    async with _serving(lane=True) as fast, _serving(lane=False) as plain:
        got = await gate.held_behind(fast, gated, held, lambda reader: _answers(reader, 1 + count))
        want = await _exchange(plain, gated + held, 1 + count)
    assert got == want
    assert [a.split(b"x-request-id: ")[1].split(b"\r\n")[0] for a in got] == \
        [b"gated", *(line.split(b"\r\n")[0] for line in held.split(b"X-Request-Id: ")[1:])]
    assert gate.taken == taken  # one held whole request takes the lane after the gated one; more go to sanic
