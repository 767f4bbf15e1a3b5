"""Access and transport: API keys per listener, TLS on listeners and to Triton, models per dialect.

    ApiKeys         the keys of one listener (``listeners.<name>.api_keys`` / ``api_keys_file``);
                    the edge asks it about every request before admission; with a keys file,
                    ``ReloadingKeys`` reads the file again when it changes
    server_ssl      an ``ssl.SSLContext`` for an HTTP listener's ``tls`` (mTLS with ``client_ca_file``)
    server_credentials / channel_credentials
                    the same for a gRPC listener, and for the channel to Triton (``upstream.tls``)
                    (listeners: files read again when they change, at the next handshake; Triton's
                    channel: read at start)
    ModelScope      the Triton models one dialect may reach (``dialects.<name>.triton_models``): a
                    restricted view of the Upstream handed to the dialect's ``open``

A key is presented as ``Authorization: Bearer <key>`` (HTTP header or gRPC metadata): what the
OpenAI, TGI and vLLM clients send; TF Serving, GRPS and MindIE have no API keys of their own.
Keys are compared as SHA-256 digests with ``hmac.compare_digest`` against every configured key,
without an early exit, so neither the answer's timing nor its content tells which key came close.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import ssl
from collections.abc import Iterable
from contextlib import aclosing
from pathlib import Path

import grpc

from gateway.core.errors import ErrorKind, GatewayError

log = logging.getLogger("gateway.access")
AUTHORIZATION = "authorization"
UNAUTHENTICATED_MESSAGE = "Missing or invalid API key (send Authorization: Bearer <key>)"


def read_keys_file(path: str) -> list[str]:
    """One key a line; blank lines and lines starting with ``#`` are ignored; OSError if unreadable."""
    keys = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


def bearer(value: str | bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive), else None."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class ApiKeys:
    """The keys one listener accepts (digests only are kept)."""

    __slots__ = ("_digests",)

    def __init__(self, keys: Iterable[str]):
        self._digests = tuple(_digest(k) for k in keys)
        if not self._digests:
            raise ValueError("ApiKeys needs at least one key")

    def __len__(self) -> int:
        return len(self._digests)

    def valid(self, token: str | None) -> bool:
        """Constant time over every key: each one is compared, whatever the earlier ones gave."""
        given = _digest(token if token is not None else "")
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(given, digest)
        return found and token is not None

    def check(self, authorization: str | bytes | None) -> None:
        """Raise UNAUTHENTICATED unless ``authorization`` is ``Bearer <one of the keys>``."""
        if not self.valid(bearer(authorization)):
            raise GatewayError(ErrorKind.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)

    def check_metadata(self, metadata) -> None:
        """The same for gRPC invocation metadata (``authorization: Bearer <key>``)."""
        value = None
        for k, v in metadata or ():
            if k == AUTHORIZATION:
                value = v
                break
        self.check(value)


class ReloadingKeys(ApiKeys):
    """A listener's keys when it has ``api_keys_file``: its inline ``api_keys`` plus the file's, read
    again when the file changes (looked at, at most every 0.25 s, when a key is checked: the
    worker's own look, so every worker follows). A file that becomes unreadable or empty keeps the
    keys it had, with a warning. Requests already admitted are not affected."""

    __slots__ = ("_inline", "_path", "_watch", "_name")

    def __init__(self, name: str, inline: Iterable[str], path: str):
        from gateway.process.filewatch import FileWatch

        self._name, self._inline, self._path = name, tuple(inline), path
        self._watch = FileWatch([path])
        super().__init__(self._inline + tuple(read_keys_file(path)))

    def valid(self, token: str | None) -> bool:
        if self._watch.changed():
            self._reload()
        return super().valid(token)

    def _reload(self) -> None:
        try:
            keys = read_keys_file(self._path)
        except (OSError, UnicodeDecodeError) as e:
            log.warning("listeners.%s.api_keys_file: cannot read %s (%s); the keys read before stay",
                        self._name, self._path, getattr(e, "strerror", None) or e)
            return
        if not keys:
            log.warning("listeners.%s.api_keys_file: %s holds no key; the keys read before stay", self._name, self._path)
            return
        self._digests = tuple(_digest(k) for k in self._inline + tuple(keys))
        log.info("listeners.%s.api_keys_file: %s read again (%d keys)", self._name, self._path, len(keys))


