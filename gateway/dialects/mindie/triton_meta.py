"""MindIE's Triton-style metadata and request management on the MindIE port.

``GET /v2`` (server), ``GET /v2/models/{m}`` (the token interface: ``input0`` → ``output0``, UINT32),
``GET /v2/models/{m}/config``, ``GET /v2/models/{m}/getSlotCount`` and ``POST
/v2/models/{m}/stopInfer``, with MindIE Server's keys, key order and texts (its
``parse_protocol.cpp`` ``EncodeTritonEngine``/``EncodeTritonModel``/``EncodeTritonModelConfig``/
``EncodeSlotCount`` and ``SingleReqInferInterfaceBase::Stop``). An unknown model is MindIE's 404
``Model {m} not found.``. Where MindIE reports its engine's configuration the gateway reports what
stands in for it (docs/mindie.md, "Triton family"): the served model's limits and Triton's batch
size, the listener's admission limit for slots.
"""

from __future__ import annotations

import re
import time

import orjson
from sanic import Request, Sanic, response

from gateway.edge import Edge, httpbody

from . import validate as v
from .common import json_body

_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
BAD_ID = ("The id can contain only digits, letters, underscores(_), hyphens(-) and no more than 256 "
          "words in length.")
VERSION = "gateway"  # /info's "version" too: this is not a MindIE release


def _json(obj) -> response.HTTPResponse:
    return httpbody.raw(orjson.dumps(obj), content_type="application/json")


class TritonMeta:
    def __init__(self, h, edge: Edge):
        self.h, self.admission = h, edge.admission

    async def server(self, _request: Request):
        name = await self.h.catalog.default_name()
        model = await self.h.catalog.resolve(name)
        return _json({"name": "MindIE Server", "version": VERSION, "extensions": {
            "max_iter_times": model.spec.max_tokens,
            "prefill_policy_type": 0,  # MindIE's default scheduling policy (FCFS); Triton schedules here
            "decode_policy_type": 0,
            "max_prefill_batch_size": max(1, model.meta.max_batch_size),
            "max_prefill_tokens": model.spec.max_tokens,
        }})

    async def model(self, _request: Request, model: str):
        await self.h.catalog.resolve(model)
        tensor = {"shape": [-1], "datatype": "UINT32"}
        return _json({"name": model, "platform": "MindIE Server", "inputs": [{"name": "input0", **tensor}],
                      "outputs": [{"name": "output0", **tensor}]})

    async def config(self, _request: Request, model: str):
        resolved = await self.h.catalog.resolve(model)
        return _json({
            "model_name": model, "input_datatype": "UINT32", "output_datatype": "UINT32",
            "max_seq_len": resolved.spec.max_seq_len or resolved.spec.max_tokens,
            "npu_mem_size": -1,  # MindIE's value when none is configured: no NPU behind this gateway
            "cpu_mem_size": 0, "world_size": 1,
            "model_weight_path": resolved.spec.name,  # MindIE gives the weights folder's last part
            "model_instance_type": "Standard",
        })

    async def slots(self, _request: Request, model: str):
        resolved = await self.h.catalog.resolve(model)
        if self.h.ops.stopped.get():
            return self.h.ops_stopped()
        total, free = await slot_counts(self.h.bus)
        return _json({"total_slots": total, "free_slots": free,
                      "available_tokens_length": free * resolved.spec.max_tokens})

    async def stop(self, request: Request, model: str):
        received = time.monotonic()  # the stop is judged as of now (running.py), as MindIE judges it
        await self.h.catalog.resolve(model)
        body = await json_body(request)
        if "id" not in body:
            raise v.invalid("Not found id.")
        stop_id = body["id"]
        if stop_id is None:
            raise v.invalid("id must not be null.")
        if not isinstance(stop_id, str):
            raise v.invalid("id must be string type.")
        if not _ID.match(stop_id):
            raise v.invalid(BAD_ID)
        if not await self.h.bus.stop(stop_id, received):  # on whichever worker runs it
            return httpbody.raw(orjson.dumps({"error": f"RequestId is {stop_id} not found.",
                                              "error_type": "NotFoundError"}),
                                status=404, content_type="application/json")
        return _json(body)  # MindIE echoes the request body


async def slot_counts(bus) -> tuple[int, int]:
    """(total, free) slots of the whole worker set: each worker's admission limit (MindIE:
    ``maxBatchSize``), less the generations it runs (MindIE: its processing requests)."""
    loads = await bus.load()
    total = sum(w["limit"] for w in loads)
    return total, max(0, total - sum(w["running"] for w in loads))


def attach(app: Sanic, edge: Edge, h) -> None:
    meta = TritonMeta(h, edge)
    m = r"/v2/models/<model:[\w\-.]+>"
    edge.route(app, meta.server, "/v2", ["GET"], "tserver")
    edge.route(app, meta.model, m, ["GET"], "tmodel")
    edge.route(app, meta.config, m + "/config", ["GET"], "tconfig")
    edge.route(app, meta.slots, m + "/getSlotCount", ["GET"], "tslots")
    edge.route(app, meta.stop, m + "/stopInfer", ["POST"], "tstop", admit=False)
