"""The HTTP fast lane (gateway/edge/fastlane.py) answers with sanic's bytes: two workers in front of the
real Triton, one with ``http_fast_path`` (the default) and one without, get the same raw requests
over raw sockets, and every answer is compared byte for byte. The lane's own count says which
requests it took: the small whole POSTs to the routes that opt in, and none of the rest."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import struct

import pytest

from gateway.app import Worker
from tests.support import free_port, spy_on_lane, worker_settings

LISTENERS = ("tfserving_rest", "v2_http", "grps_http")
KEY = "lane-key-1"
PREDICT = "/v1/models/saved_model_half_plus_three:predict"
INFER = "/v2/models/half_plus_two/infer"
GRPS = "/grps/v1/infer/predict"


@pytest.fixture(scope="module")
async def pair(triton):
    """(fast worker's ports, sanic-only worker's ports); GRPS behind an API key on both."""
    workers, ports = [], []
    for fast in ("true", "false"):
        p = {name: free_port() for name in LISTENERS}
        w = Worker(worker_settings(p, triton.grpc_target, HTTP_FAST_PATH=fast,
                                   LISTENERS__GRPS_HTTP__API_KEYS=f"[{KEY}]"))
        await w.start()
        workers.append(w)
        ports.append(p)
    yield ports
    for w in workers:
        await w.stop(grace=0.1)


@pytest.fixture
def lane(monkeypatch):
    """The lane's count of what it took, and its gate for a request with the id ``gated``."""
    return spy_on_lane(monkeypatch)


def _request(method: str, path: str, body: bytes = b"", headers: tuple = (), rid: str = "lane") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"X-Request-Id: {rid}", *headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _json(method: str, path: str, doc, headers: tuple = (), rid: str = "lane") -> bytes:
    return _request(method, path, json.dumps(doc).encode(), ("Content-Type: application/json", *headers), rid)


async def _response(reader: asyncio.StreamReader) -> bytes:
    """One answer's bytes, as they came (100 Continue included)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if lines[0].split(" ")[1] == "100":
        return head + await _response(reader)
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in fields:
        return head + await reader.readexactly(int(fields["content-length"]))
    if fields.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.strip().split(b";")[0], 16)
            body += size_line + await reader.readexactly(size + 2)
            if size == 0:
                return head + body
    return head + await reader.read()


async def _responses(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    return [await asyncio.wait_for(_response(reader), 30) for _ in range(n)]


_GENERATED_ID = re.compile(rb"^(x-request-id: )[0-9a-f]{8}-[0-9a-f]+\r$", re.MULTILINE)


async def _exchange(port: int, sends: list[bytes], answers: int, gap: float = 0.0) -> list[bytes]:
    """``sends`` written one after another on one connection (``gap`` s apart), then ``answers`` read.
    A request id the worker made up (a request sanic refused before reading its header's id) is
    written as ``<generated>``: the two workers count their ids apart."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for data in sends:
            writer.write(data)
            await writer.drain()
            if gap:
                await asyncio.sleep(gap)
        return [_GENERATED_ID.sub(rb"\1<generated>\r", a) for a in await _responses(reader, answers)]
    finally:
        writer.close()


def _binary_infer(values: list[float]) -> bytes:
    raw = struct.pack(f"<{len(values)}f", *values)
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(values)],
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return _request("POST", INFER, header + raw, ("Content-Type: application/octet-stream",
                                                  f"Inference-Header-Content-Length: {len(header)}"))


