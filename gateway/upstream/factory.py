"""The upstream client the settings describe: one place builds it for the worker and ``gateway check``."""

from __future__ import annotations

from gateway.access import channel_credentials
from gateway.settings import Settings, upstream_addresses

from . import shm
from .client import TritonUpstream


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
                stream_mux=(u.stream_mux.streams, u.stream_mux.max_bytes) if u.stream_mux.enabled else None)
    args.update(overrides)
    return TritonUpstream(u.grpc, **args)
