"""A raw gRPC relay to another server: the legacy side of a cutover (docs/migration.md).

One grpc.aio channel per worker to ``target`` (opened on first use, in the worker's loop), TLS or
mTLS exactly as the Triton upstream has them (``gateway.access.channel_credentials``). Calls are
generic, with identity serializers: the request's bytes go as the client sent them, the answer's
bytes come back as the legacy server wrote them, nothing parsed or re-encoded. What a call ends
with is kept whole, for the listener to hand on unchanged:

    Relayed(code, details, initial, trailing, message)   a unary call
    RelayStream                                         a server-streaming call: its messages as they
                                                        come, then ``end`` (a Relayed without message)

The invocation metadata goes on minus what grpc itself writes (``forwarded``); the call's request id
replaces the client's ``x-request-id`` so both servers log one id. The deadline is the caller's
(its Call's remaining time). A legacy server that cannot be reached is UNAVAILABLE with grpc's own
words (they may name the address: ``public_details`` keeps it out of what the client sees).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from gateway.access import channel_credentials
from gateway.call import current
from gateway.core.errors import public_details
from gateway.observe import metrics

log = logging.getLogger("gateway.cutover")

# what the client's metadata may not carry on: grpc's own headers, and the id we stamp ourselves
_DROP = frozenset({"user-agent", "te", "content-type", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
                   "grpc-internal-encoding-request", "host", "x-request-id"})
OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.enable_retries", 0), ("grpc.keepalive_time_ms", 30_000))


@dataclass(frozen=True, slots=True)
class Relayed:
    """How a legacy call ended: its status, initial and trailing metadata, and (unary, OK) its answer's bytes."""

    code: grpc.StatusCode
    details: str
    initial: tuple
    trailing: tuple
    message: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.code is grpc.StatusCode.OK


def forwarded(metadata, request_id: str, drop_authorization: bool, extra: tuple = (),
              api_key: str | None = None) -> tuple:
    """The client's invocation metadata as sent on to the legacy server: grpc's own keys left out,
    ``x-request-id`` the call's; ``drop_authorization``: the listener checked an API key of the
    gateway's own, which is not the legacy server's; ``extra``: (key, value) pairs sent with every
    call unless the client sent that key; ``api_key``: ``authorization: Bearer <key>`` when the
    client's request carries no authorization on."""
    out = [(k, v) for k, v in metadata or () if k[:1] != ":" and k not in _DROP
           and not (drop_authorization and k == "authorization")]
    if extra or api_key is not None:
        have = {k for k, _ in out}
        out.extend((k, v) for k, v in extra if k not in have)
        if api_key is not None and "authorization" not in have:
            out.append(("authorization", f"Bearer {api_key}"))
    out.append(("x-request-id", request_id))
    return tuple(out)


def _error(err: grpc.aio.AioRpcError) -> Relayed:
    code = err.code()
    details = err.details() or ""
    if code is grpc.StatusCode.UNAVAILABLE:
        details = public_details(code, details) or ""
        if details == "Triton is unreachable":
            details = "legacy server is unreachable"
    return Relayed(code, details, tuple(err.initial_metadata() or ()), tuple(err.trailing_metadata() or ()))


