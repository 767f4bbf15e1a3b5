"""MindIE-style HTTP listener: one Sanic app serving every family on one port (default 1025).

Handlers read, call, write: the family module builds a Plan (neutral GenerateRequest + encoder),
``streaming`` runs it through the generation core; the edge renders failures (``errors.Rendering``).
"""

from __future__ import annotations

import json
import time
import uuid

from sanic import Request, Sanic, response

from gateway import cutover as legacy_cutover
from gateway.call import current
from gateway.context import GatewayContext
from gateway.core.errors import invalid
from gateway.edge import Edge
from gateway.llm.served import ServedModels
from gateway.llm.service import GenerationService

from . import (
    cutover,
    errors,
    management,
    metrics,
    native,
    openai,
    ops,
    streaming,
    tgi,
    triton_generate,
    triton_meta,
    triton_token,
    vllm,
)
from .common import json_body
from .config import MindieConfig
from .running import Running
from .workerbus import WorkerBus

__all__ = ["Handlers", "attach", "json_body", "new_mindie_id"]


def new_mindie_id() -> str:
    """MindIE's own request ids are plain numbers (also the OpenAI ``id``); not the edge's request id."""
    return str(uuid.uuid4().int >> 65)


class Handlers:
    def __init__(self, ctx: GatewayContext, cfg: MindieConfig):
        self.ctx = ctx
        self.cfg = cfg
        self.catalog = ServedModels(ctx.upstream, cfg)
        self.service = GenerationService(ctx.upstream)
        self.errors = errors.Rendering()
        self.role = cfg.pd.role
        self.running = Running()
        self.bus = WorkerBus(self.running, ctx)  # stopInfer, slots, stopService across workers
        self.ops = ops.Ops(self)
        # the MindIE server behind the gateway (dialects.mindie.legacy); None: none
        self.cutover = legacy_cutover.open("mindie", cfg.legacy, ctx.settings.source)

    @staticmethod
    def ops_stopped():
        return ops.stopped_answer()

    async def start(self) -> None:
        await self.bus.start()
        if self.cutover is not None:
            await self.cutover.start("/v1/models")

    async def close(self, *_args) -> None:
        await self.bus.close()
        if self.cutover is not None:
            await self.cutover.close()

    async def run(self, request: Request, planner, body: dict | None = None, **kw):
        body = await json_body(request) if body is None else body
        if self.cutover is not None:  # dialects.mindie.legacy: the model's route may be another than triton
            handled, resp = await cutover.generation(self, self.cutover, request, body, kw,
                                                     lambda: self.generate_here(request, planner, body, **kw))
            if handled:
                return resp
        return await self.generate_here(request, planner, body, **kw)

    async def generate_here(self, request: Request, planner, body: dict, **kw):
        """The request answered from Triton."""
        plan = await planner(body, self.catalog, new_mindie_id(), **kw)
        req = plan.req
        name = plan.model.spec.name
        call = current()
        call.model = name
        if req.timeout:
            call.shorten(req.timeout)  # the request's own `timeout` (seconds), when it is shorter
        metrics.RECEIVED.labels(name).inc()
        ok = False
        try:
            with metrics.RUNNING.labels(name).track_inprogress(), \
                    self.running.track(req.request_id, getattr(plan.encoder, "rid", "")) as entry:
                if req.stream:
                    result = await streaming.stream(self.service, plan, request, entry)
                else:
                    result = await streaming.whole(self.service, plan, entry)
            ok = True
            return result
        finally:
            (metrics.SUCCESS if ok else metrics.FAILED).labels(name).inc()

    async def generate(self, request: Request):
        """POST /generate: ``prompt`` => vLLM, else ``inputs`` => TGI (MindIE Server's precedence)."""
        body = await json_body(request)
        if "prompt" in body:
            return await self.run(request, vllm.plan, body)
        if "inputs" in body:
            return await self.run(request, tgi.plan, body)
        # MindIE nests a serialized object, with ", " / ": " separators (reference §1.3)
        raise invalid(json.dumps({"Error": "`inputs` or `prompt` must be necessary and the type must be string.",
                                  "error_type": "validation"}))

    async def info(self, _request: Request):
        if self.ops.stopped.get():
            return ops.stopped_answer()
        name = await self.catalog.default_name()
        spec = (await self.catalog.resolve(name)).spec
        model = {"model_device_type": "triton", "model_dtype": "unknown", "model_id": name,
                 "model_pipeline_tag": "text-generation", "model_sha": None, "max_total_tokens": spec.max_tokens}
        return response.json({
            "docker_label": None, "max_batch_total_tokens": spec.max_tokens, "max_best_of": 1,
            "max_concurrent_requests": self.ctx.settings.limits.max_inflight, "max_stop_sequences": None,
            "max_waiting_tokens": None, "sha": None, "validation_workers": None, "version": "gateway",
            "waiting_served_ratio": None, "models": [model], "max_input_length": spec.max_tokens,
        })

    async def models(self, _request: Request):
        served = await self.catalog.served()
        aliases = await self.catalog.aliases()
        rows = [_model_row(n, n) for n in served] + [_model_row(a, t) for a, t in sorted(aliases.items())]
        # MindIE pretty-prints this list with an indent of 4 (orjson only indents by 2)
        body = json.dumps({"object": "list", "data": rows}, indent=4)
        return response.text(body, content_type="application/json")

    async def model(self, _request: Request, model: str):
        resolved = await self.catalog.resolve(model)
        row = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "MindIE Server"}
        if resolved.spec.name != model:
            row["parent"] = resolved.spec.name
        return response.json(row)

    async def health(self, _request: Request, model: str | None = None):
        if self.ops.stopped.get():
            return ops.stopped_answer()
        ready = self.ctx.started.is_set() and await self.ctx.upstream.server_ready()
        if ready and model is not None:
            resolved = await self.catalog.resolve(model)
            ready = await self.ctx.upstream.model_ready(resolved.spec.name)
        return response.empty(status=200 if ready else 503)


