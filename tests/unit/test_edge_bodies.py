"""``Edge.bodies``: a large body of a buffered route is read into the buffer it gives (the upstream's
shared-memory region in a worker), whose release runs once the request is answered, on every path
(an answer, an error, a body over the limit), through a real sanic server."""

from __future__ import annotations

import hashlib
import io

import aiohttp
import numpy as np
import pytest

from gateway.call import Admission
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import DefaultRendering
from gateway.edge import Edge, httpbody
from gateway.edge.http import make_app
from tests.support import free_port, worker_settings

LIMIT = 4 << 20


class Bodies:
    """Buffers handed out and given back, by size."""

    def __init__(self):
        self.given: list[bytearray] = []
        self.released = 0

    def __call__(self, size: int):
        buf = bytearray(size)
        self.given.append(buf)

        def release():
            self.released += 1

        return memoryview(buf), release


@pytest.fixture
async def served():
    settings = worker_settings({}, "127.0.0.1:1", LIMITS__MAX_REQUEST_BYTES=str(LIMIT))
    bodies = Bodies()
    edge = Edge("grps", "bodies_test", DefaultRendering(), Admission(8), 30.0, 600.0, bodies=bodies)
    app = make_app("edge_bodies_test", settings, edge)

    async def echo(request):
        from sanic import response

        body = request.body
        inside = any(type(body) is memoryview and body.obj is b for b in bodies.given)
        return response.json({"sha": hashlib.sha256(body).hexdigest(), "inside": inside})

    async def refuse(request):
        raise GatewayError(ErrorKind.INVALID_ARGUMENT, "no")

    edge.route(app, echo, "/echo", ["POST"], "echo", buffered=True)
    edge.route(app, refuse, "/refuse", ["POST"], "refuse", buffered=True)
    port = free_port()
    srv = await app.create_server(host="127.0.0.1", port=port, return_asyncio_server=True, access_log=False)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    async with aiohttp.ClientSession() as http:
        yield f"http://127.0.0.1:{port}", http, bodies
    srv.close()
    await srv.wait_closed()


async def test_a_large_body_is_read_into_the_given_buffer_and_given_back(served):
    base, http, bodies = served
    small = b"x" * 100
    big = np.random.default_rng(1).integers(0, 256, httpbody.MIN_BYTES + 5, dtype=np.uint8).tobytes()
    async with http.post(base + "/echo", data=small) as r:
        assert await r.json() == {"sha": hashlib.sha256(small).hexdigest(), "inside": False}
    assert bodies.given == [] and bodies.released == 0  # sanic's reader: no buffer asked for
    async with http.post(base + "/echo", data=io.BytesIO(big)) as r:
        assert await r.json() == {"sha": hashlib.sha256(big).hexdigest(), "inside": True}
    assert len(bodies.given) == 1 and bodies.released == 1
    async with http.post(base + "/refuse", data=io.BytesIO(big)) as r:
        assert r.status == 400
    assert len(bodies.given) == 2 and bodies.released == 2  # an error answer gives it back too
    async with http.post(base + "/echo", data=io.BytesIO(b"y" * (LIMIT + 1))) as r:
        assert r.status == 413
    assert len(bodies.given) == 2 and bodies.released == 2  # refused on its length: none asked for
