"""How PD instances reach each other on real networks: by host name or address, over TLS or mTLS.

``dialects.mindie.pd.tls`` (the client side, named like ``upstream.tls``) makes every call this
instance sends to a PD peer (coordinator -> P, coordinator -> D's ``/dresult``, P -> D's hand-off
and relay) go over ``https``: the peers' certificates are checked against ``ca_file`` (None: the
system's CAs) and the host name the instance was given, and ``cert_file``/``key_file`` are
presented to peers whose listener asks for a client certificate (``listeners.mindie_http.tls`` with
``client_ca_file``: the server side is the listener's own TLS).

Peers are named by IPv4/IPv6 address or DNS host name (compose and Kubernetes Service names);
``trusted_peers`` on D may list names too, resolved again at most every ``RESOLVE_S`` seconds.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time

_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*\.?$")
RESOLVE_S = 10.0


def is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return False


def is_host(value: str) -> bool:
    """An IP address or a DNS host name (RFC 1123 labels, at most 253 characters, the last one not all
    digits: ``256.1.1.1`` is a bad address, not a name)."""
    if is_address(value):
        return True
    return len(value) <= 253 and bool(_HOSTNAME.match(value)) and not value.rstrip(".").rsplit(".", 1)[-1].isdigit()


def client_ssl(tls) -> ssl.SSLContext | None:
    """The SSLContext for calls to peers (None without ``tls``); OSError / ssl.SSLError if a file is bad."""
    if tls is None:
        return None
    ctx = ssl.create_default_context(cafile=tls.ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


def base_url(host: str, port: int, tls) -> str:
    scheme = "https" if tls is not None else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class TrustedPeers:
    """D's ``trusted_peers``: addresses as given, host names resolved (cached ``RESOLVE_S`` seconds)."""

    def __init__(self, peers):
        self.addresses = frozenset(p for p in peers if is_address(p))
        self.names = tuple(p for p in peers if not is_address(p))
        self._resolved: frozenset[str] = frozenset()
        self._at = -RESOLVE_S

    async def allows(self, ip: str) -> bool:
        if ip in self.addresses:
            return True
        if not self.names:
            return False
        if time.monotonic() - self._at >= RESOLVE_S:
            self._at = time.monotonic()
            self._resolved = frozenset(await self._resolve())
        return ip in self._resolved

    async def _resolve(self) -> set[str]:
        loop = asyncio.get_running_loop()
        out: set[str] = set()
        for name in self.names:
            try:
                infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            except OSError:
                continue
            out.update(info[4][0] for info in infos)
        return out
