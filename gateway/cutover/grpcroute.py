"""The cutover routes on a gRPC listener: a dialect's methods answered by Triton, by the legacy server
relayed unchanged, or by one while the other is compared in the background (docs/migration.md).

    cut = GrpcCutover(dialect, routes, shadow, relay, read, render, model_of, drop_authorization)
    handler = cut.unary(method, path, triton)          # triton(request_bytes, context) -> answer
    handler = cut.stream(method, path, triton_stream)  # triton_stream(request_bytes, context) -> async iterator

The handlers take the request's bytes and go behind the edge (``Edge.unary`` / ``Edge.stream``) in
place of the dialect's own, with identity request deserializers; an answer is a message or bytes.

    triton   the dialect's own handler, nothing else done (one dict look-up per call)
    legacy   the bytes relayed (gateway/upstream/relay.py); the client gets the legacy server's
             answer bytes, its status code and details, its trailing metadata (the edge adds
             ``x-request-id``, which the legacy server was sent as the call's id), its initial
             metadata, and a stream's messages one by one as they come
    shadow   legacy answers; the same bytes go to the dialect's own handler in the background under
             the shadow runner's bounds (gateway/cutover/shadow.py), both answers read by the
             dialect's ``read(method, bytes) -> Answer`` and compared
    canary   the draw says which side answers; ``reverse_shadow`` runs the other in the background

A Triton-side error becomes the ``Answer`` its client would have got: the dialect's ``render`` gives
a GrpcStatus (its code's name and words) or an in-band message (GRPS), read like any answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.call import current
from gateway.core.errors import _FROM_GRPC, ErrorKind, GatewayError
from gateway.dialect import GrpcStatus, RelayedStatus
from gateway.upstream.relay import GrpcRelay, Relayed

from .compare import Answer, Wire, failure
from .routing import Routes, metadata_getter
from .shadow import Shadow

MAX_STREAM_MESSAGES = 4096  # a shadowed stream longer than this is not compared (skipped)
Read = Callable[[str, bytes], Answer]
_OWN = "x-request-id"  # the edge writes it (the legacy server was sent the same id)


def client_address(peer: str) -> str:
    """The client's address of a gRPC peer (``ipv4:10.0.0.7:51234`` -> ``10.0.0.7``, ``ipv6:[::1]:5``
    -> ``::1``): ``sticky: client`` keeps one client on one side over all its connections."""
    kind, _, rest = (peer or "").partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return peer or ""


def _bytes(answer) -> bytes:
    return answer if answer.__class__ is bytes else answer.SerializeToString()


def _kept(trailing) -> tuple:
    return tuple((k, v) for k, v in trailing if k != _OWN)


def _relayed_error(r: Relayed) -> RelayedStatus:
    return RelayedStatus(_FROM_GRPC.get(r.code, ErrorKind.UPSTREAM_FAILED), GrpcStatus(r.code, r.details, _kept(r.trailing)))


class GrpcCutover:
    def __init__(self, dialect: str, routes: Routes, shadow: Shadow, relay: GrpcRelay, read: Read,
                 render: Callable[[GatewayError], object], model_of: Callable[[str, bytes], str],
                 drop_authorization: bool = False):
        self.dialect = dialect
        self.routes = routes
        self.shadow = shadow
        self.relay = relay
        self.read = read  # (method, answer bytes) -> Answer, with the dialect's own reader
        self.render = render  # the dialect's ErrorRendering.grpc
        self.model_of = model_of  # (method, request bytes) -> model name
        self.drop_authorization = drop_authorization  # the listener has API keys: the client's is the gateway's

    # -- answers as the comparator takes them ------------------------------------------------------
    def relayed_answer(self, method: str, r: Relayed) -> Answer:
        if not r.ok:
            return failure(r.code.name, r.details)
        answer = self.read(method, r.message)
        answer.body = r.message
        return answer

    def rendered_answer(self, method: str, err: GatewayError) -> Answer:
        out = self.render(err)
        if isinstance(out, GrpcStatus):
            return failure(out.code.name, out.message)
        return self.read(method, _bytes(out))  # an in-band error message (GRPS)

    def own_answer(self, method: str, answer) -> Answer:
        data = _bytes(answer)
        got = self.read(method, data)
        got.body = data
        return got

    def relayed_wire(self, method: str, r: Relayed) -> Wire | Answer:
        """The legacy answer as handed to the comparison: its bytes, decoded only when they differ."""
        if not r.ok:
            return failure(r.code.name, r.details)
        return Wire("ok", r.message, lambda: self.relayed_answer(method, r))

    def own_wire(self, method: str, answer) -> Wire:
        data = _bytes(answer)

        def decode() -> Answer:
            got = self.read(method, data)
            got.body = data
            return got
        return Wire("ok", data, decode)

    def stream_answer(self, method: str, messages: list[bytes] | None, end: Answer | None = None) -> Answer:
        """A stream's messages as one Answer: each message's outputs under ``<i>/``; the first
        message read as an error, or ``end`` (how the stream ended, not OK), is the answer."""
        if messages is None:  # more than MAX_STREAM_MESSAGES were not kept: not compared, counted skipped
            return Answer(skipped=f"stream longer than {MAX_STREAM_MESSAGES} messages: not compared")
        outputs, fields, canonical = {}, [], []
        for i, data in enumerate(messages):
            one = self.read(method, data)
            if one.failed:
                return one
            for name, arr in (one.outputs or {}).items():
                outputs[f"{i}/{name}"] = arr
                fields.append(f"{i}/{name}")
            canonical.append(one.canonical)
        if end is not None and end.failed:
            return end
        # protobuf messages: no field order or spelling; each canonical form length-prefixed (no two streams alike)
        whole = None if None in canonical else b"".join(len(c).to_bytes(4, "big") + c for c in canonical)
        return Answer(outputs=outputs, body=b"".join(messages), fields=tuple(fields), canonical=whole)

    # -- background sides --------------------------------------------------------------------------
    def _legacy_unary(self, method: str, path: str, data: bytes, metadata: tuple):
        async def run() -> Wire | Answer:
            return self.relayed_wire(method, await self.relay.unary(path, data, metadata))
        return run

    def _triton_unary(self, method: str, triton, data: bytes):
        async def run() -> Wire | Answer:
            try:
                return self.own_wire(method, await triton(data, None))
            except GatewayError as err:
                return self.rendered_answer(method, err)
        return run

    def _legacy_stream(self, method: str, path: str, data: bytes, metadata: tuple):
        async def run() -> Answer:
            rs = self.relay.stream(path, data, metadata)
            got: list[bytes] | None = []
            async for m in rs.messages():
                if got is not None:
                    got.append(m)
                    if len(got) > MAX_STREAM_MESSAGES:
                        got = None
            end = rs.end
            return self.stream_answer(method, got, None if end is None or end.ok else failure(end.code.name, end.details))
        return run

    def _triton_stream(self, method: str, triton_stream, data: bytes):
        async def run() -> Answer:
            got: list | None = []
            try:
                async for m in triton_stream(data, None):
                    if got is not None:
                        got.append(_bytes(m))
                        if len(got) > MAX_STREAM_MESSAGES:
                            got = None
            except GatewayError as err:
                if got is None:
                    return self.rendered_answer(method, err)
                return self.stream_answer(method, got, self.rendered_answer(method, err))
            return self.stream_answer(method, got)
        return run

    def _md(self, call) -> tuple:
        return self.relay.metadata(call.metadata, call.request_id, self.drop_authorization)

    def _decide(self, method: str, data: bytes, context):
        call = current()
        model = self.model_of(method, data)
        if model and call is not None and not call.model:
            call.model = model
        peer = client_address(context.peer()) if context is not None else ""
        return call, model, self.routes.choose(model, metadata_getter(call.metadata if call else ()), peer)

    # -- handlers ------------------------------------------------------------------------------------
    def unary(self, method: str, path: str, triton: Callable[[bytes, object], Awaitable[object]]):
        async def handler(data: bytes, context):
            call, model, d = self._decide(method, data, context)
            if d.route == "triton":
                return await triton(data, context)
            if d.answer == "triton":
                pending = None
                if d.shadow:
                    md = self._md(call)
                    pending = self.shadow.start(model, d, data, self._legacy_unary(method, path, data, md))
                try:
                    answer = await triton(data, context)
                except GatewayError as err:
                    if pending is not None:  # the error bound now: ``err`` is gone after the except block
                        pending.settle(lambda e=err: self.rendered_answer(method, e))
                    raise
                if pending is not None:
                    pending.settle(lambda: self.own_answer(method, answer))
                return answer
            pending = None
            if d.shadow:
                pending = self.shadow.start(model, d, data, self._triton_unary(method, triton, data))
            r = await self.relay.unary(path, data, self._md(call))  # cancelled: never settled, the runner drops it at its deadline
            if pending is not None:
                pending.settle(self.relayed_wire(method, r))
            if r.initial:
                await context.send_initial_metadata(r.initial)
            if not r.ok:
                raise _relayed_error(r)
            call.trailing = _kept(r.trailing)
            return r.message

        return handler

    def stream(self, method: str, path: str, triton_stream: Callable[[bytes, object], AsyncIterator[object]]):
        async def handler(data: bytes, context):
            call, model, d = self._decide(method, data, context)
            if d.route == "triton":
                async for m in triton_stream(data, context):
                    yield m
                return
            if d.answer == "triton":
                pending = None
                got: list | None = []
                if d.shadow:
                    md = self._md(call)
                    pending = self.shadow.start(model, d, data, self._legacy_stream(method, path, data, md))
                try:
                    async for m in triton_stream(data, context):
                        if pending is not None and got is not None:
                            got.append(m)  # serialized in the background
                            if len(got) > MAX_STREAM_MESSAGES:
                                got = None
                        yield m
                except GatewayError as err:
                    if pending is not None:
                        kept = None if got is None else [_bytes(m) for m in got]
                        pending.settle(lambda e=err: self.stream_answer(method, kept, self.rendered_answer(method, e)))
                    raise
                if pending is not None:
                    pending.settle(lambda: self.stream_answer(method, None if got is None else [_bytes(m) for m in got]))
                return
            pending = None
            if d.shadow:
                pending = self.shadow.start(model, d, data, self._triton_stream(method, triton_stream, data))
            rs = self.relay.stream(path, data, self._md(call))
            initial = await rs.initial()
            if initial:
                await context.send_initial_metadata(initial)
            got = []
            messages = rs.messages()
            try:
                async for m in messages:
                    if pending is not None and got is not None:
                        got.append(m)
                        if len(got) > MAX_STREAM_MESSAGES:
                            got = None
                    yield m
            finally:
                await messages.aclose()  # the client gone: the legacy call is cancelled
            end = rs.end
            if pending is not None:
                pending.settle(lambda: self.stream_answer(method, got, None if end.ok else failure(end.code.name, end.details)))
            if not end.ok:
                raise _relayed_error(end)
            call.trailing = _kept(end.trailing)

        return handler


def for_listener(state, read: Read, render, model_of, keys) -> GrpcCutover | None:
    """The gRPC listener's GrpcCutover from the dialect's state (its ``cutover``, with a gRPC relay;
    None without them: the listener's handlers stay as they are); ``keys``: the listener's API keys."""
    cut = getattr(state, "cutover", None)
    if cut is None or cut.grpc is None:
        return None
    return GrpcCutover(cut.dialect, cut.routes, cut.shadow, cut.grpc, read, render, model_of, keys is not None)


__all__ = ["GrpcCutover", "MAX_STREAM_MESSAGES", "client_address", "for_listener"]
