"""Forward local TCP ports to another host's ports, byte for byte (HTTP/1, HTTP/2, gRPC alike).

    python tools/tcp_forward.py 18001=triton:8001 18000=triton:8000

compose's opt-in `triton-ports` profile runs it (in the gateway image) to publish Triton's own
ports for native KServe clients, so that Triton itself never publishes a port by default.
Standard library only; each connection gets its own upstream connection.
"""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass


def handler(host: str, port: int):
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
        for w in (up_w, client_w):
            w.close()

    return handle


def parse(spec: str) -> tuple[int, str, int]:
    """'18001=triton:8001' -> (18001, 'triton', 8001)."""
    local, _, remote = spec.partition("=")
    host, _, port = remote.rpartition(":")
    if not local.isdigit() or not host or not port.isdigit():
        raise ValueError(f"{spec!r} is not LOCAL_PORT=HOST:PORT")
    return int(local), host, int(port)


async def serve(specs: list[str], bind: str = "0.0.0.0") -> list[asyncio.Server]:
    servers = []
    for spec in specs:
        local, host, port = parse(spec)
        servers.append(await asyncio.start_server(handler(host, port), bind, local))
        print(f"tcp_forward: {bind}:{local} -> {host}:{port}", flush=True)
    return servers


async def _main(specs: list[str]) -> None:
    servers = await serve(specs)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        asyncio.run(_main(sys.argv[1:]))
    except KeyboardInterrupt:
        pass
