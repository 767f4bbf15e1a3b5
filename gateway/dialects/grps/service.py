"""GRPS's operations over the Upstream, shared by the HTTP and gRPC listeners of one worker.

Handlers stay thin: they decode the wire into a GrpsMessage, call one method here and write what
comes back. Every method answers a GrpsMessage with its status filled in; errors are raised as
GatewayError and rendered by the caller through ``errors``, except in streams, which end with one
FAILURE message. The online/offline switch lives here, shared by HTTP and gRPC (as in the C++ GRPS
server) and by every worker of the gateway (``gateway.process.shared.Flag``): offline on one connection is
offline on all of them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
import yaml

from gateway import cutover
from gateway.call import current
from gateway.context import GatewayContext
from gateway.core.bounded import Plans, keep
from gateway.core.errors import ErrorKind, GatewayError, not_found
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor
from gateway.process import offload, shared
from gateway.upstream import wire

from . import answer, codec, config, errors, mapping, plans
from .monitor import Monitor

VERSION = "v1.1.0"  # the GRPS version this dialect imitates
MODEL_NOT_FOUND = "Not Found"  # GRPS's ModelMetadata for a name inference.yml does not list
MAX_TARGETS = 1024  # per worker: the model names resolved (bounded: the names are the clients')


class GrpsService:
    def __init__(self, ctx: GatewayContext, cfg: config.GrpsSettings):
        self.ctx = ctx
        self.cfg = cfg
        self._online = shared.Flag("grps_online", cfg.start_online)
        self.monitor = Monitor()
        self.errors = errors.Rendering(cfg)
        self._plans = Plans(plans.MAX_PLANS)  # plain predicts: per target and input layout (None: no plan)
        self._targets: dict[str, mapping.Target] = {}  # model names resolved (_resolve)
        # the GRPS server behind the gateway (dialects.grps.legacy), shared by HTTP and gRPC; None: none
        self.cutover = cutover.open("grps", cfg.legacy, ctx.settings.source, grpc=True)

    async def start(self) -> None:
        self.monitor.start()
        if self.cutover is not None:
            await self.cutover.start("/grps/v1/health/live")

    async def close(self) -> None:
        await self.monitor.stop()
        if self.cutover is not None:
            await self.cutover.close()

    # -- health ---------------------------------------------------------------------------------
    @property
    def online(self) -> bool:
        return self._online.get()

    def set_online(self, online: bool) -> codec.GrpsMessage:
        self._online.set(online)
        return codec.ok()

    async def ready(self) -> codec.GrpsMessage:
        if self.online and await self.ctx.upstream.server_ready():
            return codec.ok()
        return codec.failure(503, "Service Unavailable")

    # -- predict --------------------------------------------------------------------------------
    async def predict(
        self, msg: codec.GrpsMessage, ndarray: np.ndarray | None = None, return_ndarray: bool = False,
        payload: bytes | None = None,
    ) -> tuple[codec.GrpsMessage, np.ndarray | bytes | memoryview | None]:
        """``payload``: an octet-stream body, kept out of the message (``bin_data`` left empty) so a
        large binary is not copied into the protobuf and out again; the answer's bytes then come
        back as the second element, outside the message, too (a large one as a view of the bytes
        gRPC received, not copied)."""
        target = self._resolve(msg.model)
        async with self._measured(target) as known:
            meta = await self._metadata(target)
            known.append(target.name)
            kind = "ndarray" if ndarray is not None else msg.WhichOneof("data_oneof")
            size = len(payload) if payload is not None else (ndarray.nbytes if ndarray is not None else msg.ByteSize())
            req = await offload.run(size, mapping.to_request, msg, ndarray, meta, target, self.cfg, False, payload)
            raw = payload is not None  # an octet-stream body: the answer's bytes written as received
            resp = await self._infer(req, meta, views=raw)
            return mapping.from_response(resp, kind, meta, target.rule, return_ndarray, raw=raw,
                                         bytes_map=codec.request_bytes_map(msg))

    async def predict_plain(self, model: str, inputs: list[Tensor]) -> bytes:
        """``predict`` of a plain gtensors body (``gtensors.tensors``: the model it names, its decoded
        inputs), answered as the JSON text the HTTP listener sends: ``answer.write``, else the general
        writer. The same lookups, checks, errors and monitoring as ``predict``."""
        target = self._resolve(model)
        _name_model(target.name)
        start, ok, known = time.perf_counter(), False, ""
        try:
            meta = self.ctx.upstream.cached_metadata(target.model, target.version)  # fresh in the cache: no call
            if meta is None:
                meta = await self._metadata(target)
            known = target.name
            pretty = self.cfg.pretty_json
            plan = None if meta.decoupled else self._plan(inputs, meta, target)
            if plan is None:
                resp = await self._infer(mapping.gtensors_request(inputs, meta, target, self.cfg), meta)
            else:  # the request written from the plan, the answer read by it once it has learned its form
                data = await self.ctx.upstream.infer_bytes(plan.model, plan.request(inputs))
                arrays = plan.read(data)
                if arrays is not None:
                    size = 0
                    for a in arrays:
                        size += a.nbytes
                    body = (answer.write_laid(plan.layout, arrays) if offload.inline(size)  # a large one: in a thread
                            else await offload.run(size, answer.write_laid, plan.layout, arrays))
                    ok = True
                    return body
                resp = wire.decode_response(*wire.parse_answer(data))
                plan.learn(data, resp)
            size = sum(t.data.nbytes for t in resp.outputs)
            body = (answer.write(resp, meta, pretty) if offload.inline(size)  # a large answer: in a thread
                    else await offload.run(size, answer.write, resp, meta, pretty))
            if body is None:
                msg, _ = mapping.from_response(resp, "gtensors", meta, target.rule)
                body = await offload.run(msg.ByteSize(), codec.message_to_json, msg, pretty)
            ok = True
            return body
        finally:
            self.monitor.record(known, time.perf_counter() - start, ok)

    def _resolve(self, name: str) -> mapping.Target:
        """``mapping.resolve`` of a model name, once per name: the configuration is fixed, so a name
        resolves the same way every time (a refused name raises, every time, and is not kept)."""
        target = self._targets.get(name)
        return target if target is not None else keep(self._targets, name, mapping.resolve(name, self.cfg), MAX_TARGETS)

    def _plan(self, inputs: list[Tensor], meta: ModelMetadata, target: mapping.Target) -> plans.Plan | None:
        """The plan of these inputs' layout under this metadata (made once; refusals raise every time)."""
        key = (target.name, target.model, target.version, *[(t.name, t.datatype, t.data.shape) for t in inputs])
        plan = self._plans.get(key, _NO_PLAN)
        if plan is _NO_PLAN or plan is not None and plan.meta is not meta:
            plan = self._plans.keep(key, plans.make(inputs, meta, target, self.cfg, self.ctx.upstream.shared_from()))
        return plan

    async def predict_stream(
        self, msg: codec.GrpsMessage, ndarray: np.ndarray | None = None
    ) -> AsyncIterator[codec.GrpsMessage]:
        """Each model response as one message; an error (first or midway) ends with one FAILURE."""
        target = self._resolve(msg.model)
        _name_model(target.name)
        start, ok, known = time.perf_counter(), False, ""
        try:
            meta = await self._metadata(target)
            known = target.name
            kind = "ndarray" if ndarray is not None else msg.WhichOneof("data_oneof")
            req = mapping.to_request(msg, ndarray, meta, target, self.cfg, streaming=True)
            bytes_map = codec.request_bytes_map(msg)
            async for resp in self.ctx.upstream.stream(req):
                if resp.outputs:
                    yield mapping.from_response(resp, kind, meta, target.rule, bytes_map=bytes_map)[0]
            ok = True
        except Exception as exc:  # noqa: BLE001 - rendered in-band, as GRPS does
            err = errors.from_exception(exc)
            if (call := current()) is not None:
                call.fail(err)  # the stream's status is OK; its metrics and access line say it failed
            yield codec.failure(*errors.render(err))
        finally:
            self.monitor.record(known, time.perf_counter() - start, ok)

    async def _infer(self, req, meta: ModelMetadata, views: bool = False) -> InferResponse:
        if not meta.decoupled:
            return await self.ctx.upstream.infer(req, views)
        # a decoupled model answers over the stream; a unary call merges what it sends
        parts = [r async for r in self.ctx.upstream.stream(req) if r.outputs]
        if not parts:
            raise GatewayError(ErrorKind.UPSTREAM_FAILED, f"model '{meta.name}' sent no response")
        return _merge(parts)

    # -- metadata -------------------------------------------------------------------------------
    async def server_metadata(self) -> codec.GrpsMessage:
        """GRPS answers its server.yml and inference.yml; the gateway answers its version, switch and
        models, and its GRPS section (model mappings) only with ``server_metadata_config: true``."""
        index = await self.ctx.upstream.repository_index()
        grps = {"version": VERSION, "online": self.online}
        if self.cfg.server_metadata_config:
            grps["gateway_config"] = self.cfg.as_dict()
        doc = {
            "grps": grps,
            "models": sorted(f"{e.name}-{e.version}" for e in index if e.state == "READY" and e.version),
        }
        return self._yaml(doc)

    async def model_metadata(self, msg: codec.GrpsMessage) -> codec.GrpsMessage:
        """GRPS looks the name up among inference.yml's ``models[].name``: the bare name
        (``your_model``, what its template client sends), not the ``name-version`` a predict names
        (``your_model-1.0.0``), and answers 404 ``Not Found`` for anything else, an empty name
        included (grps_handler.cc ``ModelMetadata``). Here the names are the configured ones' bare
        names (``mapping.model_entry``), then Triton's models."""
        entry = mapping.model_entry(msg.str_data, self.cfg)
        meta = None
        if entry is not None:
            name, version, target = entry
            _name_model(name)
            try:
                meta = await self.ctx.upstream.model_metadata(target.model, target.version)
            except GatewayError as e:
                if e.kind is not ErrorKind.NOT_FOUND:
                    raise
        if meta is None:
            err = not_found(MODEL_NOT_FOUND)
            if (call := current()) is not None:
                call.fail(err)  # an answer with its failure in it: counted as the failure it is
            return codec.failure(*errors.render(err))
        doc = {"name": name}
        if version:
            doc["version"] = version
        doc.update({
            "triton_model": meta.name,
            "triton_version": target.version or "(latest)",
            "versions": list(meta.versions),
            "platform": meta.platform,
            "max_batch_size": meta.max_batch_size,
            "decoupled": meta.decoupled,
            "inputs": [_spec(s) for s in meta.inputs],
            "outputs": [_spec(s) for s in meta.outputs],
        })
        return self._yaml(doc)

    @staticmethod
    def _yaml(doc: dict) -> codec.GrpsMessage:
        msg = codec.ok()
        msg.str_data = yaml.safe_dump(doc, sort_keys=False)
        return msg

    async def _metadata(self, target: mapping.Target, predicting: bool = True) -> ModelMetadata:
        """An unknown model: predicting, GRPS's executor text with status 500 (``ExecutorError``);
        asked for its metadata, a 404."""
        try:
            return await self.ctx.upstream.model_metadata(target.model, target.version)
        except GatewayError as e:
            if e.kind is ErrorKind.NOT_FOUND:
                text = f"Not found model: {target.name}"
                raise (errors.ExecutorError(ErrorKind.NOT_FOUND, text) if predicting else not_found(text)) from None
            raise

    # -- errors and accounting ------------------------------------------------------------------
    @staticmethod
    def render(exc: BaseException) -> codec.GrpsMessage:
        return codec.failure(*errors.render(errors.from_exception(exc)))

    @asynccontextmanager
    async def _measured(self, target: mapping.Target):
        """Record one request in GRPS's monitor; the block appends the model name once the model is
        known (unknown names are counted in the total only, so clients cannot grow the monitor)."""
        _name_model(target.name)
        start, ok, known = time.perf_counter(), False, []
        try:
            yield known
            ok = True
        finally:
            self.monitor.record(known[0] if known else "", time.perf_counter() - start, ok)


_NO_PLAN = object()  # not looked up yet (None: no plan for that layout)


def _spec(s) -> dict:
    return {"name": s.name, "datatype": s.datatype, "shape": list(s.shape), "optional": s.optional}


def _merge(parts: list[InferResponse]) -> InferResponse:
    """Several responses of one request → one: BYTES outputs concatenated, others from the last."""
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    for t in last.outputs:
        if t.datatype == "BYTES" and t.data.size == 1:
            joined = b"".join(p.output(t.name).data.reshape(-1)[0] for p in parts if _has(p, t.name))
            t.data = np.array([joined], dtype=object).reshape(t.data.shape)
    return last


def _has(resp: InferResponse, name: str) -> bool:
    return any(t.name == name for t in resp.outputs)


def _name_model(name: str) -> None:
    call = current()
    if call is not None:
        call.model = name


def open(ctx: GatewayContext, cfg: config.GrpsSettings) -> GrpsService:
    """The dialect's per-worker state: HTTP and gRPC share its online switch and its monitor."""
    return GrpsService(ctx, cfg)
