"""What grpc.aio itself charges for the per-call features a V2 gRPC passthrough keeps.

`make bench`'s floor for the V2 unary passthrough (bench/floor.py) forwards the bytes and nothing
else. The gateway keeps, on every call, what its users and operators need (gateway/edge/__init__.py,
gateway/dialects/v2/passthrough.py): the caller's deadline (or the listener's) on Triton's call, the
caller's metadata forwarded, a request id in the trailing metadata, the invocation metadata and the
time remaining read; and its gRPC server and channel options (keepalive, concurrent streams per
connection, reconnect backoff, the load-balancing service config). This runs the same forwarding handler with each of those features turned on
alone, all together, and the gateway's own V2 listener, each in its own process on its own port in
front of one Triton, and measures CPU per ModelInfer of each (utime+stime from /proc over the run ÷
calls) under the same closed-loop load, the variants interleaved round by round.

    .venv/bin/python -m bench.grpc_features          (env: ROUNDS=6, DUR=3 s, CONC=8 callers,
                                                      INSTANCES=1, VARIANTS: see DEFAULT_VARIANTS)

A variant is ``plain`` or features joined by ``+`` (TIMEOUT, MD, TRAIL, CTX, SOPTS, COPTS), or ``gateway``.
The passthrough server alone: ``python -m bench.grpc_features serve TRITON PORT FEATURES``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

FEATURES = ("TIMEOUT", "MD", "TRAIL", "CTX", "SOPTS", "COPTS")
# TIMEOUT+TRAIL+CTX is what the gateway does for this load's calls, which carry no metadata of their own
DEFAULT_VARIANTS = ("plain", "TIMEOUT", "MD", "TRAIL", "CTX", "SOPTS", "COPTS", "TIMEOUT+TRAIL+CTX",
                    "TIMEOUT+TRAIL+CTX+SOPTS+COPTS", "TIMEOUT+MD+TRAIL+CTX", "gateway")
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


@dataclass(frozen=True)
class Features:
    timeout: bool = False  # a deadline on Triton's call (the gateway: the caller's or the listener's)
    metadata: bool = False  # one metadata entry on Triton's call (the gateway: the caller's, forwarded)
    trailing: bool = False  # a request id in the trailing metadata
    context: bool = False  # the invocation metadata and the time remaining read
    server_options: bool = False  # the gateway's gRPC server options (keepalive pings, streams per connection)
    channel_options: bool = False  # its channel options to Triton (keepalive, reconnect backoff, service config)

    @classmethod
    def parse(cls, variant: str) -> Features:
        names = set() if variant in ("", "plain") else set(variant.split("+"))
        unknown = names - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}: choose from {', '.join(FEATURES)}")
        return cls(*(name in names for name in FEATURES))


def options(features: Features) -> tuple[list, list]:
    """(server options, channel options): the bare ones, or a gateway worker's (SOPTS: gateway/app.py's
    ``grpc_server_options`` with the default settings; COPTS: gateway/upstream/client.py's
    ``channel_options``)."""
    server, channel = OPTIONS, OPTIONS
    if features.server_options:
        from gateway.app import grpc_server_options
        from gateway.settings import Settings

        server = grpc_server_options(Settings(), reuse_port=False)
    if features.channel_options:
        from gateway.upstream.client import channel_options

        channel = list(channel_options())
    return server, channel


def handler(forward, features: Features):
    """The forwarding behaviour: ``forward(request, **kwargs)`` is Triton's ModelInfer."""
    count = 0

    async def model_infer(request: bytes, context) -> bytes:
        nonlocal count
        count += 1
        request_id = str(count)
        if features.context:
            context.invocation_metadata()
            context.time_remaining()
        kwargs = {}
        if features.timeout:
            kwargs["timeout"] = 30.0
        if features.metadata:
            kwargs["metadata"] = (("x-request-id", request_id),)
        answer = await forward(request, **kwargs)
        if features.trailing:
            context.set_trailing_metadata((("x-request-id", request_id),))
        return answer

    return model_infer


