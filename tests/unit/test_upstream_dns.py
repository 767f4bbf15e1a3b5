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
from tests.fakes import FakeDNS
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
    server = FakeDNS("triton-headless.test", ["127.0.0.1", "127.0.0.2"])
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


class _Scripted(asyncio.DatagramProtocol):
    """A DNS server on loopback UDP that answers every query with ``answer(qid, question)``'s bytes."""

    def __init__(self, answer):
        self.answer = answer

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        end = data.index(b"\x00", 12) + 5  # the question: the name's labels, its type and class
        self.transport.sendto(self.answer(struct.unpack(">H", data[:2])[0], data[12:end]), addr)


async def _resolved_by(answer, timeout: float = 0.3) -> list[str]:
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: _Scripted(answer), local_addr=("127.0.0.1", 0))
    try:
        return await dns.resolver(transport.get_extra_info("sockname"), timeout=timeout)("t.test", 8001)
    finally:
        transport.close()


def _answer(records: bytes, count: int, flags: int = 0x8180, qid_off: int = 0):
    """The answer with ``records`` to an A question (an AAAA one: none)."""

    def answer(qid: int, question: bytes) -> bytes:
        n, rr = (count, records) if question[-4:-2] == b"\x00\x01" else (0, b"")
        return struct.pack(">HHHHHH", qid ^ qid_off, flags, 1, n, 0, 0) + question + rr

    return answer


async def test_a_hostile_answer_is_refused():
    a = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + bytes([10, 0, 0, 1])
    assert await _resolved_by(_answer(a, 1)) == ["10.0.0.1"]
    with pytest.raises(OSError, match="has no address"):
        await _resolved_by(_answer(b"", 0, flags=0x8183))  # NXDOMAIN
    bad = [
        _answer(a, 1, qid_off=1),  # not our id
        _answer(a[:-2], 1),  # the record cut short
        _answer(struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 400) + b"\x00" * 4, 1),  # a length past the end
        _answer(a, 3),  # more records announced than sent
        _answer(b"", 0, flags=0x8182),  # SERVFAIL
        lambda qid, question: struct.pack(">H", qid),
        _answer(struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 3) + b"\x01\x02\x03", 1),  # an A record of the wrong size
    ]
    for answer in bad:
        with pytest.raises(OSError):
            await _resolved_by(answer)


async def test_a_truncated_answer_is_asked_again_over_tcp():
    """A headless Service with more replicas than a UDP answer holds: the server sets TC and the
    name is asked again over TCP (as c-ares does), every address taken."""
    addresses = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(40)]
    records = b"".join(struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + bytes(int(b) for b in a.split("."))
                       for a in addresses)

    async def over_tcp(reader, writer):
        size = struct.unpack(">H", await reader.readexactly(2))[0]
        query = await reader.readexactly(size)
        end = query.index(b"\x00", 12) + 5
        out = _answer(records, len(addresses))(struct.unpack(">H", query[:2])[0], query[12:end])
        writer.write(struct.pack(">H", len(out)) + out)
        await writer.drain()
        writer.close()

    loop = asyncio.get_running_loop()
    udp, _ = await loop.create_datagram_endpoint(lambda: _Scripted(_answer(b"", 0, flags=0x8380)),
                                                 local_addr=("127.0.0.1", 0))
    port = udp.get_extra_info("sockname")[1]
    tcp = await asyncio.start_server(over_tcp, "127.0.0.1", port)
    try:
        assert sorted(await dns.resolver(("127.0.0.1", port), timeout=2.0)("t.test", 8001)) == sorted(addresses)
    finally:
        udp.close()
        tcp.close()
