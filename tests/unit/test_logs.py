"""Logs: JSON lines or text, one access line per request from the edge (no headers, no bodies), and
``X-Request-Id`` on every HTTP answer: plain, streamed (SSE, GRPS streaming, /dresult), sanic's own
errors and the admin routes.
"""

from __future__ import annotations

import asyncio
import io
import logging
from datetime import datetime, timezone

import aiohttp
import orjson
import pytest

from gateway import config, settings
from gateway.core.tensors import InferResponse, ModelMetadata, TensorSpec
from gateway.observe import logs
from tests.fakes import FakeUpstream, fake_triton, text_response, trtllm_meta
from tests.support import free_port, running_worker

ACCESS_FIELDS = {"request_id", "dialect", "listener", "route", "model", "status", "outcome", "bytes_in",
                 "bytes_out", "duration_ms"}
SECRET = "s3cr3t-token-in-a-header"
PAYLOAD = "a-private-prompt-in-the-body"
ECHO = ModelMetadata("echo", ("1",), "python",  # a GRPS streaming model (text in, text chunks out)
                     tuple(TensorSpec(n, "BYTES", (-1, 1)) for n in ("text_input", "max_tokens", "stream")),
                     (TensorSpec("text_output", "BYTES", (-1, -1)),), max_batch_size=8, decoupled=True)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(stream: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines() if line]


def test_json_lines_carry_fields_and_tracebacks(restore_logging):
    out = io.StringIO()
    logs.setup("INFO", "json", stream=out)
    log = logging.getLogger("gateway.test")
    log.info("hello %s", "there", extra={"fields": {"n": 1}})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    log.debug("not at INFO")
    first, second = _lines(out)
    assert first["msg"] == "hello there" and first["n"] == 1 and first["level"] == "INFO"
    assert first["logger"] == "gateway.test" and first["ts"].endswith("Z") and first["pid"] > 0
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exc"]


def test_auto_is_text_on_a_terminal_and_json_elsewhere(restore_logging):
    tty = Tty()
    logs.setup("INFO", "auto", stream=tty)
    logs.access("id 1", "tfserving", "tfserving_rest", "rest", "m", 200, "ok", 10, 20, 0.0012)
    line = tty.getvalue().strip()
    assert " INFO gateway.access: request " in line
    assert 'request_id="id 1"' in line and "status=200" in line and "duration_ms=1.2" in line
    pipe = io.StringIO()
    logs.setup("INFO", "auto", stream=pipe)
    logs.access("id-2", "tfserving", "tfserving_rest", "rest", "m", 200, "ok", 10, 20, 0.0012)
    assert _lines(pipe)[0]["request_id"] == "id-2"


def test_text_values_cannot_forge_a_line(restore_logging):
    out = io.StringIO()
    logs.setup("INFO", "text", stream=out)
    logs.access("x\nFAKE 1 ERROR gateway: forged", "d", "l", "r", "m", 200, "ok", 0, 0, 0.0)
    assert len(out.getvalue().splitlines()) == 1 and "\\n" in out.getvalue()


def test_access_lines_are_info_and_access_log_false_silences_them(restore_logging):
    out = io.StringIO()
    logs.setup("INFO", "json", access_log=True, stream=out)
    logs.access("a", "d", "l", "r", "m", 200, "ok", 0, 0, 0.0)
    logs.setup("WARNING", "json", access_log=True, stream=out)
    logs.access("b", "d", "l", "r", "m", 200, "ok", 0, 0, 0.0)
    logs.setup("INFO", "json", access_log=False, stream=out)
    logs.access("c", "d", "l", "r", "m", 200, "ok", 0, 0, 0.0)
    logging.getLogger("gateway.other").info("still logged")
    assert [line.get("request_id", line["msg"]) for line in _lines(out)] == ["a", "still logged"]


def test_the_settings_are_checked():
    s = config.load(None, env={"GATEWAY__LOG_FORMAT": "json", "GATEWAY__ACCESS_LOG": "false"})
    assert (s.log_format, s.access_log) == ("json", False)
    assert (config.load(None, env={}).log_format, config.load(None, env={}).access_log) == ("auto", True)
    with pytest.raises(settings.SettingsError, match="log_format"):
        config.load(None, env={"GATEWAY__LOG_FORMAT": "xml"})
    with pytest.raises(settings.SettingsError, match="access_log"):
        config.load(None, env={"GATEWAY__ACCESS_LOG": '"yes"'})


