"""tools/tcp_forward.py (compose's opt-in `triton-ports` profile): bytes go through both ways."""

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tcp_forward", ROOT / "tools" / "tcp_forward.py")
fw = sys.modules["tcp_forward"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fw)


def test_parse():
    assert fw.parse("18001=triton:8001") == (18001, "triton", 8001)
    for bad in ("18001", "x=triton:8001", "18001=triton", "18001=:8001"):
        with pytest.raises(ValueError):
            fw.parse(bad)


async def test_bytes_flow_both_ways_and_half_close_is_passed_on():
    async def upper_echo(r, w):
        data = await r.read()  # until the client's EOF comes through the forwarder
        w.write(data.upper() + b"|done")
        await w.drain()
        w.close()

    upstream = await asyncio.start_server(upper_echo, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    local = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    (server,) = await fw.serve([f"{local}=127.0.0.1:{up_port}"], bind="127.0.0.1")
    try:
        r, w = await asyncio.open_connection("127.0.0.1", local)
        payload = b"x" * 300_000
        w.write(payload)
        w.write_eof()
        assert await asyncio.wait_for(r.read(), 10) == payload.upper() + b"|done"
        w.close()
    finally:
        server.close()
        upstream.close()
        await server.wait_closed()
        await upstream.wait_closed()
