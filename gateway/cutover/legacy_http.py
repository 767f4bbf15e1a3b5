"""The HTTP client to a dialect's legacy server: the request passed on unchanged, the answer back unchanged.

    client = LegacyHttp(dialect, legacy_settings)        # one per dialect per worker; start() in the loop
    reply = await client.call(method, target, headers, body)      # LegacyReply(status, headers, body)
    async with client.stream(method, target, headers, body) as s:  # s.status, s.headers, async for chunk in s
        ...

``target`` is the request's path with its query (``/v1/models/m:predict``); the legacy base URL's
path, if any, is put in front of it. Headers go both ways as they are but the hop-by-hop ones
(RFC 9110 7.6.1: connection, keep-alive, te, trailer, transfer-encoding, upgrade, proxy-*), host
and content-length; nothing is added that the client did not send (no User-Agent, Accept or
Accept-Encoding of aiohttp's own), except ``headers`` from the settings and ``Authorization:
Bearer <api_key_file's key>`` when the request carries no Authorization on. ``drop_authorization``
(the request came through a listener with ``api_keys``): the client's Authorization is the gateway's
own key, never sent to another server; the legacy server gets ``api_key_file``'s key, or none.
Without it the client's Authorization passes unchanged (the legacy server checks it). Answers are
not decompressed (``content-encoding`` passes with the bytes it describes).

One pooled ``aiohttp.ClientSession`` per worker (``max_connections``), TLS / mTLS from ``tls`` as
the Triton upstream has it. A whole answer is read up to ``max_answer_bytes``, past it the call fails
(a stream is relayed as it comes, under its deadline). Each call's deadline is the current request's (``gateway.call``),
capped by ``timeout_s``; connecting has ``connect_timeout_s``. A legacy server that cannot be
reached is UNAVAILABLE, one that does not answer in time DEADLINE_EXCEEDED: the dialect renders
them in its own envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from gateway.call import current
from gateway.core.errors import ErrorKind, GatewayError

from .settings import LegacySettings

log = logging.getLogger("gateway.cutover")

HOP_BY_HOP = frozenset(("connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
                        "proxy-authenticate", "proxy-authorization", "proxy-connection", "host", "content-length"))
_SKIP_AUTO = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


@dataclass(slots=True)
class LegacyReply:
    status: int
    headers: list[tuple[str, str]]  # as received, hop-by-hop ones removed
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


def tls_context(tls) -> ssl.SSLContext:
    """``tls`` (UpstreamTls): its CA (else the system's), its client certificate (mTLS)."""
    ctx = ssl.create_default_context(cafile=tls.ca_file) if tls.ca_file else ssl.create_default_context()
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


class LegacyHttp:
    def __init__(self, dialect: str, conf: LegacySettings):
        if not conf.http:
            raise ValueError(f"dialects.{dialect}.legacy.http is not set")
        self.dialect = dialect
        self.conf = conf
        parts = urlsplit(conf.http)
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.prefix = parts.path.rstrip("/")
        self._ssl = tls_context(conf.tls) if conf.tls is not None and parts.scheme == "https" else None
        self._server_name = conf.tls.server_name if conf.tls is not None else None
        self._extra = [(k, v) for k, v in conf.headers.items()]
        self._key = None
        if conf.api_key_file:
            self._key = Path(conf.api_key_file).read_text().strip().splitlines()[0].strip()
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self.conf.max_connections, ssl=self._ssl if self._ssl else None,
                                         enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.conf.connect_timeout_s)
        self._session = aiohttp.ClientSession(
            base_url=self.base, connector=connector, timeout=timeout, auto_decompress=False,
            skip_auto_headers=_SKIP_AUTO, cookie_jar=aiohttp.DummyCookieJar(), raise_for_status=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def headers_out(self, headers: Iterable[tuple[str, str]], drop_authorization: bool = False) -> list[tuple[str, str]]:
        out, auth = [], False
        for k, v in headers:
            lk = k.lower()
            if lk in HOP_BY_HOP or (drop_authorization and lk == "authorization"):
                continue
            auth |= lk == "authorization"
            out.append((k, v))
        given = {k.lower() for k, _ in out}
        out.extend((k, v) for k, v in self._extra if k.lower() not in given)
        if self._key and not auth:
            out.append(("Authorization", f"Bearer {self._key}"))
        return out

    def _timeout(self, stream: bool) -> float:
        """The current request's time left (a stream: its stream deadline), a unary call capped by timeout_s."""
        call = current()
        if call is None:
            return self.conf.timeout_s
        left = call.remaining(stream)
        return max(left if stream else min(left, self.conf.timeout_s), 0.001)

    def _request(self, method: str, target: str, headers, body: bytes, timeout: float, drop_authorization: bool = False):
        session = self._session or self._open()
        return session.request(method, self.prefix + target, headers=self.headers_out(headers, drop_authorization),
                               data=body or None,
                               timeout=aiohttp.ClientTimeout(total=timeout, connect=self.conf.connect_timeout_s),
                               allow_redirects=False, server_hostname=self._server_name, compress=None)

    async def call(self, method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes,
                   drop_authorization: bool = False) -> LegacyReply:
        timeout = self._timeout(False)
        try:
            async with self._request(method, target, headers, body, timeout, drop_authorization) as resp:
                return LegacyReply(resp.status, _headers_in(resp), await self._read(resp))
        except TimeoutError:
            raise GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded (legacy server)") from None
        except aiohttp.ClientError as exc:
            raise GatewayError(ErrorKind.UNAVAILABLE, f"legacy server unavailable: {exc}") from None

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The whole answer, at most ``max_answer_bytes`` (past it: UPSTREAM_FAILED, nothing more read)."""
        limit = self.conf.max_answer_bytes
        if (resp.content_length or 0) > limit:
            raise _too_large(limit)
        parts, size = [], 0
        async for chunk in resp.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            parts.append(chunk)
        return b"".join(parts)

    @contextlib.asynccontextmanager
    async def stream(self, method: str, target: str, headers: Iterable[tuple[str, str]],
                     body: bytes, drop_authorization: bool = False) -> AsyncIterator[LegacyStream]:
        """The answer as it comes: status and headers at once, then its body's chunks as received."""
        timeout = self._timeout(True)
        try:
            async with self._request(method, target, headers, body, timeout, drop_authorization) as resp:
                yield LegacyStream(resp)
        except TimeoutError:
            raise GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded (legacy server)") from None
        except aiohttp.ClientError as exc:
            raise GatewayError(ErrorKind.UNAVAILABLE, f"legacy server unavailable: {exc}") from None

    async def probe(self, path: str) -> bool:
        """True when the legacy server answers ``path`` (any status below 500) within connect_timeout_s."""
        try:
            async with asyncio.timeout(self.conf.connect_timeout_s):
                async with self._request("GET", path, (), b"", self.conf.connect_timeout_s) as resp:
                    await resp.read()
                    return resp.status < 500
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False


def _too_large(limit: int) -> GatewayError:
    return GatewayError(ErrorKind.UPSTREAM_FAILED, f"legacy server answer larger than {limit} bytes (max_answer_bytes)")


class LegacyStream:
    __slots__ = ("_resp", "status", "headers")

    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp
        self.status = resp.status
        self.headers = _headers_in(resp)

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        async for chunk in self._resp.content.iter_any():  # as the bytes arrive (SSE events as they come)
            yield chunk

    async def read(self) -> bytes:
        return await self._resp.read()


def _headers_in(resp: aiohttp.ClientResponse) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers
            if k.decode("latin-1").lower() not in HOP_BY_HOP]
