"""The coordinator role (``dialects.mindie.pd.role: coordinator``) on the MindIE listener.

MindIE-MS's user-facing routes only (``/infer``, ``/infer_token``, ``/generate``,
``/generate_stream``, ``POST /``, ``/v1/chat/completions``, ``/v1/completions``,
``/v2/models/{m}/generate[_stream]``, ``/v2/models/{m}/infer``) plus ``GET /health``. For each
request it picks the P instance and the D instance with the fewest requests outstanding, sends
the user's URL and body to P with ``req-id`` (a decimal 64-bit number), ``req-type: prefill`` and
``d-target: <D host>;<D port>``, relays P's ``output`` and then D's records for that ``req-id``
(queued until P's output went out), and ends on ``lastData`` (stream: each body as it comes;
non-stream: the ``lastData`` body as ``application/json``), or at P's answer when its
``isLastResp`` is true (the inference ended on P; an absent ``isLastResp``, as a MindIE P writes its
non-stream answers, is read as false). It holds one ``GET /dresult``
connection per D instance (reconnecting with a back-off; when another client takes it over, that D
leaves the rotation for ``takeover_backoff_s``, doubling, instead of a fight over the link).

Failures: P's own error answers are forwarded unchanged; a ``retry:`` record sends its body to a
P again with ``is-recompute: true`` (another D when there is one), at most ``max_retry`` times; a
D instance lost mid-request ends a stream with an in-band error in the family's framing (the user
already has part of the answer) and sends a non-stream request again; anything the coordinator
itself refuses is MindIE-MS's plain text with CRLF (``Too many requests``, 429, over
``max_requests``; ``MindIE-MS Coordinator is not ready``, 503; ``Connect to p instance failed``,
500; ...).

When the user goes away (the connection closes before the answer ends), the coordinator sends
``POST /v2/models/{model}/stopInfer`` ``{"id": <req-id>}`` to the request's P and to its D, as
MindIE-MS's ``UserDisConnHandler`` (``ReqPDStopInferHandler``) does, ``{model}`` being the name P's
``/v1/config`` gives; at most ``max_retry`` rounds, until one of them answers 200.

Beyond MindIE: a prompt shorter than ``min_pd_prompt_chars`` is not disaggregated: it goes, as is,
to a ``standard`` instance (or to a P instance without PD headers, which needs P's
``serve_without_pd_headers``) and its answer is relayed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

import aiohttp
import orjson
from sanic import Request, Sanic, response

from gateway.call import current, stream_headers
from gateway.context import GatewayContext
from gateway.core.errors import ErrorKind, GatewayError
from gateway.edge import Edge, httpbody

from . import peers
from . import records as rec
from .config import split_host_port
from .metrics import D_QUEUE, HANDOFF, IN_ROTATION, P_QUEUE, RETRIES, ROUTED, TAKEN_OVER

log = logging.getLogger("gateway.mindie.coordinator")
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
LOST = rec.Record("", "lost", b"")
LINK_IDLE_S = 30.0  # no record nor heartbeat for this long: the D link is considered dead
MAX_TAKEOVER_BACKOFF_S = 300.0


class TakenOver(Exception):
    """D sent ``close``: another client opened /dresult and holds the link now."""


def plain(text: str, status: int):
    """MindIE-MS coordinator errors: text/plain, CRLF-terminated."""
    return response.text(text + "\r\n", status=status, content_type="text/plain")


@dataclass(eq=False)
class Instance:
    address: str
    host: str
    port: int
    gauge: object
    outstanding: int = 0
    down_until: float = 0.0
    connected: bool = False  # D: a /dresult link is open
    task: asyncio.Task | None = None
    url: str = ""  # http(s)://host:port (pd.tls: https)
    model: str = ""  # the model name its /v1/config gives (for stopInfer), once asked

    def take(self, n: int) -> None:
        self.outstanding += n
        self.gauge.labels(self.address).set(self.outstanding)


_FAILED = {404: ErrorKind.NOT_FOUND, 408: ErrorKind.DEADLINE_EXCEEDED, 429: ErrorKind.OVERLOADED,
           503: ErrorKind.UNAVAILABLE}


def _mark_failed(status: int, text: str) -> None:
    """A failure the coordinator answers itself (plain text, or in-band once the stream started):
    the request's metrics and access line count it as failed, not ``ok``."""
    call = current()
    if call is not None:
        kind = _FAILED.get(status) or (ErrorKind.UPSTREAM_FAILED if status >= 500 else ErrorKind.INVALID_ARGUMENT)
        call.fail(GatewayError(kind, text))


