"""The upstream client the settings describe: one place builds it for the worker and ``gateway check``,
and chooses its transport (``upstream.transport``), once, at start."""

from __future__ import annotations

from gateway.access import channel_credentials, client_ssl
from gateway.h2 import client as h2call
from gateway.settings import Settings, unix_path, upstream_addresses

from . import cancel, dns, shm
from .client import TritonUpstream, keepalive


def from_settings(settings: Settings, **overrides) -> TritonUpstream:
    """Address, deadlines, retries, balancing and TLS from ``settings``; ``overrides`` replace
    constructor arguments (``gateway check`` waits less and caches longer)."""
    u = settings.upstream
    creds, tls_options = channel_credentials(u.tls) if u.tls is not None else (None, ())
    shm_on = u.shared_memory.enabled
    if shm_on == "auto":
        shm_on = shm.same_host(upstream_addresses(u.grpc), u.grpc)
    args = dict(default_timeout=u.timeout_s, cache_ttl=u.cache_ttl_s, retries=u.retries,
                stream_timeout=settings.limits.stream_timeout_s, lb_policy=u.lb_policy,
                credentials=creds, extra_options=tls_options, max_answer_bytes=u.max_answer_bytes,
                shared_memory=(u.shared_memory.pool_bytes, u.shared_memory.min_bytes) if shm_on else None,
                cancel_mode=u.cancel)
    if h2_off(settings) is None:
        args["h2"] = h2_channel(settings)
    args.update(overrides)
    return TritonUpstream(u.grpc, **args)


def h2_channel(settings: Settings) -> h2call.Channel:
    """The HTTP/2 client's channel to ``upstream.grpc`` (any target grpc takes: host:port, dns: with
    or without a DNS server of its own, ipv4:/ipv6: lists, unix:), with ``upstream.tls``, the balancing policy, grpc.aio's keepalive
    and the answer size limit."""
    u = settings.upstream
    ctx, server_name = client_ssl(u.tls) if u.tls is not None else (None, None)
    server = dns.server_of(u.grpc)  # dns://server/name:port: the name asked of that server, as grpc's c-ares does
    return h2call.Channel(upstream_addresses(u.grpc), u.lb_policy, keepalive=keepalive(),
                          cancel_unary=cancel.unary_cancelled(u.cancel), unix=unix_path(u.grpc), ssl=ctx,
                          server_name=server_name, max_message=u.max_answer_bytes,
                          resolve=dns.resolver(server) if server is not None else None)


def h2_off(settings: Settings) -> str | None:
    """Why the calls to Triton do not go as HTTP/2 frames on the loop (``upstream.transport: h2``,
    gateway/h2/client.py): the setting that keeps them on grpc.aio, or hpack missing; None: they do."""
    if settings.upstream.transport != "h2":
        return "upstream.transport: grpc"
    if not h2call.ON:
        return "hpack missing"
    return None
