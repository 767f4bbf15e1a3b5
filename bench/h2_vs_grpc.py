"""The same small ModelInfer to a real Triton by grpc.aio (``direct.unary``, the gateway's call) or
by an HTTP/2 client on the event loop itself: client CPU per request.

Modes: ``unary`` (gateway/upstream/direct.py on one grpc.aio channel), ``h2lib`` (the ``h2``
library driving an ``asyncio.Protocol``: h2's state machine, its HPACK encoder and decoder, every
call), ``h2raw`` (gateway/h2/client.py, keepalive as the gateway has it: the request's header block encoded once, frames
written with struct, only the answer's header blocks decoded, with ``hpack``). The client is a child
process on uvloop, as a gateway worker is; bench/cases.py's small V2 request (four FP32 values to
saved_model_half_plus_three) with an id of its own each. Per mode and concurrency: the client's
CPU time per request (its ``process_time``: utime+stime of every thread) and Triton's, modes
alternated in rounds, medians and ranges printed.

    .venv/bin/python -m bench.h2_vs_grpc                 CPU time
    .venv/bin/python -m bench.h2_vs_grpc --callgrind     the client's instructions per request
    env: N=3000 CONC=1,8,64 MODES=unary,h2lib,h2raw ROUNDS=3 (as bench/stream_vs_unary.py)
"""

from __future__ import annotations

import asyncio
import sys

from bench import cases, stream_vs_unary

PATH = cases.MODEL_INFER


async def _h2lib(host: str, port: int):
    """``one(data)`` on the h2 library: a minimal gRPC unary client, no deadline or error mapping."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    loop = asyncio.get_running_loop()
    waiting: dict[int, list] = {}

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            conn.initiate_connection()
            conn.increment_flow_control_window(1 << 24)
            transport.write(conn.data_to_send())

        def data_received(self, data):
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    waiting[ev.stream_id][1].append(ev.data)
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    fut, chunks = waiting.pop(ev.stream_id)
                    fut.set_result(b"".join(chunks)[5:])
                elif isinstance(ev, h2.events.StreamReset):
                    fut, _ = waiting.pop(ev.stream_id)
                    fut.set_exception(RuntimeError("reset"))
            out = conn.data_to_send()
            if out:
                self.transport.write(out)

    transport, proto = await loop.create_connection(Proto, host, port)
    head = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH.encode()),
            (b":authority", f"{host}:{port}".encode()), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"grpc-timeout", b"60S")]

    async def one(data: bytes) -> bytes:
        sid = conn.get_next_available_stream_id()
        fut = loop.create_future()
        waiting[sid] = [fut, []]
        conn.send_headers(sid, head)
        conn.send_data(sid, b"\x00" + len(data).to_bytes(4, "big") + data, end_stream=True)
        transport.write(conn.data_to_send())
        return await fut

    return one


async def _h2raw(host: str, port: int):
    from gateway.h2 import client as h2call
    from gateway.upstream.client import keepalive

    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: h2call.Connection(keepalive()), host, port)
    block = h2call.request_block(PATH, f"{host}:{port}")

    async def one(data: bytes) -> bytes:
        return await conn.call(block, data, 60.0)

    return one


async def _client(target: str, mode: str, conc: int) -> None:
    host, _, port = target.rpartition(":")
    if mode == "unary":
        import grpc

        from bench import grpcload
        from gateway.upstream import direct

        channel = grpc.aio.insecure_channel(target, options=grpcload.CHANNEL_OPTIONS)
        call = direct.unary(channel, PATH)

        async def one(data: bytes) -> bytes:
            return await call(data, timeout=60)
    elif mode == "h2lib":
        one = await _h2lib(host, int(port))
    else:
        one = await _h2raw(host, int(port))

    await stream_vs_unary.serve(one, conc)


def client_main(argv: list[str]) -> int:
    import uvloop

    uvloop.install()
    asyncio.run(_client(argv[0], argv[1], int(argv[2])))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    return stream_vs_unary.main(argv, "bench.h2_vs_grpc", "unary,h2lib,h2raw")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