def _model_row(name: str, root: str) -> dict:
    return {"id": name, "object": "model", "root": root, "owned_by": "MindIE Server",
            "parent": None if name == root else root}


def attach(app: Sanic, edge: Edge, h: Handlers) -> None:
    """MindIE Server's routes (a P or D instance adds its own: gateway/dialects/mindie/roles.py)."""

    async def native_route(r):
        return await h.run(r, native.plan)

    async def tgi_stream(r):
        return await h.run(r, tgi.plan, stream=True)

    async def tgi_compat(r):
        return await h.run(r, tgi.plan, compat=True)

    async def chat(r):
        return await h.run(r, openai.plan_chat)

    async def completions(r):
        return await h.run(r, openai.plan_completions)

    async def triton_gen(r, model):
        return await h.run(r, triton_generate.plan, path_model=model)

    async def triton_gen_stream(r, model):
        return await h.run(r, triton_generate.plan, path_model=model, stream=True)

    post, get = ["POST"], ["GET"]
    edge.route(app, native_route, "/infer", post, "infer")
    edge.route(app, native_route, "/infer_token", post, "infer_token")
    edge.route(app, h.generate, "/generate", post, "generate")
    edge.route(app, tgi_stream, "/generate_stream", post, "generate_stream")
    edge.route(app, tgi_compat, "/", post, "compat")
    edge.route(app, h.info, "/info", get, "info")
    edge.route(app, chat, "/v1/chat/completions", post, "chat")
    edge.route(app, completions, "/v1/completions", post, "completions")
    edge.route(app, h.models, "/v1/models", get, "models")
    edge.route(app, h.model, "/v1/models/<model:str>", get, "model")
    edge.route(app, triton_gen, r"/v2/models/<model:[\w\-.]+>/generate", post, "tgen")
    edge.route(app, triton_gen_stream, r"/v2/models/<model:[\w\-.]+>/generate_stream", post, "tgen_stream")

    async def triton_infer(r, model):
        return await h.run(r, triton_token.plan, path_model=model)

    edge.route(app, triton_infer, r"/v2/models/<model:[\w\-.]+>/infer", post, "tinfer")
    triton_meta.attach(app, edge, h)
    for path, name in (("/health", "health"), ("/v2/health/live", "live"), ("/v2/health/ready", "ready")):
        edge.route(app, h.health, path, get, name)
    edge.route(app, h.health, r"/v2/models/<model:[\w\-.]+>/ready", get, "model_ready")
    ops.attach(app, edge, h)
    management.attach(app, edge, h, h.ops)
    if h.role == "standard":  # MindIE's answer on an instance outside PD (P and D have their own)
        edge.route(app, _not_dmi, "/dresult", get, "dresult_standard", admit=False)


async def _not_dmi(_request: Request):
    return response.json({"error": "Non DMI does not support dresult request", "error_type": "Bad Request"},
                         status=400)
