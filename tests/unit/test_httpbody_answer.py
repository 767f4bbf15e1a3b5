"""A large answer written after its header (gateway/httpbody.py ``Unjoined``: GRPS bin_data, V2 REST) is,
on the wire, the answer sanic writes for the same HTTPResponse: same status line, headers and body,
GET and HEAD."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from sanic import HTTPResponse

from gateway.http import make_app
from gateway.httpbody import Unjoined
from tests.support import free_port, worker_settings

SIZES = [0, 1, 70_000, 3 * 2**20 + 1]
OCTET = "application/octet-stream"


@pytest.fixture
async def port():
    app = make_app("octet_answer_test", worker_settings({}, "127.0.0.1:1"))
    bodies = {n: np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes() for n in SIZES}

    async def plain(_request, n: int):
        return HTTPResponse(bodies[n], content_type=OCTET, headers={"x-request-id": "r"})

    async def unjoined(_request, n: int):
        return Unjoined(bodies[n], content_type=OCTET, headers={"x-request-id": "r"})

    app.add_route(plain, "/plain/<n:int>", methods=["GET", "HEAD"])
    app.add_route(unjoined, "/unjoined/<n:int>", methods=["GET", "HEAD"])
    p = free_port()
    srv = await app.create_server(host="127.0.0.1", port=p, return_asyncio_server=True, access_log=False)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    yield p
    srv.close()
    await srv.wait_closed()


async def _exchange(port: int, requests: bytes, answers: int) -> list[bytes]:
    """Raw answers to pipelined requests on one connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(requests)
    out = []
    for _ in range(answers):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        head_only = b"HEAD" in requests.split(b"\r\n", 1)[0]
        out.append(head + (b"" if head_only else await reader.readexactly(length)))
    writer.close()
    return out


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_an_unjoined_answer_is_the_same_bytes_on_the_wire(port, method):
    for n in SIZES:
        reqs = {kind: f"{method} /{kind}/{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 2 for kind in ("plain", "unjoined")}
        plain = await _exchange(port, reqs["plain"], 2)
        unjoined = await _exchange(port, reqs["unjoined"], 2)  # twice: the connection stays usable
        assert unjoined == plain and len(plain[0]) >= n * (method == "GET")