AUTH = f"Authorization: Bearer {KEY}"
# (name, listener, request bytes, taken by the lane)
CASES = [
    ("tf_predict", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0, 2.0, 5.0]}), True),
    ("tf_predict_columnar", "tfserving_rest", _json("POST", PREDICT, {"inputs": [1.5, -2.0]}), True),
    ("tf_keep_alive_header", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]},
                                                     ("Connection: keep-alive",)), True),
    ("tf_origin", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]}, ("Origin: http://example.com",)),
     True),
    ("tf_unknown_model", "tfserving_rest", _json("POST", "/v1/models/nope:predict", {"instances": [1.0]}), True),
    ("tf_bad_json", "tfserving_rest", _request("POST", PREDICT, b'{"instances": [1.0,'), True),
    ("tf_bad_verb", "tfserving_rest", _json("POST", "/v1/models/m:explain", {"instances": [1.0]}), True),
    ("tf_classify_predict_only", "tfserving_rest",
     _json("POST", "/v1/models/saved_model_half_plus_three:classify", {"examples": [{"x": 1.0}]}), True),
    ("tf_empty_body", "tfserving_rest", _request("POST", PREDICT), True),
    ("tf_large_answer", "tfserving_rest",  # an answer over httpbody.UNJOINED_MIN: header, then the body
     _request("POST", PREDICT, b'{"instances": [' + b",".join([b"1"] * 16000) + b"]}"), True),
    ("tf_get_metadata", "tfserving_rest", _request("GET", "/v1/models/saved_model_half_plus_three/metadata"), False),
    ("tf_query", "tfserving_rest", _json("POST", PREDICT + "?x=1", {"instances": [1.0]}), False),
    ("tf_http10", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]}).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
     False),
    ("tf_connection_close", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]}, ("Connection: close",)),
     False),
    ("tf_expect_continue", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]},
                                                   ("Expect: 100-continue",)), False),
    ("tf_chunked", "tfserving_rest", b"POST " + PREDICT.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Request-Id: lane\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n12\r\n{\"instances\": [1]}\r\n0\r\n\r\n", False),
    ("tf_two_lengths", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]}, ("Content-Length: 17",)), False),
    ("tf_signed_length", "tfserving_rest", _request("POST", PREDICT, b"", ("Content-Length: +0",))
     .replace(b"Content-Length: 0\r\n", b""), False),
    ("tf_line_without_colon", "tfserving_rest", _json("POST", PREDICT, {"instances": [1.0]}, ("NoColonHere",)), False),
    ("tf_absolute_target", "tfserving_rest",
     _json("POST", "http://127.0.0.1" + PREDICT, {"instances": [1.0]}), False),
    ("tf_not_ascii_target", "tfserving_rest", _json("POST", "/v1/models/caf\u00e9:predict", {"instances": [1.0]}), False),
    ("v2_infer", "v2_http", _json("POST", INFER, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3],
                                                              "data": [1, 2, 5]}]}), True),
    ("v2_infer_binary", "v2_http", _binary_infer([float(i) for i in range(8192)]), True),
    ("v2_infer_gzip", "v2_http", _json("POST", INFER, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3],
                                                                   "data": [1, 2, 5]}]},
                                       ("Accept-Encoding: gzip",)), True),
    ("v2_unknown_model", "v2_http", _json("POST", "/v2/models/nope/infer", {"inputs": []}), True),
    ("v2_bad_json", "v2_http", _request("POST", INFER, b'{"inputs":[]} x'), True),
    ("v2_index", "v2_http", _request("POST", "/v2/repository/index"), True),
    ("v2_generate", "v2_http", _json("POST", "/v2/models/tiny_llm/generate", {"text_input": "hello there",
                                                                              "max_tokens": 3}), True),
    ("v2_generate_stream", "v2_http", _json("POST", "/v2/models/tiny_llm/generate_stream",
                                            {"text_input": "hi", "max_tokens": 4, "stream": True}), False),
    ("v2_get_model", "v2_http", _request("GET", "/v2/models/half_plus_two"), False),
    ("v2_root", "v2_http", _request("POST", "/"), False),  # its own route, not opted in
    ("grps_str", "grps_http", _json("POST", GRPS, {"str_data": "hello grps"}, (AUTH,)), True),
    ("grps_bin", "grps_http", _request("POST", GRPS, bytes(range(256)) * 16,
                                       ("Content-Type: application/octet-stream", AUTH)), True),
    ("grps_no_key", "grps_http", _json("POST", GRPS, {"str_data": "x"}), True),
    ("grps_wrong_key", "grps_http", _json("POST", GRPS, {"str_data": "x"}, ("Authorization: Bearer nope",)), True),
    ("grps_unknown_model", "grps_http", _json("POST", GRPS, {"str_data": "x", "model": "nope"}, (AUTH,)), True),
    ("grps_streaming", "grps_http", _json("POST", GRPS + "?streaming=true", {"str_data": "s"}, (AUTH,)), False),
    ("grps_health", "grps_http", _json("POST", "/grps/v1/health/live", {}, (AUTH,)), False),
]


