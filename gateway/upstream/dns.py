"""A ``dns://server[:port]/name:port`` target's names looked up at that DNS server (A and AAAA over
UDP), as grpc's c-ares resolver does for the grpc.aio channel: the HTTP/2 client's resolver for
such a target (gateway/h2/client.py ``Channel``'s ``resolve``). Targets without a server of their
own resolve through the system (``getaddrinfo``).

The answer is read as hostile input: its id and question must be ours, every length is checked
against the datagram, compression pointers only point backwards, and only A/AAAA records of the
right size are taken."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import struct

TIMEOUT_S = 5.0
_HEADER = struct.Struct(">HHHHHH")
_RECORD = struct.Struct(">HHIH")
_A, _AAAA = 1, 28


def server_of(target: str) -> tuple[str, int] | None:
    """The DNS server (host, port) a ``dns://server[:port]/name:port`` target names, else None."""
    if not target.startswith("dns://"):
        return None
    authority = target[6:].partition("/")[0]
    if not authority:
        return None
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = authority.partition(":")
    return host, int(port) if port.isdigit() else 53


def _query(qid: int, name: str, qtype: int) -> bytes:
    labels = b"".join(bytes([len(p)]) + p for p in (part.encode("idna") for part in name.rstrip(".").split(".")))
    return _HEADER.pack(qid, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack(">HH", qtype, 1)


def _skip_name(data: bytes, pos: int) -> int:
    """The offset past a (possibly compressed) name at ``pos``."""
    for _ in range(128):
        n = data[pos]
        if n >= 0xC0:
            return pos + 2
        if n > 63:
            raise ValueError("bad label")
        pos += 1 + n
        if not n:
            return pos
    raise ValueError("name too long")


def parse(data: bytes, qid: int) -> list[str]:
    """The addresses in an answer to query ``qid`` (ValueError: not a good answer; [] for NXDOMAIN)."""
    if len(data) < 12:
        raise ValueError("short answer")
    rid, flags, qd, an, _, _ = _HEADER.unpack_from(data)
    if rid != qid or not flags & 0x8000:
        raise ValueError("not our answer")
    if flags & 0x000F == 3:  # NXDOMAIN
        return []
    if flags & 0x000F:
        raise ValueError(f"DNS error {flags & 0x000F}")
    pos = 12
    for _ in range(qd):
        pos = _skip_name(data, pos) + 4
    found = []
    for _ in range(an):
        pos = _skip_name(data, pos)
        if pos + _RECORD.size > len(data):
            raise ValueError("short record")
        kind, _cls, _ttl, size = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        rdata = data[pos:pos + size]
        if len(rdata) != size:
            raise ValueError("short record")
        pos += size
        if (kind, size) in ((_A, 4), (_AAAA, 16)):
            found.append(str(ipaddress.ip_address(rdata)))
    return found


class _Client(asyncio.DatagramProtocol):
    def __init__(self, waiting: dict[int, asyncio.Future]):
        self.waiting = waiting

    def datagram_received(self, data: bytes, addr) -> None:
        qid = data[0] << 8 | data[1] if len(data) >= 2 else -1
        fut = self.waiting.get(qid)
        if fut is not None and not fut.done():
            try:
                fut.set_result(parse(data, qid))
            except (ValueError, IndexError, struct.error) as exc:
                fut.set_exception(OSError(f"bad DNS answer: {exc}"))

    def error_received(self, exc) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(exc)


def resolver(server: tuple[str, int], timeout: float = TIMEOUT_S):
    """``resolve(name, port)``: ``name``'s addresses (A, then AAAA) from ``server``; OSError when it
    does not resolve or the server does not answer within ``timeout``."""

    async def resolve(name: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        ids = struct.unpack(">HH", os.urandom(4))
        waiting = {qid: loop.create_future() for qid in ids}
        transport, _ = await loop.create_datagram_endpoint(lambda: _Client(waiting), remote_addr=server)
        try:
            for qid, qtype in zip(ids, (_A, _AAAA), strict=True):
                transport.sendto(_query(qid, name, qtype))
            await asyncio.wait(waiting.values(), timeout=timeout)
        finally:
            transport.close()
        answers = [f.result() if not f.exception() else f.exception() for f in waiting.values() if f.done()]
        for f in waiting.values():
            f.cancel()
        addresses = [a for answer in answers if isinstance(answer, list) for a in answer]
        if not addresses:
            errors = [a for a in answers if isinstance(a, BaseException)]
            raise OSError(str(errors[0]) if errors else f"{name} has no address" if answers
                          else f"no answer from the DNS server {server[0]}:{server[1]}")
        return addresses

    return resolve
