"""P and D roles on the MindIE listener (``dialects.mindie.pd.role: prefill | decode``).

P (prefill): a request with ``req-id``/``req-type: prefill``/``d-target`` headers (checked as
MindIE checks them, ``headers.py``) is planned by its family like any other, then runs the context
phase on Triton (``context_only``). P answers exactly one JSON envelope
``{"reqId", "isStream", "isLastResp", "output"}`` (``output`` only when streaming or finished;
``isLastResp`` always, ``true`` only when the whole inference ended on P), whose ``output`` is the family's bytes so far (OpenAI's role chunk and the first token;
the whole answer when the request already finished), and hands the generation phase to D over
``POST /pd/v1/decode`` (below). A model whose profile cannot split (vLLM), or ``phase_split:
false``, runs whole on P: a stream's later chunks are relayed to D one by one
(``POST /pd/v1/relay``), a non-stream request is answered by P alone (``isLastResp: true``). Requests without any PD header are served as a standard
instance would (used by the coordinator for short prompts).

D (decode): ``POST /pd/v1/decode`` (JSON, from trusted peers only) starts the generation phase
(``generation_only``) and answers 200 at once; each chunk goes out on ``GET /dresult`` as
``reqId:<id>\\0data:<bytes>\\0`` and the last as ``lastData`` (the whole JSON body for non-stream
requests); a failure is ``error:`` (the family's in-band error) or ``retry:`` (a body for the
coordinator to send again with ``is-recompute: true``). One ``/dresult`` connection at a time: a
new one takes over and the old one gets a ``close`` record; ``ka:heartbeat`` after
``heartbeat_s`` of silence; records wait (bounded) while no connection is open.

Hand-off payload (``POST /pd/v1/decode``, all JSON): ``reqId``; ``family`` and ``kw`` (which
planner, with its route arguments) and ``body`` (the user's request, so D plans it exactly as P
did); ``encoder`` (the encoder's scalar state: ids, ``created``, token counts); ``resume``
(``gateway.llm.pd.Resume``: seed, base64 ``context_phase_params``, text so far, held-back stop
text, timings); ``timeout``; ``p_tokens`` (chunks P produced) and ``skip`` (chunks the user already
has, after a recompute).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from contextlib import aclosing
from dataclasses import replace

import aiohttp
import orjson
from sanic import Request, Sanic, response

from gateway.call import current, stream_headers
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.edge import Edge
from gateway.llm.pd import Handoff, PhasedGeneration, Resume
from gateway.llm.types import Done, Token
from gateway.process import shared

from .. import errors, metrics, native, openai, tgi, triton_generate, triton_token, vllm
from ..http import Handlers, json_body
from ..streaming import STOPPED
from . import headers as pdh
from . import peers
from . import records as rec
from .fanin import Fanin
from .metrics import D_CONNECTIONS, D_PENDING, D_RUNNING, HANDOFF

log = logging.getLogger("gateway.mindie.pd")

FAMILIES = {
    "native": native.plan, "tgi": tgi.plan, "vllm": vllm.plan, "chat": openai.plan_chat,
    "completions": openai.plan_completions, "triton": triton_generate.plan, "triton_token": triton_token.plan,
}
_NAMES = {id(f): n for n, f in FAMILIES.items()}
RETRYABLE = (ErrorKind.UNAVAILABLE, ErrorKind.NOT_READY, ErrorKind.UPSTREAM_FAILED)
NOT_PREFILL = "DMI inference requests can be sent only to the prefill node or p_percentage of the flex node == 0"


def bad_request(message: str, status: int = 400):
    return response.json({"error": message, "error_type": "Bad Request"}, status=status)


def encoder_state(enc) -> dict:
    return {k: v for k, v in vars(enc).items() if v is None or isinstance(v, str | int | float | bool)}


class DResultHub:
    """D's side of ``GET /dresult``: one connection at a time, records queued while none is open.
    With several workers, ``fanin`` (pd/fanin.py) carries records to the worker holding the link."""

    def __init__(self, heartbeat_s: float, max_pending: int):
        self.heartbeat_s = heartbeat_s
        self.max_pending = max_pending
        self.pending: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.current: object | None = None
        self.replaced: set[int] = set()
        self.fanin = None

    def push(self, req_id: str, kind: str, body: bytes) -> None:
        self.append(rec.record(req_id, kind, body))

    def append(self, item: bytes) -> None:
        if len(self.pending) >= self.max_pending:
            self.pending.popleft()
            log.warning("dresult: no connection and %d records pending; dropped the oldest", self.max_pending)
        self.pending.append(item)
        self.counted()
        self.wake.set()
        if self.fanin is not None and self.current is None:
            self.fanin.kick()

    def counted(self) -> None:
        D_PENDING.set(len(self.pending))

    def taken_elsewhere(self) -> None:
        """Another worker of this D accepted a /dresult: ours, if any, gets ``close``."""
        if self.current is not None:
            self.replaced.add(id(self.current))
            self.wake.set()
        elif self.pending and self.fanin is not None:
            self.fanin.kick()

    async def serve(self, request: Request) -> None:
        conn = object()
        if self.current is not None:
            self.replaced.add(id(self.current))
            self.wake.set()
        self.current = conn
        if self.fanin is not None:
            await self.fanin.claim()
        D_CONNECTIONS.inc()
        resp = await request.respond(content_type="text/event-stream", headers=stream_headers({"Cache-Control": "no-cache"}))
        await resp.send(b"", end_stream=False)  # the headers now, not with the first record
        last = time.monotonic()
        try:
            while True:
                if id(conn) in self.replaced:
                    self.replaced.discard(id(conn))
                    await resp.send(rec.close_record())
                    break
                if self.pending and self.current is conn:
                    item = self.pending.popleft()
                    D_PENDING.set(len(self.pending))
                    try:
                        await resp.send(item)
                    except BaseException:
                        self.pending.appendleft(item)  # at least once: the next connection gets it
                        raise
                    last = time.monotonic()
                    continue
                wait = self.heartbeat_s - (time.monotonic() - last)
                if wait <= 0:
                    await resp.send(rec.HEARTBEAT)
                    last = time.monotonic()
                    continue
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), wait)
                except TimeoutError:
                    pass
        finally:
            if self.current is conn:
                self.current = None
            if self.fanin is not None and self.pending:
                self.fanin.kick()  # to the worker that took the link, if one did
        await resp.eof()


class PdHandlers(Handlers):
    """Handlers of a P or D instance: every family's route goes through ``run``."""

    def __init__(self, ctx, cfg):
        super().__init__(ctx, cfg)
        self.pd = cfg.pd
        self._peer_headers = cfg.pd.peer_headers()  # read once: a bad key file stops start-up
        self.phased = PhasedGeneration(ctx.upstream)
        self.hub = DResultHub(cfg.pd.heartbeat_s, cfg.pd.max_pending_records)
        self.tasks: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None
        self._tls = peers.client_ssl(cfg.pd.tls)  # https to D (mTLS with a client certificate)
        self._trusted_peers = peers.TrustedPeers(cfg.pd.trusted_peers)

    # -- P ----------------------------------------------------------------------------------
    async def run(self, request: Request, planner, body: dict | None = None, **kw):
        if self.pd.role == "decode":
            return bad_request(NOT_PREFILL)
        if not pdh.has_pd_headers(request.headers) and self.pd.serve_without_pd_headers:
            return await super().run(request, planner, body, **kw)  # PD-mixed, for short prompts
        try:
            hdr = pdh.check(request.headers, self.pd.d_port, self.pd.d_inter_comm)
        except pdh.BadPdRequest as e:
            return bad_request(str(e))
        body = await json_body(request) if body is None else body
        recompute = body.pop("pd_recompute", None) if hdr.recompute else None
        if hdr.recompute and not isinstance(recompute, dict):
            raise invalid("Try to do recompute but it is not supported.")
        plan = await planner(body, self.catalog, hdr.req_id, **kw)
        req = plan.req
        if recompute and isinstance(recompute.get("seed"), int):
            req.sampling = replace(req.sampling, seed=recompute["seed"])
        name = plan.model.spec.name
        call = current()
        call.model = name
        if req.timeout:
            call.shorten(req.timeout)
        metrics.RECEIVED.labels(name).inc()
        ok = False
        try:
            with metrics.RUNNING.labels(name).track_inprogress(), self.running.track(hdr.req_id) as entry:
                try:
                    result = await self._prefill(plan, hdr, _NAMES[id(planner)], kw, body, recompute or {})
                except asyncio.CancelledError:
                    if entry.absorb():  # the coordinator's stopInfer (its user went away)
                        raise GatewayError(ErrorKind.CANCELLED, STOPPED) from None
                    raise
            ok = True
            return result
        finally:
            (metrics.SUCCESS if ok else metrics.FAILED).labels(name).inc()

    async def _prefill(self, plan, hdr: pdh.PdHeaders, family: str, kw: dict, body: dict, recompute: dict):
        req, enc = plan.req, plan.encoder
        skip = int(recompute.get("skip", 0))
        out = bytearray(enc.head() if req.stream and not recompute else b"")
        split = self.pd.phase_split and plan.model.profile.can_split(plan.model.meta)
        if not split and req.stream:
            return await self._relay(plan, hdr, out, skip)
        events = self.phased.context(req, plan.model) if split else self.service.generate(req, plan.model)
        resume, p_tokens = None, 0
        async with aclosing(events) as evs:
            async for ev in evs:
                if isinstance(ev, Token):
                    p_tokens += 1
                    chunk = enc.token(ev)  # always encoded: encoders count tokens
                    if skip:
                        skip -= 1
                    elif req.stream:
                        out += chunk
                elif isinstance(ev, Done):
                    metrics.observe(plan.model.spec.name, ev)
                    out = out + enc.done(ev) if req.stream else bytearray(orjson.dumps(enc.body(ev)))
                    return _envelope(hdr.req_id, req.stream, bytes(out), last=True)
                elif isinstance(ev, Handoff):
                    resume = ev.resume
        if resume is None:
            raise GatewayError(ErrorKind.UPSTREAM_FAILED, "generation ended without a result")
        payload = {"reqId": hdr.req_id, "family": family, "kw": kw, "body": body, "encoder": encoder_state(enc),
                   "resume": resume.to_json(), "timeout": req.timeout, "p_tokens": p_tokens, "skip": skip}
        await self._handoff(hdr, payload)
        return _envelope(hdr.req_id, req.stream, bytes(out), last=False)

    async def _relay(self, plan, hdr: pdh.PdHeaders, out: bytearray, skip: int):
        """No phase split: P generates everything; the first chunk goes in the envelope, the rest
        is relayed to D (``POST /pd/v1/relay``, one record per chunk, in order) for /dresult."""
        req, enc = plan.req, plan.encoder
        events = self.service.generate(req, plan.model)
        try:
            while True:
                ev = await anext(events)
                if isinstance(ev, Done):
                    metrics.observe(plan.model.spec.name, ev)
                    await events.aclose()
                    return _envelope(hdr.req_id, True, bytes(out + enc.done(ev)), last=True)
                chunk = enc.token(ev)
                if skip:
                    skip -= 1
                    continue
                out += chunk
                break
            await self._handoff(hdr, {"reqId": hdr.req_id, "relay": True})
        except BaseException:
            await events.aclose()
            raise
        task = asyncio.create_task(self._relay_rest(events, plan, hdr, skip))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return _envelope(hdr.req_id, True, bytes(out), last=False)

    async def _relay_rest(self, events, plan, hdr: pdh.PdHeaders, skip: int) -> None:
        url = peers.base_url(hdr.d_host, hdr.d_port, self.pd.tls) + "/pd/v1/relay"
        enc = plan.encoder
        try:
            with self.running.track(hdr.req_id) as entry:
                try:
                    async with aclosing(events):  # closing it cancels the Triton request
                        await self._relay_events(events, plan, url, hdr.req_id, skip)
                except asyncio.CancelledError:
                    if not entry.absorb():
                        raise
                    await self._post_record(url, hdr.req_id, rec.ERROR,
                                            enc.error(GatewayError(ErrorKind.CANCELLED, STOPPED)))
        except (aiohttp.ClientError, TimeoutError, GatewayError) as e:
            log.warning("pd: relay of %s to D stopped: %s", hdr.req_id, e)

    async def _relay_events(self, events, plan, url: str, rid: str, skip: int) -> None:
        enc = plan.encoder
        try:
            async for ev in events:
                if isinstance(ev, Token):
                    chunk = enc.token(ev)
                    if skip:
                        skip -= 1
                        continue
                    await self._post_record(url, rid, rec.DATA, chunk)
                else:
                    metrics.observe(plan.model.spec.name, ev)
                    await self._post_record(url, rid, rec.LAST, enc.done(ev))
        except GatewayError as e:
            await self._post_record(url, rid, rec.ERROR, enc.error(e))

    async def _post_record(self, url: str, req_id: str, kind: str, body: bytes) -> None:
        async with self._session.post(url, data=body, headers={"req-id": req_id, "pd-kind": kind,
                                                               "Content-Type": "application/octet-stream"}) as r:
            if r.status != 200:
                raise GatewayError(ErrorKind.UNAVAILABLE, f"D refused a relayed record: {r.status}")

    async def _handoff(self, hdr: pdh.PdHeaders, payload: dict) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls) if self._tls else None,
                                                  headers=self._peer_headers,
                                                  timeout=aiohttp.ClientTimeout(total=self.pd.handoff_timeout_s))
        url = peers.base_url(hdr.d_host, hdr.d_port, self.pd.tls) + "/pd/v1/decode"
        start = time.perf_counter()
        try:
            async with self._session.post(url, data=orjson.dumps(payload),
                                          headers={"Content-Type": "application/json"}) as r:
                if r.status != 200:
                    raise GatewayError(ErrorKind.INTERNAL, f"[P Node] Send D request failed: {r.status} {await r.text()}")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise GatewayError(ErrorKind.INTERNAL, f"[P Node] Send D request failed: {e or type(e).__name__}") from None
        HANDOFF.labels("prefill").observe(time.perf_counter() - start)

    # -- D ----------------------------------------------------------------------------------
    async def _trusted(self, request: Request) -> bool:
        return await self._trusted_peers.allows(request.ip)

    async def decode(self, request: Request):
        if self.pd.role != "decode":
            return bad_request(f"Only the Decode node supports decode hand-offs but you send to {self.pd.role}")
        if not await self._trusted(request):
            return response.json({"error": "not a trusted peer", "error_type": "Forbidden"}, status=403)
        p = await json_body(request)
        if p.get("relay") is True and isinstance(p.get("reqId"), str):  # P relays the chunks itself
            return response.json({"accepted": True, "reqId": p["reqId"]})
        try:
            if p["family"] not in FAMILIES or not isinstance(p["body"], dict) or not isinstance(p["kw"], dict):
                raise ValueError("unknown family or bad body")
            resume = Resume.from_json(p["resume"])
            str(p["reqId"])
        except (KeyError, TypeError, ValueError) as e:
            raise invalid(f"bad hand-off: {e}") from None
        task = asyncio.create_task(self._generate(resume, p))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return response.json({"accepted": True, "reqId": p["reqId"]})

    async def _generate(self, resume: Resume, p: dict) -> None:
        """The generation phase, known by its ``req-id`` to stopInfer (MindIE-MS stops P and D when
        its user goes away): a stopped one ends with an ``error`` record."""
        with self.running.track(str(p["reqId"])) as entry:
            try:
                await self._decode(resume, p)
            except asyncio.CancelledError:
                if not entry.absorb():
                    raise
                log.info("pd: decode of %s stopped (stopInfer)", p["reqId"])
                self.hub.push(p["reqId"], rec.ERROR, _error_bytes(p, None, GatewayError(ErrorKind.CANCELLED, STOPPED)))

    async def _decode(self, resume: Resume, p: dict) -> None:
        rid, skip, produced = p["reqId"], int(p.get("skip", 0)), 0
        plan = req = enc = None
        D_RUNNING.inc()
        try:
            try:
                plan = await FAMILIES[p["family"]](dict(p["body"]), self.catalog, rid, **p["kw"])
            except GatewayError as e:  # P planned the same body: a failure here is this instance's trouble
                raise GatewayError(ErrorKind.UNAVAILABLE, f"decode instance cannot plan the request: {e.message}") from None
            req, enc, name = plan.req, plan.encoder, plan.model.spec.name
            for key, value in p["encoder"].items():
                setattr(enc, key, value)
            req.timeout = p["timeout"]
            if req.timeout and (call := current()) is not None:  # this task runs in the hand-off's context
                call.shorten(req.timeout)
            async with aclosing(self.phased.generation(req, plan.model, resume)) as events:
                async for ev in events:
                    if isinstance(ev, Token):
                        produced += 1
                        chunk = enc.token(ev)
                        if skip:
                            skip -= 1
                        elif req.stream:
                            self.hub.push(rid, rec.DATA, chunk)
                    else:
                        metrics.observe(name, ev)
                        body = enc.done(ev) if req.stream else orjson.dumps(enc.body(ev))
                        self.hub.push(rid, rec.LAST, body)
        except Exception as e:  # noqa: BLE001 - every failure becomes a record
            err = e if isinstance(e, GatewayError) else GatewayError(ErrorKind.INTERNAL, "internal error")
            if not isinstance(e, GatewayError):
                log.exception("pd: decode of %s failed", rid, exc_info=e)
            if err.kind in RETRYABLE:
                again = dict(p["body"])
                again["pd_recompute"] = {"skip": int(p.get("p_tokens", 0)) + produced, "seed": resume.seed}
                log.warning("pd: decode of %s failed (%s); asking for a recompute", rid, err.message)
                self.hub.push(rid, rec.RETRY, orjson.dumps(again))
            else:
                self.hub.push(rid, rec.ERROR, _error_bytes(p, enc, err))
        finally:
            D_RUNNING.dec()

    async def relay(self, request: Request):
        """One record relayed by a P that runs the whole generation: ``req-id``/``pd-kind`` headers."""
        if self.pd.role != "decode":
            return bad_request(f"Only the Decode node supports relayed records but you send to {self.pd.role}")
        if not await self._trusted(request):
            return response.json({"error": "not a trusted peer", "error_type": "Forbidden"}, status=403)
        rid, kind = request.headers.get("req-id", ""), request.headers.get("pd-kind", "")
        if not rid or kind not in (rec.DATA, rec.LAST, rec.ERROR):
            return bad_request("a relayed record needs req-id and pd-kind (data, lastData or error) headers")
        self.hub.push(rid, kind, request.body or b"")
        return response.empty(status=200)

    async def dresult(self, request: Request):
        if self.pd.role != "decode":
            return bad_request(f"Only the Decode node supports dresult but you send to {self.pd.role}")
        await self.hub.serve(request)

    async def start(self) -> None:
        await super().start()
        directory = os.environ.get(shared.ENV)
        if self.pd.role == "decode" and directory:  # several workers: records reach the link's holder
            self.hub.fanin = Fanin(directory, self.hub)
            await self.hub.fanin.start()

    async def close(self, *_args) -> None:
        await super().close()
        if self.hub.fanin is not None:
            await self.hub.fanin.close()
        for t in list(self.tasks):
            t.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None


