"""The upstream client the settings describe: one place builds it for the worker and ``gateway check``."""

from __future__ import annotations

from gateway.access import channel_credentials
from gateway.h2 import client as h2call
from gateway.settings import Settings, upstream_addresses

from . import cancel, shm
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
                credentials=creds, extra_options=tls_options,
                shared_memory=(u.shared_memory.pool_bytes, u.shared_memory.min_bytes) if shm_on else None,
                cancel_mode=u.cancel)
    if h2_off(settings) is None:
        args["h2"] = h2call.Channel(upstream_addresses(u.grpc), u.lb_policy, keepalive=keepalive(),
                                    cancel_unary=cancel.unary_cancelled(u.cancel))
    args.update(overrides)
    return TritonUpstream(u.grpc, **args)


def h2_off(settings: Settings) -> str | None:
    """Why ModelInfer calls do not go as HTTP/2 frames on the loop (``upstream.transport: h2``,
    gateway/h2/client.py): the setting that keeps them on grpc.aio; None: they do."""
    u = settings.upstream
    if u.transport != "h2":
        return "upstream.transport: grpc"
    if not h2call.ON:
        return "hpack missing"
    if u.tls is not None:
        return "upstream.tls"
    if not upstream_addresses(u.grpc):
        return "a unix: target"
    if u.grpc.startswith("dns:") and u.lb_policy == "round_robin":
        return "round_robin over a dns: name"
    return None