@pytest.mark.parametrize("name,listener,request_bytes,fast", CASES, ids=[c[0] for c in CASES])
async def test_each_answer_is_sanics_byte_for_byte(pair, lane, name, listener, request_bytes, fast):
    with_lane, sanic_only = pair
    before = lane.taken
    got = await _exchange(with_lane[listener], [request_bytes], 1)
    taken = lane.taken - before
    want = await _exchange(sanic_only[listener], [request_bytes], 1)
    assert lane.taken - before == taken  # the sanic-only worker never takes it
    assert got == want
    assert taken == (1 if fast else 0), f"{name}: taken by the lane {taken} time(s)"


async def test_one_keep_alive_connection_mixes_the_lane_and_sanic(pair, lane):
    """Every kept-alive case of a listener on one connection, waiting for each answer: the lane,
    then sanic, then the lane again, on the same connection, as sanic alone answers them."""
    with_lane, sanic_only = pair
    for listener in LISTENERS:
        cases = [c for c in CASES if c[1] == listener and b"Connection: close" not in c[2]
                 and b"HTTP/1.0" not in c[2] and c[0] not in ("tf_two_lengths", "tf_line_without_colon",
                                                              "tf_signed_length", "tf_absolute_target",
                                                              "tf_not_ascii_target")]
        before = lane.taken
        got, want = [], []
        for port, out in ((with_lane[listener], got), (sanic_only[listener], want)):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _name, _listener, data, _fast in cases:
                writer.write(data)
                out.append(await asyncio.wait_for(_response(reader), 30))
            writer.close()
        assert got == want
        assert lane.taken - before == sum(fast for *_, fast in cases)


async def test_pipelined_and_held_requests_are_answered_in_order(pair, lane):
    """Two requests in one write (sanic takes both: the lane wants exactly one), and a second one
    written while the first is in the lane (held, then handed on): the answers in request order."""
    with_lane, sanic_only = pair
    port_fast, port_sanic = with_lane["tfserving_rest"], sanic_only["tfserving_rest"]
    first = _json("POST", PREDICT, {"instances": [1.0]}, rid="first")
    second = _json("POST", PREDICT, {"instances": [2.0]}, rid="second")
    meta = _request("GET", "/v1/models/saved_model_half_plus_three", rid="third")
    for sends in ([first + second], [first, second], [first, meta, second], [first, second + meta]):
        data = b"".join(sends)
        order = sorted((rid for rid in (b"first", b"second", b"third") if b"X-Request-Id: " + rid in data),
                       key=lambda rid: data.index(b"X-Request-Id: " + rid))
        got = await _exchange(port_fast, sends, len(order))
        want = await _exchange(port_sanic, sends, len(order))
        assert got == want
        assert [a.split(b"x-request-id: ")[1].split(b"\r\n")[0] for a in got] == order

    gated = _json("POST", PREDICT, {"instances": [1.0]}, rid="gated")
    # held: what is written while a request waits in the lane is handed on after its answer: one
    # whole request (the lane takes it too), two (sanic), more than sanic's read buffer (reading paused)
    big = _request("POST", PREDICT, b'{"instances": [' + b",".join([b"1"] * 600_000) + b"]}", rid="big")
    for held, ids, taken in ((second, [b"second"], 2), (second + meta, [b"second", b"third"], 1),
                             (big, [b"big"], 1)):
        before = lane.taken
        got = await lane.held_behind(port_fast, gated, held, functools.partial(_responses, n=1 + len(ids)))
        want = await _exchange(port_sanic, [gated, held], 1 + len(ids))
        assert got == want
        assert [a.split(b"x-request-id: ")[1].split(b"\r\n")[0] for a in got] == [b"gated", *ids]
        assert lane.taken - before == taken


async def test_a_client_gone_mid_request_leaves_the_worker_serving(pair, lane, caplog):
    """The connection closed while its request is in the lane: the request's task is cancelled, no
    error is logged, and the next request is answered."""
    port = pair[0]["v2_http"]
    request = _json("POST", "/v2/models/tiny_llm/generate", {"text_input": "hello there", "max_tokens": 16})
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            writer.close()
        await asyncio.sleep(0.5)
        answer = await _exchange(port, [_json("POST", INFER, {"inputs": [{"name": "x", "datatype": "FP32",
                                                                          "shape": [1], "data": [1]}]})], 1)
    assert answer[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