async def serve(triton: str, port: int, features: Features) -> None:
    server_options, channel_options = options(features)
    channel = grpc.aio.insecure_channel(triton, options=channel_options)
    server = grpc.aio.server(options=server_options)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(handler(channel.unary_unary(MODEL_INFER), features))})])
    if not server.add_insecure_port(f"127.0.0.1:{port}"):
        raise SystemExit(f"cannot listen on 127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def measure() -> int:
    from bench import cases, grpcload, procstat, stats
    from bench.stack import Stack, floor_env
    from tests.support import free_port, gateway_config, start_gateway, stop_gateway

    rounds, dur = int(os.environ.get("ROUNDS", 6)), float(os.environ.get("DUR", 3))
    conc = int(os.environ.get("CONC", 8))
    variants = [v.strip() for v in os.environ.get("VARIANTS", ",".join(DEFAULT_VARIANTS)).split(",") if v.strip()]
    for v in variants:
        if v != "gateway":
            Features.parse(v)  # refuse a misspelt feature before anything starts
    request = cases._v2_request(cases.SMALL)
    with Stack() as stack:
        tp = stack.start_triton(int(os.environ["INSTANCES"]) if os.environ.get("INSTANCES") else None)
        procs: dict[str, tuple[subprocess.Popen, int]] = {}
        gateway = None
        try:
            for v in variants:
                port = free_port()
                if v == "gateway":
                    ports = {"v2_grpc": port, "admin_http": free_port()}
                    gateway = start_gateway(gateway_config(tp.grpc_target, ports, {"log_level": "WARNING"}),
                                            Path(tempfile.mkdtemp(dir=stack.tmp)))
                    procs[v] = (gateway.proc, port)
                else:  # gRPC's runtime choices as a gateway worker makes them (as the floor's)
                    procs[v] = (subprocess.Popen([sys.executable, "-m", "bench.grpc_features", "serve",
                                                  tp.grpc_target, str(port), v], env=floor_env()), port)
            for _, port in procs.values():  # ready, answering, warm
                target = f"127.0.0.1:{port}"
                for _ in range(100):
                    try:
                        asyncio.run(grpcload.call_once(target, MODEL_INFER, request, timeout=1))
                        break
                    except grpc.aio.AioRpcError:
                        time.sleep(0.1)
                asyncio.run(grpcload.unary(target, MODEL_INFER, request, conc, 1))
            cpu: dict[str, list[float]] = {v: [] for v in variants}
            for rnd in range(rounds):
                for v, (proc, port) in procs.items():
                    t0 = procstat.ticks([proc.pid])
                    r = asyncio.run(grpcload.unary(f"127.0.0.1:{port}", MODEL_INFER, request, conc, dur))
                    us = procstat.us_per_request(t0, procstat.ticks([proc.pid]), r.requests)
                    cpu[v].append(us)
                    print(f"round {rnd + 1} {v:24s} {r.requests_per_s:7.0f} calls/s {us:6.0f} µs/call"
                          f"{f'  errors {r.errors}: {r.first_error}' if r.errors else ''}", flush=True)
        finally:
            for v, (proc, _) in procs.items():
                if v != "gateway":
                    proc.kill()
                    proc.wait()
            if gateway is not None:
                stop_gateway(gateway)
    base = stats.spread(cpu[variants[0]]).median
    print(f"\nCPU per ModelInfer, median of {rounds} × {dur:g} s at {conc} callers (÷ {variants[0]}):")
    for v in variants:
        m = stats.spread(cpu[v]).median
        print(f"  {v:24s} {m:6.0f} µs  ({m / base:.2f}×)  all: {' '.join(f'{x:.0f}' for x in sorted(cpu[v]))}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        import uvloop

        uvloop.run(serve(sys.argv[2], int(sys.argv[3]), Features.parse(sys.argv[4])))
    else:
        raise SystemExit(measure())