def _secret(k) -> str:
    return k.get_secret_value() if hasattr(k, "get_secret_value") else k


def listener_keys(listener) -> ApiKeys | None:
    """The listener's ApiKeys, or None when it requires none (``ReloadingKeys`` with a keys file)."""
    path = getattr(listener, "api_keys_file", None)
    if path:
        return ReloadingKeys(listener.name, [_secret(k) for k in listener.inline_api_keys], path)
    keys = [_secret(k) for k in listener.api_keys]
    return ApiKeys(keys) if keys else None


# -- TLS ------------------------------------------------------------------------------------------
def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _server_context(tls) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file:
        ctx.load_verify_locations(cafile=tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _tls_files(tls) -> list[str]:
    return [tls.cert_file, tls.key_file, tls.client_ca_file]


class _ReloadingContext:
    """The listener's first SSLContext stays the server's; at each handshake (its SNI callback, which
    OpenSSL calls with or without SNI) the files are looked at (at most every 0.25 s) and, once they
    changed, the handshake is moved onto a context built from them. Connections already open keep
    theirs; a set of files that does not load keeps the previous context, with a warning."""

    def __init__(self, tls, name: str):
        from gateway.process.filewatch import FileWatch

        self.tls, self.name = tls, name
        self.base = self.current = _server_context(tls)
        self.watch = FileWatch(_tls_files(tls))
        self.base.sni_callback = self._handshake

    def _handshake(self, conn, _server_name, _ctx):
        if self.watch.changed():
            try:
                fresh = _server_context(self.tls)
                fresh.sni_callback = self._handshake
                self.current = fresh
                log.info("listeners.%s.tls: certificate files read again", self.name)
            except (OSError, ssl.SSLError, ValueError) as e:
                log.warning("listeners.%s.tls: cannot load the changed certificate files (%s); the previous "
                            "ones stay", self.name, e)
        if self.current is not self.base:
            conn.context = self.current
        return None


def server_ssl(tls, name: str = "?") -> ssl.SSLContext:
    """An HTTP listener's TLS (TLS 1.2+); with ``client_ca_file`` a client certificate is required.
    Certificate, key and client CA files are read again when they change (``_ReloadingContext``)."""
    return _ReloadingContext(tls, name).base


def _grpc_certificates(tls):
    return grpc.ssl_server_certificate_configuration([(_read(tls.key_file), _read(tls.cert_file))],
                                                     root_certificates=_read(tls.client_ca_file))


def server_credentials(tls, name: str = "?") -> grpc.ServerCredentials:
    """A gRPC listener's TLS; with ``client_ca_file`` a client certificate is required (mTLS). grpc asks
    for the certificates at each new connection: the files are read again when they changed."""
    from gateway.process.filewatch import FileWatch

    watch = FileWatch(_tls_files(tls))

    def fetch():
        if not watch.changed():
            return None  # unchanged: grpc keeps what it has
        try:
            config = _grpc_certificates(tls)
        except OSError as e:
            log.warning("listeners.%s.tls: cannot read the changed certificate files (%s); the previous ones "
                        "stay", name, e)
            return None
        log.info("listeners.%s.tls: certificate files read again", name)
        return config

    return grpc.dynamic_ssl_server_credentials(_grpc_certificates(tls), fetch,
                                               require_client_authentication=tls.client_ca_file is not None)


def channel_credentials(tls) -> tuple[grpc.ChannelCredentials, tuple[tuple[str, str], ...]]:
    """``upstream.tls`` -> (credentials, extra channel options): the CA to trust (None: the system's),
    the client certificate for mTLS, and the name Triton's certificate must carry."""
    creds = grpc.ssl_channel_credentials(root_certificates=_read(tls.ca_file), private_key=_read(tls.key_file),
                                         certificate_chain=_read(tls.cert_file))
    options = (("grpc.ssl_target_name_override", tls.server_name),) if tls.server_name else ()
    return creds, options


def client_ssl(tls) -> tuple[ssl.SSLContext, str | None]:
    """``upstream.tls`` for the HTTP/2 client (gateway/h2/client.py), what ``channel_credentials``
    gives grpc: asyncio's TLS (1.2 at least) with ALPN "h2", the CA to trust (None: the system's),
    the client certificate for mTLS; and the name Triton's certificate must carry (None: the
    target's host). Files read at start, as the grpc channel reads them."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    if tls.cert_file is not None:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    ctx.set_alpn_protocols(["h2"])
    return ctx, tls.server_name


# -- models per dialect -------------------------------------------------------------------------------
def unknown_model(name: str) -> GatewayError:
    """Triton's own answer for a model it does not have: a model outside the scope is not there."""
    return GatewayError(ErrorKind.NOT_FOUND, f"Request for unknown model: '{name}' is not found")


class ModelScope:
    """The Upstream as one dialect sees it when ``dialects.<name>.triton_models`` lists models: calls
    naming another model answer NOT_FOUND in Triton's words (each dialect renders it as its own
    not-found), and the repository index lists only these models. It is the whole Upstream
    contract (gateway.upstream.Upstream), each method stated."""

    def __init__(self, upstream, models: Iterable[str]):
        self.upstream = upstream
        self.models = frozenset(models)
        self._index: tuple = ((), [])  # (the upstream's index object, its filtered list): one object per index

    def allows(self, model: str) -> bool:
        return model in self.models

    def _check(self, model: str) -> None:
        if model not in self.models:
            raise unknown_model(model)

    async def infer(self, req, views: bool = False):
        self._check(req.model)
        return await self.upstream.infer(req, views)

    async def infer_bytes(self, model: str, request):
        self._check(model)
        return await self.upstream.infer_bytes(model, request)

    async def stream(self, req):
        self._check(req.model)
        async with aclosing(self.upstream.stream(req)) as items:  # closed at once with us
            async for resp in items:
                yield resp

    async def model_metadata(self, model: str, version: str = ""):
        self._check(model)
        return await self.upstream.model_metadata(model, version)

    async def model_config(self, model: str, version: str = ""):
        self._check(model)
        return await self.upstream.model_config(model, version)

    async def model_ready(self, model: str, version: str = "") -> bool:
        return model in self.models and await self.upstream.model_ready(model, version)

    async def repository_index(self):
        """The filtered index: the same list while the upstream serves the same (cached) index."""
        full = await self.upstream.repository_index()
        if self._index[0] is not full:
            self._index = (full, [e for e in full if e.name in self.models])
        return self._index[1]

    def cached_index(self):
        """The filtered index while the upstream's cached one is the one filtered last (else None: ask)."""
        return self._index[1] if self.upstream.cached_index() is self._index[0] else None

    def cached_metadata(self, model: str, version: str = ""):
        return self.upstream.cached_metadata(model, version) if model in self.models else None

    async def server_ready(self) -> bool:
        return await self.upstream.server_ready()

    async def server_metadata(self):
        return await self.upstream.server_metadata()

    def body_buffer(self, size: int):
        return self.upstream.body_buffer(size)

    def shared_from(self) -> int | None:
        return self.upstream.shared_from()

    def shared_arena(self):
        return self.upstream.shared_arena()


def scoped(upstream, models: Iterable[str]):
    """``upstream`` restricted to ``models``; unchanged when the list is empty (every model)."""
    models = tuple(models)
    return ModelScope(upstream, models) if models else upstream
