"""MindIE Server's operations routes on the MindIE port, with its keys, texts and status codes.

From MindIE Server's ``http_handler.cpp`` (``Ascend/MindIE-LLM`` ``src/server/endpoint/http_wrapper``):

    POST /v1/tokenizer        {"inputs": <text>, "do_decode"?: bool} -> {"token_number", "tokens"};
                              422 ``Req body converts to json fail.`` / ``Inputs in request body is
                              invalid.`` / ``Inputs data length in [0, N], but the length of inputs is L``
    GET  /health/timed[-N]    a one-token generation within N s (default 10, [1, 600]): 200
                              ``{"status":"healthy"}``; 500 envelope; 404 for a bad N
    GET  /stopService         graceful: waits until no generation runs on any worker, 200 empty body;
                              ``?mode=Force``: stops every generation now, 200 empty body; a second
                              call 500 empty body. Then the worker set is stopped as SIGTERM stops it.
    GET  /metrics-json        {"resultType": "vector", "result": [TTFT, TBT, waitingInferRequestNum,
                              processingInferRequestNum, remainBlocks]} (Prometheus-like rows)

Once stopService was called, the health probes, ``/info``, ``getSlotCount``, ``/metrics-json`` and
the status routes answer MindIE's 503 ``The service has been stopped.`` (``stopped``), on every worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

import orjson
from sanic import Request, response

from gateway.core.errors import GatewayError
from gateway.edge import Edge, httpbody
from gateway.llm.types import Done, GenerateRequest, Sampling
from gateway.process import shared

from . import metrics

log = logging.getLogger("gateway.mindie")
DEFAULT_WAIT_S = 10  # MindIE's SIMULATE_CV_WAIT_TIME
MAX_WAIT_S = 600  # MindIE's CV_WAIT_TIME
MAX_INPUT_CHARS = 40 * 1048576  # maxRequestLength 40 (MB) x 1048576, in UTF-16 code units (GetMaxInputLen)
STOPPED_TEXT = "The service has been stopped."
DRAIN_POLL_S = 0.1  # MindIE's JUDGE_PROCESS_WAIT_TIME
_TIMED = re.compile(r"^-(\d+)$")


def _json(obj, status: int = 200):
    return httpbody.raw(orjson.dumps(obj), status=status, content_type="application/json")


def envelope(message: str, error_type: str, status: int):
    return _json({"error": message, "error_type": error_type}, status)


def stopped_answer():
    return envelope(STOPPED_TEXT, "Service Unavailable", 503)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def request_stop() -> bool:
    """Stop the worker set as SIGTERM does (each worker drains, then exits): the supervisor's SIGTERM
    with several workers, this process's own stop otherwise. False where the gateway runs embedded
    (a Worker started by a test): nothing to signal."""
    if os.environ.get(shared.ENV):
        os.kill(os.getppid(), signal.SIGTERM)
        return True
    if shared.stop_hook is not None:
        shared.stop_hook()
        return True
    return False


class Ops:
    def __init__(self, h):
        self.h = h
        self.stopped = shared.Flag("mindie_stopped", False)

    # -- /v1/tokenizer ----------------------------------------------------------------------------
    async def tokenizer(self, request: Request):
        try:
            body = orjson.loads(request.body or b"")
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return envelope("Req body converts to json fail.", "Input Validation Error", 422)
        text = body.get("inputs")
        if not isinstance(text, str):
            return envelope("Inputs in request body is invalid.", "Input Validation Error", 422)
        n = _utf16_len(text)
        if n == 0 or n > MAX_INPUT_CHARS:
            return envelope(f"Inputs data length in [0, {MAX_INPUT_CHARS}], but the length of inputs is {n}",
                            "Input Validation Error", 422)
        decode = body.get("do_decode", True)
        decode = decode if isinstance(decode, bool) else True
        model = await self.h.catalog.resolve(None)
        tok = model.tokenizer
        ids = tok.ids(text)
        pieces = getattr(tok, "pieces", None)
        tokens = list(pieces(text)) if decode and callable(pieces) else [str(i) for i in ids]
        return _json({"token_number": tok.count(text), "tokens": tokens})

    # -- /health/timed[-N] -------------------------------------------------------------------------
    async def health_timed(self, request: Request, suffix: str = "timed"):
        if self.stopped.get():
            return _json({"status": "healthy"})  # MindIE answers so once stopped
        wait = DEFAULT_WAIT_S
        suffix = suffix[len("timed"):]
        if suffix:
            m = _TIMED.match(suffix)
            digits = m.group(1) if m else ""
            if not digits or len(digits) > 3:
                return envelope(f"Max wait time is {MAX_WAIT_S}, input is invalid or too long", "NotFoundError", 404)
            wait = int(digits)
            if not 1 <= wait <= MAX_WAIT_S:
                return envelope(f"Wait time should be in range of [1, {MAX_WAIT_S}], input is not valid",
                                "NotFoundError", 404)
        try:
            await asyncio.wait_for(self._probe(), wait)
        except TimeoutError:
            return envelope(f"Health check timed out after {wait} s", "Incomplete Generation", 500)
        except GatewayError as e:
            return envelope(e.message, "Incomplete Generation", 500)
        return _json({"status": "healthy"})

    async def _probe(self) -> None:
        """A virtual inference: one token of the default model."""
        model = await self.h.catalog.resolve(None)
        req = GenerateRequest(model=model.name, prompt="hi", max_tokens=1, sampling=Sampling(), stream=False,
                              request_id="health-timed")
        async for ev in self.h.service.generate(req, model):
            if isinstance(ev, Done):
                return

    # -- /stopService ---------------------------------------------------------------------------------
    async def stop_service(self, request: Request):
        if self.stopped.get():
            return response.empty(status=500)  # MindIE: "Service has been stop!" (logged), no body
        self.stopped.set(True)
        force = request.args.get("mode") == "Force"
        if force:
            n = await self.h.bus.stop_all()
            log.warning("mindie: stopService?mode=Force: %d generations stopped; stopping", n)
        else:
            log.warning("mindie: stopService: waiting for the running generations, then stopping")
            while sum(w["running"] for w in await self.h.bus.load()):
                await asyncio.sleep(DRAIN_POLL_S)
        asyncio.get_running_loop().call_later(0.05, request_stop)  # after this answer went out
        return response.empty(status=200)

    # -- /metrics-json ----------------------------------------------------------------------------------
    async def metrics_json(self, request: Request):
        if self.stopped.get():
            return stopped_answer()
        loads = await self.h.bus.load()
        running = sum(w["running"] for w in loads)
        sock = request.conn_info.sockname if request.conn_info is not None else None
        instance = f"{sock[0]}:{sock[1]}" if isinstance(sock, tuple) else ""  # MindIE: managementIp:managementPort
        avg = metrics.AVERAGES

        def row(name: str, value: str) -> dict:
            return {"metric": [{"__name__": name, "job": "node", "instance": instance}], "value": value}

        return _json({"resultType": "vector", "result": [
            row("TTFT", f"{avg.mean(avg.ttft):f}"),
            row("TBT", f"{avg.mean(avg.tbt):f}"),
            row("waitingInferRequestNum", "0"),
            row("processingInferRequestNum", str(running)),
            row("remainBlocks", str(await self.remain_blocks())),
        ]})

    async def remain_blocks(self) -> int:
        """What stands in for MindIE's free KV-cache blocks: free slots x blocks per sequence."""
        from .triton_meta import slot_counts

        model = await self.h.catalog.resolve(None)
        _total, free = await slot_counts(self.h.bus)
        return free * blocks_per_sequence(model.spec.max_tokens)


BLOCK_SIZE = 128  # MindIE's default cacheBlockSize


def blocks_per_sequence(max_tokens: int) -> int:
    return -(-max_tokens // BLOCK_SIZE)


def attach(app, edge: Edge, h) -> Ops:
    ops = h.ops
    edge.route(app, ops.tokenizer, "/v1/tokenizer", ["POST"], "tokenizer")
    edge.route(app, ops.health_timed, r"/health/<suffix:timed(?:-\d*)?>", ["GET"], "health_timed", admit=False)
    edge.route(app, ops.stop_service, "/stopService", ["GET"], "stop_service", admit=False)
    edge.route(app, ops.metrics_json, "/metrics-json", ["GET"], "metrics_json", admit=False)
    return ops