@dataclass(eq=False)
class Agent:
    req_id: str
    d: Instance
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


def _instances(addresses, gauge, tls) -> list[Instance]:
    out = []
    for a in addresses:
        host, port = split_host_port(a)
        out.append(Instance(a, host, port, gauge, url=peers.base_url(host, port, tls)))
    return out


def _least(instances: list[Instance], exclude=()) -> Instance | None:
    now = time.monotonic()
    ok = [i for i in instances if i not in exclude and i.down_until <= now]
    return min(ok, key=lambda i: i.outstanding) if ok else None


def prompt_chars(raw: bytes) -> int | None:
    """Length of the prompt in any family's body (None when it cannot be told)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    for key in ("inputs", "prompt", "text_input"):
        if isinstance(body.get(key), str):
            return len(body[key])
    msgs = body.get("messages")
    if isinstance(msgs, list):
        return sum(len(m["content"]) for m in msgs if isinstance(m, dict) and isinstance(m.get("content"), str))
    return None


def inband_error(path: str, raw: bytes, message: str) -> bytes:
    """A stream's error in the family's framing (the coordinator knows the family from URL and body)."""
    env = orjson.dumps({"error": message, "error_type": "Incomplete Generation"})
    if path == "/generate":
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {}
        if isinstance(body, dict) and "inputs" not in body and "prompt" in body:
            return env + b"\0"  # vLLM
    return (b"data:" if path.startswith("/v2/") else b"data: ") + env + b"\n\n"


class Rendering:
    """MindIE-MS's coordinator answers its own errors in CRLF-terminated plain text."""

    TEXT = {ErrorKind.NOT_FOUND: "Not Found", ErrorKind.OVERLOADED: "Too many requests",
            ErrorKind.RESOURCE_EXHAUSTED: "Too many requests", ErrorKind.NOT_READY: "MindIE-MS Coordinator is not ready",
            ErrorKind.UNAVAILABLE: "MindIE-MS Coordinator is not ready",
            ErrorKind.DEADLINE_EXCEEDED: "Request schedule timeout"}
    STATUS = {ErrorKind.NOT_FOUND: 404, ErrorKind.OVERLOADED: 429, ErrorKind.RESOURCE_EXHAUSTED: 429,
              ErrorKind.NOT_READY: 503, ErrorKind.UNAVAILABLE: 503, ErrorKind.DEADLINE_EXCEEDED: 408,
              ErrorKind.INVALID_ARGUMENT: 400, ErrorKind.FAILED_PRECONDITION: 400}

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, "Too many requests")

    def http(self, err: GatewayError, status: int | None = None):
        code = status or self.STATUS.get(err.kind, 500)
        text = self.TEXT.get(err.kind) or ("Request format is invalid" if code < 500 else "Scheduler proc req failed")
        return plain(text, code)

    def grpc(self, err: GatewayError):  # no gRPC listener
        from gateway.core.errors import GRPC_STATUS
        from gateway.dialect import GrpcStatus

        return GrpcStatus(GRPC_STATUS[err.kind], err.message)