# -- a live worker ---------------------------------------------------------------------------------
@pytest.fixture
async def live(restore_logging, request):
    """A worker on every HTTP listener, logging JSON into a buffer; its upstream streams two tokens.
    Parametrized with a PD role, MindIE's listener plays it (``decode``: /dresult)."""
    role = getattr(request, "param", "standard")
    out = io.StringIO()
    logs.setup("INFO", "json", access_log=True, stream=out)
    upstream = FakeUpstream(script=[text_response("Hello"), text_response(" world")], metas=[trtllm_meta(), ECHO],
                            infer=lambda req: InferResponse(req.model, "1", []))
    ports = {name: free_port() for name in ("tfserving_rest", "grps_http", "mindie_http", "admin_http")}
    async with fake_triton() as (_, target), \
            running_worker(ports, target, upstream_factory=lambda _s: upstream, LIMITS__MAX_REQUEST_BYTES="1000",
                           DIALECTS__MINDIE__PD__ROLE=role), aiohttp.ClientSession() as http:
        yield ports, http, out


def _url(ports, listener: str, path: str) -> str:
    return f"http://127.0.0.1:{ports[listener]}{path}"


async def test_one_access_line_per_request_without_headers_or_bodies(live):
    ports, http, out = live
    body = {"model": "llm", "messages": [{"role": "user", "content": PAYLOAD}], "max_tokens": 5, "stream": True}
    async with http.post(_url(ports, "mindie_http", "/v1/chat/completions"), json=body,
                         headers={"X-Request-Id": "chat-1", "Authorization": f"Bearer {SECRET}"}) as r:
        assert r.status == 200 and b"Hello" in await r.read()
    async with http.get(_url(ports, "tfserving_rest", "/v1/models/nope"), headers={"X-Request-Id": "tf-1"}) as r:
        assert r.status == 404
    await asyncio.sleep(0)
    access = [line for line in _lines(out) if line["logger"] == "gateway.access"]
    by_id = {line["request_id"]: line for line in access}
    chat, tf = by_id["chat-1"], by_id["tf-1"]
    assert ACCESS_FIELDS <= set(chat) and ACCESS_FIELDS <= set(tf)
    assert (chat["dialect"], chat["listener"], chat["route"], chat["model"]) == ("mindie", "mindie_http", "chat", "llm")
    assert (chat["status"], chat["outcome"]) == (200, "ok") and chat["bytes_in"] > len(PAYLOAD)
    assert chat["duration_ms"] > 0
    assert (tf["status"], tf["outcome"], tf["model"]) == (404, "not_found", "nope") and tf["bytes_out"] > 0
    assert len([line for line in access if line["request_id"] in ("chat-1", "tf-1")]) == 2
    text = out.getvalue()
    assert SECRET not in text and PAYLOAD not in text and "Authorization" not in text


async def _request_id(http, method: str, url: str, **kw) -> tuple[int, str | None]:
    async with http.request(method, url, headers={"X-Request-Id": "rid-7"}, **kw) as r:
        if r.headers.get("Content-Type", "").startswith("text/event-stream") and "dresult" in url:
            return r.status, r.headers.get("X-Request-Id")  # an endless stream: headers only
        await r.read()
        return r.status, r.headers.get("X-Request-Id")


@pytest.mark.parametrize("listener, method, path, kw, status", [
    ("tfserving_rest", "GET", "/v1/models/nope", {}, 404),
    ("tfserving_rest", "POST", "/v1/models/m:predict", {"data": b"x" * 2000}, 413),  # sanic's own: too large
    ("grps_http", "GET", "/no/such/path", {}, 404),  # sanic's own: no route
    ("grps_http", "POST", "/grps/v1/infer/predict?streaming=true", {"json": {"str_data": "hi", "model": "echo"}}, 200),
    ("mindie_http", "POST", "/v1/chat/completions",
     {"json": {"model": "llm", "messages": [{"role": "user", "content": "hi"}], "stream": True}}, 200),
    ("mindie_http", "POST", "/generate_stream", {"json": {"inputs": "hi", "parameters": {"max_new_tokens": 4}}}, 200),
    ("mindie_http", "DELETE", "/v1/models", {}, 405),  # sanic's own: wrong method
    ("admin_http", "GET", "/health", {}, 200),
    ("admin_http", "GET", "/live", {}, 200),
    ("admin_http", "GET", "/metrics", {}, 200),
], ids=lambda v: v if isinstance(v, str) and v.startswith("/") else None)
async def test_every_http_answer_carries_the_request_id(live, listener, method, path, kw, status):
    ports, http, _ = live
    got_status, rid = await _request_id(http, method, _url(ports, listener, path), **kw)
    assert (got_status, rid) == (status, "rid-7")