class GrpcRelay:
    """The worker's channel to one legacy gRPC target. ``conf``: the dialect's ``legacy`` settings
    (``grpc``, ``tls``, ``timeout_s``, ``headers``, ``api_key_file``: gateway/cutover/settings.py)."""

    def __init__(self, conf):
        if not conf.grpc:
            raise ValueError("legacy.grpc is not set")
        self.target = conf.grpc
        self.tls = conf.tls
        self.timeout_s = conf.timeout_s  # a ceiling on a unary call's deadline
        self.connect_timeout_s = getattr(conf, "connect_timeout_s", 5.0)
        # an answer message larger than ``max_answer_bytes`` is RESOURCE_EXHAUSTED, never buffered whole
        limit = min(getattr(conf, "max_answer_bytes", 256 << 20), 2**31 - 1)
        self.options = (*OPTIONS, ("grpc.max_receive_message_length", limit))
        self.extra = tuple((k.lower(), v) for k, v in (conf.headers or {}).items())
        self.api_key = None
        if conf.api_key_file:
            self.api_key = Path(conf.api_key_file).read_text().strip().splitlines()[0].strip()
        self._channel: grpc.aio.Channel | None = None
        self._calls: dict[tuple[str, bool], object] = {}

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            if self.tls is not None:
                creds, extra = channel_credentials(self.tls)
                self._channel = grpc.aio.secure_channel(self.target, creds, options=self.options + extra)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=self.options)
        return self._channel

    def metadata(self, client_metadata, request_id: str, drop_authorization: bool = False) -> tuple:
        """What a call for a client with ``client_metadata`` sends (``forwarded``)."""
        return forwarded(client_metadata, request_id, drop_authorization, self.extra, self.api_key)

    def _callable(self, method: str, streaming: bool):
        key = (method, streaming)
        fn = self._calls.get(key)
        if fn is None:  # None serializers: bytes in, bytes out
            ch = self.channel()
            fn = ch.unary_stream(method) if streaming else ch.unary_unary(method)
            self._calls[key] = fn
        return fn

    def _timeout(self, stream: bool) -> float:
        """The current request's time left (a stream: its stream deadline), a unary call capped by timeout_s."""
        call = current()
        if call is None:
            return self.timeout_s
        left = call.remaining(stream)
        return max(left if stream else min(left, self.timeout_s), 0.001)

    def _metadata(self) -> tuple:
        call = current()
        return self.metadata(call.metadata, call.request_id) if call is not None else self.extra

    async def probe(self) -> bool:
        """Whether the target takes a connection within connect_timeout_s."""
        try:
            await asyncio.wait_for(self.channel().channel_ready(), self.connect_timeout_s)
            return True
        except (TimeoutError, grpc.aio.AioRpcError):
            return False

    async def check(self, dialect: str) -> bool:
        """Probe once: ``gateway_legacy_up{dialect, transport="grpc"}`` and a start-up line."""
        up = await self.probe()
        metrics.LEGACY_UP.labels(dialect, "grpc").set(1 if up else 0)
        log.log(logging.INFO if up else logging.WARNING, "%s legacy gRPC server %s: %s", dialect, self.target,
                "reachable" if up else "NOT reachable")
        return up

    async def unary(self, method: str, request: bytes, metadata: tuple | None = None) -> Relayed:
        """One unary call (``method``: ``/package.Service/Method``) for the current request, with its
        metadata (``metadata``: what ``metadata()`` gave earlier, for a call in the background) and
        deadline: how it ended, answer bytes included."""
        md = self._metadata() if metadata is None else metadata
        call = self._callable(method, False)(request, metadata=md, timeout=self._timeout(False))
        try:
            message = await call
        except grpc.aio.AioRpcError as err:
            return _error(err)
        return Relayed(grpc.StatusCode.OK, await call.details() or "", tuple(await call.initial_metadata() or ()),
                       tuple(await call.trailing_metadata() or ()), message)

    def stream(self, method: str, request: bytes, metadata: tuple | None = None) -> RelayStream:
        """A server-streaming call for the current request (its metadata, its stream deadline)."""
        md = self._metadata() if metadata is None else metadata
        return RelayStream(self._callable(method, True)(request, metadata=md, timeout=self._timeout(True)))

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._calls.clear()
            await channel.close()


class RelayStream:
    """A server-streaming legacy call: iterate its messages (bytes, as they come), then read ``end``."""

    def __init__(self, call):
        self.call = call
        self.end: Relayed | None = None

    async def initial(self) -> tuple:
        try:
            return tuple(await self.call.initial_metadata() or ())
        except grpc.aio.AioRpcError:
            return ()

    async def messages(self) -> AsyncIterator[bytes]:
        call = self.call
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as err:
            self.end = _error(err)
            return
        finally:
            if self.end is None and not call.done():
                call.cancel()  # the client went away: the legacy call goes too
        self.end = Relayed(grpc.StatusCode.OK, await call.details() or "", (), tuple(await call.trailing_metadata() or ()))


__all__ = ["GrpcRelay", "Relayed", "RelayStream", "forwarded"]