class Coordinator:
    role = "coordinator"
    errors = Rendering()

    def __init__(self, ctx: GatewayContext, cfg):
        self.ctx = ctx
        self.pd = cfg.pd
        self.p = _instances(self.pd.prefill, P_QUEUE, self.pd.tls)
        self.d = _instances(self.pd.decode, D_QUEUE, self.pd.tls)
        self.s = _instances(self.pd.standard, P_QUEUE, self.pd.tls)
        self.agents: dict[str, Agent] = {}
        self.inflight = 0
        self.session: aiohttp.ClientSession | None = None
        self.peer_headers = self.pd.peer_headers()  # read once: a bad key file stops start-up
        self.stopping: set[asyncio.Task] = set()

    # -- lifecycle and D links ----------------------------------------------------------------
    async def start(self, *_a) -> None:
        tls = peers.client_ssl(self.pd.tls)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls) if tls else None,
                                             headers=self.peer_headers, timeout=aiohttp.ClientTimeout(
            total=None, connect=self.pd.connect_timeout_s, sock_read=self.pd.infer_timeout_s))
        for d in self.d:
            d.task = asyncio.create_task(self._link(d))

    async def close(self, *_a) -> None:
        for d in self.d:
            if d.task is not None:
                d.task.cancel()
        if self.session is not None:
            await self.session.close()

    async def _link(self, d: Instance) -> None:
        """Hold one GET /dresult on D; dispatch its records; reconnect with a back-off. When another
        client takes the link over (D sends ``close``), D leaves the rotation and the coordinator
        waits ``takeover_backoff_s`` (doubling, at most ``MAX_TAKEOVER_BACKOFF_S``) before it takes
        the link back, instead of fighting for it: an operator reading /dresult keeps it meanwhile."""
        backoff, takeover_wait = 0.1, self.pd.takeover_backoff_s
        IN_ROTATION.labels(d.address).set(0)
        while True:
            linked_at = None
            try:
                async with self.session.get(d.url + "/dresult", timeout=aiohttp.ClientTimeout(
                        total=None, connect=self.pd.connect_timeout_s, sock_read=LINK_IDLE_S)) as r:
                    if r.status != 200:
                        raise aiohttp.ClientResponseError(r.request_info, (), status=r.status)
                    d.connected, backoff, linked_at = True, 0.1, time.monotonic()
                    IN_ROTATION.labels(d.address).set(1)
                    log.info("coordinator: /dresult linked to D %s", d.address)
                    buf = b""
                    async for data, end in r.content.iter_chunks():
                        buf += data
                        if not end:
                            continue
                        chunk, buf = buf, b""
                        for record in rec.parse_chunk(chunk):
                            if record.kind == rec.CLOSE:
                                raise TakenOver
                            agent = self.agents.get(record.req_id)
                            if agent is not None:
                                agent.queue.put_nowait(record)
            except asyncio.CancelledError:
                raise
            except TakenOver:
                if linked_at is not None and time.monotonic() - linked_at > takeover_wait:
                    takeover_wait = self.pd.takeover_backoff_s  # held long enough: not a fight
                self._lost(d)
                IN_ROTATION.labels(d.address).set(0)
                TAKEN_OVER.labels(d.address).inc()
                log.warning("coordinator: another client took over the /dresult link to D %s; D is out of rotation, "
                            "next try in %.0f s", d.address, takeover_wait)
                await asyncio.sleep(takeover_wait)
                takeover_wait = min(takeover_wait * 2, MAX_TAKEOVER_BACKOFF_S)
                continue
            except Exception as e:  # noqa: BLE001 - any failure: D is lost until the link is back
                if d.connected:
                    log.warning("coordinator: /dresult link to D %s lost: %s", d.address, e)
            self._lost(d)
            IN_ROTATION.labels(d.address).set(0)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _lost(self, d: Instance) -> None:
        d.connected = False
        for agent in list(self.agents.values()):
            if agent.d is d:
                agent.queue.put_nowait(LOST)

    # -- user requests --------------------------------------------------------------------------
    async def health(self, _request: Request):
        """Readiness (MindIE-MS ``ReadinessProbeHandler``): 200 once a D is linked and a P is listed."""
        ready = any(d.connected for d in self.d) and bool(self.p or self.s)
        return response.empty(status=200 if ready else 503)

    async def alive(self, _request: Request):
        """MindIE-MS's startup and liveness probes (``StartUpProbeHandler``, ``HealthProbeHandler``): 200."""
        return response.empty(status=200)

    async def tokenizer(self, request: Request):
        """``/v1/tokenizer`` is one of MindIE-MS's user routes: any instance counts the tokens."""
        return await self._alone(request, request.body or b"", count=False)

    async def _model_name(self, inst: Instance) -> str:
        if not inst.model:
            async with self.session.get(inst.url + "/v1/config", timeout=aiohttp.ClientTimeout(total=5)) as r:
                inst.model = orjson.loads(await r.read())["modelName"]
        return inst.model

    async def _stop_infer(self, req_id: str, p: Instance, d: Instance) -> None:
        """The user went away: stopInfer on P and on D (MindIE-MS ``ReqPDStopInferHandler``)."""
        body = orjson.dumps({"id": req_id})
        headers = {"Accept": "*/*", "Content-Type": "application/json"}
        for _ in range(max(1, self.pd.max_retry)):
            stopped = False
            for inst in (p, d):
                try:
                    url = f"{inst.url}/v2/models/{await self._model_name(inst)}/stopInfer"
                    async with self.session.post(url, data=body, headers=headers,
                                                 timeout=aiohttp.ClientTimeout(total=5)) as r:
                        stopped |= r.status == 200
                        log.info("coordinator: user of %s went away; stopInfer to %s: %d", req_id, inst.address,
                                 r.status)
                except (aiohttp.ClientError, TimeoutError, KeyError, orjson.JSONDecodeError) as e:
                    log.warning("coordinator: stopInfer of %s to %s failed: %s", req_id, inst.address, e)
            if stopped:
                return

    async def handle(self, request: Request, **_kw):
        if self.inflight >= self.pd.max_requests:
            return plain("Too many requests", 429)
        self.inflight += 1
        try:
            raw = request.body or b""
            n = prompt_chars(raw)
            if self.pd.min_pd_prompt_chars and n is not None and n < self.pd.min_pd_prompt_chars:
                return await self._alone(request, raw)
            return await self._disaggregated(request, raw)
        finally:
            self.inflight -= 1

    def _path(self, request: Request) -> str:
        return request.path + (f"?{request.query_string}" if request.query_string else "")

    async def _alone(self, request: Request, raw: bytes, count: bool = True):
        """Short prompt: one instance runs it whole (a standard one, else a P without PD headers)."""
        inst = _least(self.s) or _least(self.p)
        if inst is None:
            return plain("MindIE-MS Coordinator is not ready", 503)
        if count:
            ROUTED.labels("alone").inc()
        inst.take(1)
        resp = None
        try:
            headers = {"Content-Type": request.headers.get("content-type", "application/json")}
            async with self.session.post(inst.url + self._path(request), data=raw, headers=headers) as r:
                ctype = r.headers.get("Content-Type", "application/json")
                if not ctype.startswith("text/event-stream"):
                    return httpbody.raw(await r.read(), status=r.status, content_type=ctype)
                resp = await request.respond(status=r.status, content_type=ctype, headers=stream_headers(STREAM_HEADERS))
                async for data in r.content.iter_any():
                    await resp.send(data)
            await resp.eof()
            return None
        except aiohttp.ClientConnectorError:
            inst.down_until = time.monotonic() + 2.0
            _mark_failed(500, "Connect to p instance failed")
            return plain("Connect to p instance failed", 500)
        except (aiohttp.ClientError, TimeoutError):
            _mark_failed(500, "Receive messages from p instance failed")
            if resp is None:
                return plain("Receive messages from p instance failed", 500)
            await resp.send(inband_error(request.path, raw, "Receive messages from p instance failed"))
            await resp.eof()
            return None
        finally:
            inst.take(-1)

    async def _disaggregated(self, request: Request, raw: bytes):
        req_id = str(uuid.uuid4().int >> 64)
        route: list[Instance] = []
        try:
            return await self._pd(request, raw, req_id, route)
        except asyncio.CancelledError:
            if route:  # the user went away mid-request: stop it on P and D, as MindIE-MS does
                task = asyncio.get_running_loop().create_task(self._stop_infer(req_id, *route))
                self.stopping.add(task)
                task.add_done_callback(self.stopping.discard)
            raise

    async def _pd(self, request: Request, raw: bytes, req_id: str, route: list):
        deadline = time.monotonic() + self.pd.infer_timeout_s
        path, body, recompute, attempts = self._path(request), raw, False, 0
        exclude_d: set[Instance] = set()
        resp = None  # the user's stream, once started

        async def fail(text: str, status: int):
            _mark_failed(status, text)
            if resp is None:
                return plain(text, status)
            await resp.send(inband_error(request.path, raw, text))
            await resp.eof()
            return None

        while True:
            p = _least(self.p)
            live = [d for d in self.d if d.connected]
            d = _least([x for x in live if x not in exclude_d]) or _least(live)
            if p is None or d is None:
                return await fail("MindIE-MS Coordinator is not ready", 503)
            ROUTED.labels("pd").inc()
            agent = self.agents[req_id] = Agent(req_id, d)
            p.take(1)
            d.take(1)
            p_busy = True
            try:
                route[:] = [p, d]
                headers = {"req-id": req_id, "req-type": "prefill", "d-target": f"{d.host};{d.port}",
                           "d-port": str(d.port),  # as MindIE-MS: D's HTTP port beside d-target
                           "Content-Type": request.headers.get("content-type", "application/json")}
                if recompute:
                    headers["is-recompute"] = "true"
                try:
                    async with self.session.post(p.url + path, data=body, headers=headers) as r:
                        status, ctype, data = r.status, r.headers.get("Content-Type", ""), await r.read()
                except aiohttp.ClientConnectorError:
                    p.down_until = time.monotonic() + 2.0
                    attempts += 1
                    if attempts <= self.pd.max_retry and resp is None:
                        continue  # nothing reached the user: another P
                    return await fail("Connect to p instance failed", 500)
                except (aiohttp.ClientError, TimeoutError):
                    return await fail("Receive messages from p instance failed", 500)
                p.take(-1)
                p_busy = False
                if status != 200:  # P's own answer (validation, hand-off failure): forwarded unchanged
                    if resp is None:
                        return httpbody.raw(data, status=status, content_type=ctype or "application/json")
                    return await fail(data.decode("utf-8", "replace"), status)
                try:  # isLastResp: absent from a MindIE P's non-stream answer (then: not the last)
                    env = orjson.loads(data)
                    stream, last, output = env["isStream"], env.get("isLastResp", False), env.get("output", "")
                    if not (isinstance(stream, bool) and isinstance(last, bool) and isinstance(output, str)):
                        raise TypeError
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    return await fail("P instance error", 500)
                answered = time.perf_counter()
                if stream:
                    if resp is None:
                        resp = await request.respond(content_type="text/event-stream", headers=stream_headers(STREAM_HEADERS))
                    if output:
                        await resp.send(output.encode())
                    if last:
                        await resp.eof()
                        return None
                elif last:
                    return httpbody.raw(output.encode(), content_type="application/json")
                first = True
                while True:
                    try:
                        item = await asyncio.wait_for(agent.queue.get(), max(0.0, deadline - time.monotonic()))
                    except TimeoutError:
                        return await fail("Request infer timeout", 408)
                    if first and stream and item is not LOST:  # streams: P's first chunk -> D's next one
                        HANDOFF.labels("coordinator").observe(time.perf_counter() - answered)
                        first = False
                    if item is LOST:
                        RETRIES.labels("d_lost").inc()
                        if stream:  # the user has part of the answer: end it cleanly
                            return await fail(f"Decode instance {d.address} went away; generation interrupted", 500)
                        attempts += 1
                        if attempts > self.pd.max_retry:
                            return await fail("D instance error", 500)
                        exclude_d.add(d)
                        break  # nothing reached the user: run it again elsewhere
                    if item.kind == rec.DATA:
                        if stream:
                            await resp.send(item.body)
                    elif item.kind == rec.LAST:
                        if not stream:
                            return httpbody.raw(item.body, content_type="application/json")
                        await resp.send(item.body)
                        await resp.eof()
                        return None
                    elif item.kind == rec.ERROR:
                        if not stream:  # MindIE answers 200; an error status lets clients raise
                            return httpbody.raw(item.body, status=500, content_type="application/json")
                        await resp.send(item.body)
                        await resp.eof()
                        return None
                    elif item.kind == rec.RETRY:
                        RETRIES.labels("retry").inc()
                        attempts += 1
                        if attempts > self.pd.max_retry:
                            return await fail("Exceeded the maximum number of retries", 500)
                        body, recompute = item.body, True
                        exclude_d.add(d)
                        break
            finally:
                self.agents.pop(req_id, None)
                if p_busy:
                    p.take(-1)
                d.take(-1)


USER_ROUTES = ("/infer", "/infer_token", "/generate", "/generate_stream", "/", "/v1/chat/completions",
               "/v1/completions")


def attach(app: Sanic, edge: Edge, c: Coordinator) -> None:
    """MindIE-MS's user routes and health probes on the MindIE port (the worker starts and closes
    the coordinator's D links with the listener: ``start`` / ``close``)."""
    for i, path in enumerate(USER_ROUTES):
        edge.route(app, c.handle, path, ["POST"], f"user_{i}")
    for suffix in ("generate", "generate_stream", "infer"):
        edge.route(app, c.handle, rf"/v2/models/<model:[\w\-.]+>/{suffix}", ["POST"], f"triton_{suffix}")
    edge.route(app, c.tokenizer, "/v1/tokenizer", ["POST"], "user_tokenizer")
    # MindIE-MS's status-port probes (Coordinator.cpp InitStatusListener), on this port
    for path, handler in (("/health", c.health), ("/v1/startup", c.alive), ("/v1/health", c.alive),
                          ("/v1/readiness", c.health), ("/v2/health/live", c.alive),
                          ("/v2/health/ready", c.health)):
        edge.route(app, handler, path, ["GET"], path.strip("/").replace("/", "_"), admit=False)