def _error_bytes(p: dict, enc, err: GatewayError) -> bytes:
    """The error as the user receives it next: in-band in the family's framing, or a JSON body."""
    stream = bool(p["kw"].get("stream")) or p["body"].get("stream") is True
    if not stream:
        return errors.envelope_bytes(err)
    if enc is not None:
        return enc.error(err)
    if p["family"] == "vllm":
        return errors.envelope_bytes(err) + b"\0"
    return (b"data:" if p["family"] == "triton" else b"data: ") + errors.envelope_bytes(err) + b"\n\n"


def _envelope(req_id: str, stream: bool, output: bytes, *, last: bool):
    """P's answer. ``isLastResp`` is in every one (seed 004's table 2 marks it required; MindIE's
    own P leaves it out of a non-stream answer that did not finish, which the coordinator
    tolerates); ``output`` only when streaming or finished (a non-stream answer that continues on D
    has nothing to show yet)."""
    body: dict = {"reqId": req_id, "isStream": stream, "isLastResp": last}
    if stream or last:
        body["output"] = output.decode("utf-8", "replace")
    return response.json(body)


def install(app: Sanic, edge: Edge, h: PdHandlers) -> None:
    """The PD routes of a P or D instance (the family routes are the standard ones). /dresult is one
    long-lived connection held by the coordinator: not counted against the in-flight limit."""
    edge.route(app, h.dresult, "/dresult", ["GET"], "pd_dresult", admit=False)
    edge.route(app, h.decode, "/pd/v1/decode", ["POST"], "pd_decode")
    edge.route(app, h.relay, "/pd/v1/relay", ["POST"], "pd_relay")