@pytest.mark.parametrize("live", ["decode"], indirect=True)
async def test_the_pd_record_stream_carries_the_request_id(live):
    ports, http, _ = live
    assert await _request_id(http, "GET", _url(ports, "mindie_http", "/dresult")) == (200, "rid-7")


def test_the_fast_access_line_is_the_formatters_line_and_other_handlers_get_records(restore_logging):
    """The JSON access line written straight to the stream equals what JsonFormatter writes for the
    record; with another handler present (a test's caplog, an operator's), the record goes through."""
    out = io.StringIO()
    logs.setup("INFO", "json", stream=out)
    logs.access("id-1", "tfserving", "tfserving_rest", "predict", "m", 200, "ok", 10, 20, 0.0012)
    fast = _lines(out)[-1]
    extra = io.StringIO()
    other = logging.StreamHandler(extra)
    other.setFormatter(logs.JsonFormatter())
    logging.getLogger().addHandler(other)
    try:
        logs.access("id-1", "tfserving", "tfserving_rest", "predict", "m", 200, "ok", 10, 20, 0.0012)
    finally:
        logging.getLogger().removeHandler(other)
    slow, seen_by_other = _lines(out)[-1], _lines(extra)[-1]
    assert seen_by_other == slow
    for line in (fast, slow):
        line.pop("ts")
    assert fast == slow
    assert list(fast) == ["level", "logger", "pid", "msg", "request_id", "dialect", "listener", "route", "model",
                          "status", "outcome", "bytes_in", "bytes_out", "duration_ms"]  # untraced: no trace_id
    logs.access("id-2", "tfserving", "tfserving_rest", "predict", "m", 200, "ok", 10, 20, 0.0012, "ab" * 16)
    logs.flush()
    assert _lines(out)[-1]["trace_id"] == "ab" * 16


async def test_access_lines_are_queued_and_written_together_in_order(restore_logging):
    out = io.StringIO()
    logs.setup("INFO", "json", stream=out)
    for i in range(3):
        logs.access(f"id-{i}", "grps", "grps_http", "predict", "m", 200, "ok", 1, 2, 0.001)
    assert out.getvalue() == ""  # queued: written together, at most ACCESS_FLUSH_S later
    await asyncio.sleep(logs.ACCESS_FLUSH_S * 2)
    assert [line["request_id"] for line in _lines(out)] == ["id-0", "id-1", "id-2"]
    for i in range(logs.ACCESS_BATCH):  # a full batch is written at once
        logs.access(f"b-{i}", "grps", "grps_http", "predict", "m", 200, "ok", 1, 2, 0.001)
    assert len(_lines(out)) == 3 + logs.ACCESS_BATCH
    logs.access("last", "grps", "grps_http", "predict", "m", 200, "ok", 1, 2, 0.001)
    logs.flush()  # what the worker calls when it stops
    assert _lines(out)[-1]["request_id"] == "last"


def test_the_fast_text_access_line_is_the_text_formatters_line(restore_logging):
    out = io.StringIO()
    logs.setup("INFO", "text", stream=out)
    logs.access("id 1", "grps", "grps_http", "predict", "m", 200, "ok", 1, 2, 0.0015)  # fast path (no loop)
    other = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(other)  # a second handler: the ordinary record
    try:
        logs.access("id 1", "grps", "grps_http", "predict", "m", 200, "ok", 1, 2, 0.0015)
    finally:
        logging.getLogger().removeHandler(other)
    fast, slow = out.getvalue().splitlines()
    # "YYYY-MM-DD HH:MM:SS,mmm pid INFO ...": the same line but for the time
    assert fast[:19].replace("-", "").replace(":", "").replace(" ", "").isdigit() and fast[19] == ","
    assert fast[23:] == slow[23:]
    assert fast[23:].endswith(' INFO gateway.access: request request_id="id 1" dialect=grps listener=grps_http '
                              'route=predict model=m status=200 outcome=ok bytes_in=1 bytes_out=2 duration_ms=1.5')


def test_iso_timestamps_are_utc_with_milliseconds_whatever_came_before():
    """``_iso`` keeps the last second's and the last millisecond's text: every call still gives its own
    time (truncated to the millisecond), in order or not."""
    base = 1_764_120_000.0  # 2025-11-26T01:20:00Z
    for offset in (0.0, 0.0004, 0.0009, 0.001, 0.9995, 1.0, 59.999, 0.5, 86_400.123, 0.0):
        when = base + offset
        ms = int(when * 1000)
        expected = datetime.fromtimestamp(ms // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"
        assert logs._iso(when) == expected
