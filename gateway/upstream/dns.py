"""A ``dns://server[:port]/name:port`` target's names looked up at that DNS server (A and AAAA,
over UDP and over TCP when an answer is truncated), as grpc's c-ares resolver does for the grpc.aio
channel: the HTTP/2 client's resolver for such a target (gateway/h2/client.py ``Channel``'s
``resolve``). Targets without a server of their own resolve through the system (``getaddrinfo``).

The queries and answers are dnspython's (an answer that is not ours, or not well formed, is
refused there); only the A/AAAA records of the name asked are taken."""

from __future__ import annotations

import asyncio
import socket

TIMEOUT_S = 5.0
_KINDS = ("A", "AAAA")


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


def resolver(server: tuple[str, int], timeout: float = TIMEOUT_S):
    """``resolve(name, port)``: ``name``'s addresses (A, then AAAA) from ``server``; OSError when it
    does not resolve or the server does not answer within ``timeout``. dnspython is imported here,
    by a worker whose target names a DNS server, not by every process (about 0.1 s of its start)."""
    import dns.asyncresolver
    import dns.exception
    import dns.inet
    import dns.resolver

    host, dns_port = server
    named = not dns.inet.is_address(host)  # a server named by a name: its address from the system, at every lookup
    ask = dns.asyncresolver.Resolver(configure=False)  # no resolv.conf: that server alone, no search list
    ask.port, ask.lifetime = dns_port, timeout
    if not named:
        ask.nameservers = [host]

    async def one(name: str, kind: str) -> list[str]:
        try:
            answer = await ask.resolve(name, kind, search=False, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return []
        return [rdata.address for rdata in answer.rrset or ()]

    async def resolve(name: str, port: int) -> list[str]:
        if named:
            found = await asyncio.get_running_loop().getaddrinfo(host, dns_port, type=socket.SOCK_DGRAM)
            ask.nameservers = [found[0][4][0]]
        answers = await asyncio.gather(*(one(name, kind) for kind in _KINDS), return_exceptions=True)
        addresses = [a for answer in answers if isinstance(answer, list) for a in answer]
        if not addresses:
            errors = [a for a in answers if isinstance(a, BaseException)]
            if not errors:
                raise OSError(f"{name} has no address")
            if isinstance(errors[0], dns.exception.Timeout):
                raise OSError(f"no answer from the DNS server {host}:{dns_port}")
            if not isinstance(errors[0], (dns.exception.DNSException, OSError)):
                raise errors[0]
            raise OSError(str(errors[0]))
        return addresses

    return resolve
