"""``gateway check`` for KServe V2 (gRPC passthrough and REST): every model in Triton's repository
index is reachable under its own name and version, exactly as Triton serves it (nothing is mapped).

Warning: a model version Triton lists but does not serve (UNAVAILABLE, LOADING, ...): V2 calls to
it fail as Triton answers them.
"""

from __future__ import annotations

from gateway.core.errors import GatewayError
from gateway.ops.findings import CheckContext, ios

_DECOUPLED = ", decoupled (REST /infer answers 501, as Triton's HTTP: gRPC ModelStreamInfer)"


async def check(ctx: CheckContext) -> list:
    plane = ("control plane forwarded" if ctx.config.control_plane
             else "control plane closed (gRPC PERMISSION_DENIED, HTTP 403)")
    out: list = []
    for e in sorted(await ctx.upstream.repository_index(), key=lambda e: (e.name, e.version)):
        if e.state != "READY":
            reason = f": {e.reason}" if e.reason else ""
            out.append(ctx.row(e.name, e.name, e.version, detail=f"{e.state or 'UNKNOWN'}{reason}"))
            out.append(ctx.warning(e.name, f"version {e.version or '?'} is {e.state or 'UNKNOWN'}{reason}: "
                                           "V2 calls to it fail"))
            continue
        try:
            meta = await ctx.upstream.model_metadata(e.name, e.version)
        except GatewayError as err:
            out.append(ctx.warning(e.name, f"metadata of version {e.version}: {err.message}"))
            continue
        out.append(ctx.row(e.name, e.name, e.version, ios(meta.inputs), ios(meta.outputs),
                           f"READY, {meta.platform or 'backend'}{_DECOUPLED if meta.decoupled else ''}; {plane}"))
    return out
