"""The gateway's answers (gateway/edge/httpbody.py) are, on the wire, what sanic writes for the same
HTTPResponse: ``Answer``'s header lines are sanic's for any names and values, and a large answer
written after its header (``Unjoined``: GRPS bin_data; ``Pieces``: V2 REST's header and binary
outputs, never joined) has the same status line, headers and body, GET and HEAD."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sanic import HTTPResponse

from gateway.edge.http import make_app
from gateway.edge.httpbody import Answer, Pieces, Unjoined, pieces
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

    async def in_pieces(_request, n: int):  # a JSON-like head, then the body in three parts (views and bytes)
        body = bodies[n]
        cut = len(body) // 3
        return pieces([body[:cut], memoryview(body)[cut:2 * cut], memoryview(body)[2 * cut:]],
                      content_type=OCTET, headers={"x-request-id": "r"})

    app.add_route(plain, "/plain/<n:int>", methods=["GET", "HEAD"])
    app.add_route(unjoined, "/unjoined/<n:int>", methods=["GET", "HEAD"])
    app.add_route(in_pieces, "/pieces/<n:int>", methods=["GET", "HEAD"])
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
async def test_an_unjoined_answer_is_the_same_bytes_on_the_wire(port, method, caplog):
    for n in SIZES:
        reqs = {kind: f"{method} /{kind}/{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 2
                for kind in ("plain", "unjoined", "pieces")}
        plain = await _exchange(port, reqs["plain"], 2)
        unjoined = await _exchange(port, reqs["unjoined"], 2)  # twice: the connection stays usable
        in_pieces = await _exchange(port, reqs["pieces"], 2)
        assert unjoined == plain == in_pieces and len(plain[0]) >= n * (method == "GET")
    # and sanic logged no error writing them (a HEAD answer's body writes are not awaitable)
    assert not [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def test_a_large_answer_in_pieces_is_not_joined_and_says_its_size():
    parts = [b"{}" * 10, memoryview(bytes(70_000)), b"", bytes(5)]
    big = pieces(parts)
    assert type(big) is Pieces and big.body == b"" and big.size == 20 + 70_000 + 5 and len(big.pieces) == 3
    small = pieces([b"ab", memoryview(b"cd")])
    assert type(small) is Answer and small.body == b"abcd"  # one write: header and body


# header names and values as clients and handlers may give them: printable text, CR/LF/NUL, tabs,
# non-ASCII, lone surrogates (sanic's surrogateescape), numbers (content-length)
_TEXT = st.text(st.sampled_from(list("aZ0-_ :;,=/\"é\t\r\n\x00\x7f\x85") + ["\udc80", "\ud800"]), max_size=12)
_HEADERS = st.lists(st.tuples(_TEXT.filter(bool), st.one_of(_TEXT, st.integers(0, 10**12))), max_size=6)


def _lines(cls, status: int, pairs: list) -> tuple[str, object]:
    resp = cls(b"x", status=status, content_type="application/json")
    for name, value in pairs:
        resp.headers.add(name, value)
    try:
        return "ok", list(resp.processed_headers)
    except UnicodeError as exc:
        return "error", type(exc)


@settings(max_examples=600, deadline=None)
@given(_HEADERS, st.sampled_from([200, 204, 304, 404]))
def test_an_answers_header_lines_are_sanics(pairs, status):
    """``Answer.processed_headers`` encodes a printable name or value as it is, the rest through
    sanic's stripping: the lines (or the encoding error) are sanic's own for any headers."""
    assert _lines(Answer, status, pairs) == _lines(HTTPResponse, status, pairs)


def test_a_header_value_with_a_line_break_is_stripped_as_sanic_strips_it():
    pairs = [("x-request-id", "a\r\nset-cookie: b"), ("x-n", 38)]
    assert _lines(Answer, 200, pairs) == ("ok", [(b"x-request-id", b"aset-cookie: b"), (b"x-n", b"38"),
                                                 (b"content-type", b"application/json")])
