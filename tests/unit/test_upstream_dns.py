"""gateway/upstream/dns.py: a ``dns://server/name:port`` target's name asked of that server (as
grpc's c-ares resolver does), for the HTTP/2 client: every address of the name, round_robin over
them; a name the server does not know is UNAVAILABLE (Triton is unreachable); a hostile answer is
refused, never read past its end."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gateway.h2 import client as h2call
from gateway.upstream import dns
from tests.contract.test_triton_replicas import _DNS
from tests.support import free_port
from tests.unit.test_h2call import FakeServer
from tests.unit.test_h2call_targets import _outcome, _unreachable


@pytest.mark.parametrize(("target", "server"), [
    ("dns://10.0.0.10/triton:8001", ("10.0.0.10", 53)), ("dns://127.0.0.1:5353/triton:8001", ("127.0.0.1", 5353)),
    ("dns://[::1]:5353/triton:8001", ("::1", 5353)), ("dns:///triton:8001", None), ("triton:8001", None)])
def test_the_dns_server_of_a_target(target, server):
    assert dns.server_of(target) == server


async def test_a_name_resolved_by_the_targets_own_dns_server_and_round_robin_over_it():
    port = free_port()
    served = {}
    servers = []
    for host in ("127.0.0.1", "127.0.0.2"):
        def script(srv, sid, host=host):
            served[host] = served.get(host, 0) + 1
            srv.answer(sid, host.encode())

        servers.append(await asyncio.get_running_loop().create_server(lambda s=script: FakeServer(s), host, port))
    server = _DNS("triton-headless.test", ["127.0.0.1", "127.0.0.2"])
    resolve = dns.resolver(("127.0.0.1", server.port), timeout=2.0)
    try:
        assert sorted(await resolve("triton-headless.test", port)) == ["127.0.0.1", "127.0.0.2"]
        with pytest.raises(OSError, match="has no address"):
            await resolve("other.test", port)
        rr = h2call.Channel([("triton-headless.test", port)], "round_robin", resolve=resolve)
        first = h2call.Channel([("triton-headless.test", port)], "pick_first", resolve=resolve)
        unknown = h2call.Channel([("nowhere.test", port)], "pick_first", resolve=resolve)
        try:
            assert sorted([await rr.call(b"", 5) for _ in range(4)]) == [b"127.0.0.1"] * 2 + [b"127.0.0.2"] * 2
            assert {await first.call(b"", 5) for _ in range(3)} == {b"127.0.0.1"}
            assert _unreachable(await _outcome(unknown.call(b"", 5))).startswith("DNS resolution failed for nowhere.test")
        finally:
            for c in (rr, first, unknown):
                await c.close()
        assert ("triton-headless.test", 1) in server.queries
    finally:
        server.close()
        for s in servers:
            s.close()
    silent = dns.resolver(("127.0.0.1", free_port()), timeout=0.3)  # no server there
    with pytest.raises(OSError):
        await silent("triton.test", port)


def _answer(qid: int, records: bytes, count: int, flags: int = 0x8180) -> bytes:
    question = dns._query(qid, "t.test", 1)[12:]
    return struct.pack(">HHHHHH", qid, flags, 1, count, 0, 0) + question + records


def test_a_hostile_answer_is_refused():
    a = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + bytes([10, 0, 0, 1])
    assert dns.parse(_answer(7, a, 1), 7) == ["10.0.0.1"]
    assert dns.parse(_answer(7, b"", 0, flags=0x8183), 7) == []  # NXDOMAIN
    bad = [
        _answer(8, a, 1),  # not our id
        _answer(7, a[:-2], 1),  # the record cut short
        _answer(7, struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 400) + b"\x00" * 4, 1),  # a length past the end
        _answer(7, a, 3),  # more records announced than sent
        _answer(7, b"", 0, flags=0x8182),  # SERVFAIL
        b"\x00\x07",
    ]
    for data in bad:
        with pytest.raises((ValueError, IndexError, struct.error)):
            dns.parse(data, 7)
    odd = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 3) + b"\x01\x02\x03"  # an A record of the wrong size: not taken
    assert dns.parse(_answer(7, odd, 1), 7) == []
