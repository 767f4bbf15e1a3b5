"""The HTTP/2 client (gateway/h2/client.py) connects every way the grpc.aio channel did: TLS with
ALPN "h2" (the CA, a client certificate for mTLS, the server-name override: ``upstream.tls`` as
``gateway.access.client_ssl`` reads it), a ``unix:`` socket, and ``round_robin`` over every address
a name resolves to, resolved again when a connection is opened anew. Whatever fails while
connecting (the handshake, ALPN, a socket that is not there, a name that does not resolve) fails
the call UNAVAILABLE, which reads "Triton is unreachable". And an answer message larger than
``max_message`` is refused (RESOURCE_EXHAUSTED in grpc's words), its stream reset."""

from __future__ import annotations

import asyncio
import socket
import ssl

import grpc
import h2.events
import pytest
import trustme

from gateway import config
from gateway.access import client_ssl
from gateway.core.errors import UNREACHABLE, ErrorKind, from_grpc_code
from gateway.h2 import client as h2call
from gateway.settings import UpstreamTls
from gateway.upstream import factory
from tests.support import free_port
from tests.unit.test_h2call import FakeServer, _msg, _outcome, _read_all, _until


def _echo(srv: FakeServer, sid: int) -> None:
    srv.answer(sid, b"ok")


def _unreachable(outcome) -> str:
    """The details of an UNAVAILABLE that a client reads as Triton is unreachable."""
    code, details = outcome
    err = from_grpc_code(code, details)
    assert (code, err.kind, err.message) == (grpc.StatusCode.UNAVAILABLE, ErrorKind.UNAVAILABLE, UNREACHABLE), details
    return details


async def _served(script, kind=FakeServer, host: str = "127.0.0.1", port: int | None = None):
    """(server, the FakeServers it made, port): ``kind`` answering with ``script`` on ``host``."""
    servers: list[FakeServer] = []

    def make():
        servers.append(kind(script))
        return servers[-1]

    port = port or free_port()
    server = await asyncio.get_running_loop().create_server(make, host, port)
    return server, servers, port


# -- TLS -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    files = {"ca": tmp / "ca.pem", "other-ca": tmp / "other.pem", "client": tmp / "client.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    other.cert_pem.write_to_path(str(files["other-ca"]))
    client = ca.issue_cert("gateway.example")
    client.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    return ca, files


def _server_ctx(ca: trustme.CA, names=("127.0.0.1", "localhost"), alpn=("h2",), mutual: bool = False):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)
    ctx.set_alpn_protocols(list(alpn))
    if mutual:
        ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


async def _tls_server(ctx: ssl.SSLContext):
    servers: list[FakeServer] = []

    def make():
        servers.append(FakeServer(_echo))
        return servers[-1]

    port = free_port()
    server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", port, ssl=ctx)
    return server, servers, port


async def test_tls_with_the_ca_a_client_certificate_and_the_server_name(pki):
    ca, f = pki
    for server_ctx, tls in (
        (_server_ctx(ca), UpstreamTls(ca_file=str(f["ca"]))),
        (_server_ctx(ca, mutual=True), UpstreamTls(ca_file=str(f["ca"]), cert_file=str(f["client"]),
                                                    key_file=str(f["client"]))),
        (_server_ctx(ca, names=("triton.example",)), UpstreamTls(ca_file=str(f["ca"]), server_name="triton.example")),
    ):
        server, servers, port = await _tls_server(server_ctx)
        ctx, name = client_ssl(tls)
        chan = h2call.Channel([("127.0.0.1", port)], ssl=ctx, server_name=name)
        try:
            assert [await chan.call(b"x", 5) for _ in range(3)] == [b"ok"] * 3
            assert len(servers) == 1  # one connection, kept
            tls_object = chan._conns[0].transport.get_extra_info("ssl_object")
            assert tls_object.selected_alpn_protocol() == "h2"
            headers = next(e for e in servers[0].events if isinstance(e, h2.events.RequestReceived)).headers
            assert (b":authority", (name or f"127.0.0.1:{port}").encode()) in headers
        finally:
            await chan.close()
            server.close()


@pytest.mark.parametrize("case", ["wrong_ca", "no_client_cert", "wrong_name", "alpn_http1", "no_alpn", "plaintext"])
async def test_a_tls_connection_that_fails_is_unreachable_every_time(pki, case):
    ca, f = pki
    server_ctx = _server_ctx(ca, mutual=case == "no_client_cert", names=("triton.example",) if case == "wrong_name"
                             else ("127.0.0.1",), alpn=("http/1.1",) if case == "alpn_http1" else
                             () if case == "no_alpn" else ("h2",))
    server, servers, port = await _tls_server(server_ctx)
    tls = UpstreamTls(ca_file=str(f["other-ca" if case == "wrong_ca" else "ca"]))
    ctx, name = client_ssl(tls) if case != "plaintext" else (None, None)
    chan = h2call.Channel([("127.0.0.1", port)], ssl=ctx, server_name=name)
    chan.CONNECT_S = 2.0
    try:
        for _ in range(3):  # the same every time, the address backed off or not
            details = _unreachable(await _outcome(chan.call(b"x", 5)))
            assert details.startswith(f"failed to connect to all addresses; last error: 127.0.0.1:{port}: ")
            assert chan._conns[0] is None
        if case.endswith("alpn") or case == "alpn_http1":
            assert details.endswith("Cannot check peer: missing selected ALPN property.")
        elif case in ("wrong_ca", "wrong_name"):
            assert "CERTIFICATE_VERIFY_FAILED" in details
        call = chan.stream_call(bytes, 5)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.write(b"x")
        _unreachable((info.value.code(), info.value.details()))
    finally:
        await chan.close()
        server.close()


# -- unix: -------------------------------------------------------------------------------------------
async def test_a_unix_socket(tmp_path):
    path = str(tmp_path / "triton.sock")
    servers: list[FakeServer] = []

    def make():
        servers.append(FakeServer(_echo))
        return servers[-1]

    chan = h2call.Channel([], unix=path)
    try:
        details = _unreachable(await _outcome(chan.call(b"x", 5)))  # not there yet
        assert details.startswith(f"failed to connect to all addresses; last error: unix:{path}: ")
        server = await asyncio.get_running_loop().create_unix_server(make, path)
        chan._down[0] = 0.0  # (its backoff over)
        assert await chan.call(b"x", 5) == b"ok"
        call = chan.stream_call(bytes, 5)
        await call.write(b"s")
        headers = next(e for e in servers[0].events if isinstance(e, h2.events.RequestReceived)).headers
        assert (b":authority", b"localhost") in headers  # as grpc's unix: channel has it
        server.close()
    finally:
        await chan.close()


# -- dns: round_robin ---------------------------------------------------------------------------------
async def test_round_robin_over_every_address_a_name_resolves_to(monkeypatch):
    """``dns:///triton.test:port`` standing for two replicas (127.0.0.1 and 127.0.0.2): calls spread
    over both; a replica that goes (its connection closed, the name no longer giving it) is
    resolved away when the connection is opened anew; one that comes back is picked up again."""
    port = free_port()
    hits: dict[str, int] = {}
    servers = {}

    async def serve(host: str):
        def script(srv: FakeServer, sid: int):
            hits[host] = hits.get(host, 0) + 1
            srv.answer(sid, host.encode())

        made: list[FakeServer] = []

        def make():
            made.append(FakeServer(script))
            return made[-1]

        servers[host] = (await asyncio.get_running_loop().create_server(make, host, port), made)

    await serve("127.0.0.1")
    await serve("127.0.0.2")
    answers = {"triton.test": ["127.0.0.1", "127.0.0.2"]}
    lookups = []
    loop = asyncio.get_running_loop()

    async def getaddrinfo(host, p, **kw):
        lookups.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, p)) for a in answers[host]]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(h2call.Channel, "RESOLVE_S", 0.0)
    chan = h2call.Channel([("triton.test", port)], "round_robin")
    try:
        assert sorted([await chan.call(b"", 5) for _ in range(4)]) == [b"127.0.0.1"] * 2 + [b"127.0.0.2"] * 2
        assert lookups == ["triton.test"]  # resolved once, both connections open
        headers = next(e for e in servers["127.0.0.2"][1][0].events if isinstance(e, h2.events.RequestReceived)).headers
        assert (b":authority", f"triton.test:{port}".encode()) in headers  # the name's, as grpc's
        answers["triton.test"] = ["127.0.0.1"]  # the second replica goes
        servers["127.0.0.2"][1][0].transport.close()
        await _until(lambda: any(c is not None and c.lost for c in chan._conns), "the connection lost")
        assert {await chan.call(b"", 5) for _ in range(4)} == {b"127.0.0.1"}
        assert len(chan._slots) == 1 and lookups == ["triton.test"] * 2
        answers["triton.test"] = ["127.0.0.2", "127.0.0.1"]  # back: picked up at the next resolution
        chan._conns[0].close()
        assert sorted([await chan.call(b"", 5) for _ in range(4)]) == [b"127.0.0.1"] * 2 + [b"127.0.0.2"] * 2
        del answers["triton.test"]  # a name that stops resolving: the addresses known are kept
        for c in chan._conns:
            c.close()
        assert len({await chan.call(b"", 5) for _ in range(4)}) == 2
    finally:
        await chan.close()
        for server, _ in servers.values():
            server.close()
    chan = h2call.Channel([("triton.test", port)], "round_robin")  # never resolved: unreachable
    try:
        details = _unreachable(await _outcome(chan.call(b"", 5)))
        assert details.startswith(f"DNS resolution failed for triton.test:{port}")
    finally:
        await chan.close()


@pytest.mark.parametrize(("target", "tls", "lb"), [
    ("unix:///run/triton.sock", None, "pick_first"), ("unix:triton.sock", "{}", "pick_first"),
    ("dns:///triton:8001", None, "round_robin"), ("triton:8001", "{server_name: t.example}", "pick_first"),
    ("ipv4:127.0.0.1:1,127.0.0.1:2", None, "round_robin")])
def test_every_target_and_tls_rides_the_h2_client(target, tls, lb):
    env = {"GATEWAY__UPSTREAM__GRPC": target, "GATEWAY__UPSTREAM__LB_POLICY": lb}
    if tls:
        env["GATEWAY__UPSTREAM__TLS"] = tls
    settings = config.load(None, env=env)
    assert factory.h2_off(settings) is None
    chan = factory.from_settings(settings)._h2
    assert (chan.ssl is not None) == bool(tls) and chan.round_robin == (lb == "round_robin")
    if target.startswith("unix:"):
        assert chan.addresses == [("/run/triton.sock" if "///" in target else "triton.sock", 0)]
        assert chan._slots[0].unix
    if tls and "server_name" in tls:
        assert chan._authorities == ["t.example"] and chan._server_names == ["t.example"]
    grpc_settings = config.load(None, env={**env, "GATEWAY__UPSTREAM__TRANSPORT": "grpc"})
    assert factory.h2_off(grpc_settings) == "upstream.transport: grpc"
    assert factory.from_settings(grpc_settings)._h2 is None


# -- the answer's size --------------------------------------------------------------------------------
async def test_an_answer_larger_than_the_maximum_is_refused_and_its_stream_reset():
    big = b"y" * 2000
    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        n = len(seen)
        if n == 1:
            srv.answer(sid, big)
        elif n == 2:  # 4 GB announced, a few bytes sent: refused at once, nothing more waited for
            srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            srv.conn.send_data(sid, b"\x00\xff\xff\xff\xf0" + b"z" * 10)
        elif n == 3:  # a small message, then more bytes than the maximum: not one message
            srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            srv.conn.send_data(sid, _msg(b"ab") + b"q" * 2000)
        else:
            srv.answer(sid, b"x" * 1000)

    server, servers, port = await _served(script)
    chan = h2call.Channel([("127.0.0.1", port)], max_message=1000)
    try:
        assert await _outcome(chan.call(b"", 5)) == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                    "Received message larger than max (2000 vs. 1000)")
        assert await _outcome(chan.call(b"", 5)) == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                    f"Received message larger than max ({2**32 - 16} vs. 1000)")
        assert await _outcome(chan.call(b"", 5)) == (grpc.StatusCode.INTERNAL, "Failed to parse server response")
        assert await chan.call(b"", 5) == b"x" * 1000  # the largest taken, on the same connection
        # the two answers left open reset (the first had ended: the h2 library notes no reset of it)
        await _until(lambda: sum(isinstance(e, h2.events.StreamReset) for e in servers[0].events) == 2,
                     "the open streams reset")
        assert len(servers) == 1 and not chan._conns[0].streams
    finally:
        await chan.close()
        server.close()


async def test_a_stream_message_larger_than_the_maximum_is_refused_and_a_large_one_read():
    """A stream's message over the maximum: RESOURCE_EXHAUSTED, the stream reset. One larger than
    the stream's window (8 MiB) but within the maximum is read whole: its window is given back as
    its bytes come."""
    large = bytes(range(256)) * (40 << 10)  # 10 MiB
    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        if len(seen) == 1:
            srv.conn.send_data(sid, _msg(b"small") + _msg(b"w" * 5000))
        else:
            srv.pending = (sid, _msg(large))
            srv.feed()

    def feed(self):
        sid, rest = self.pending
        while rest:
            n = min(len(rest), self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if n <= 0:
                break
            self.conn.send_data(sid, rest[:n])
            rest = rest[n:]
        self.pending = (sid, rest)
        if not rest:
            self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        self.flush()

    class Feeding(FakeServer):
        pending = None

        def data_received(self, data):
            super().data_received(data)
            if self.pending is not None and self.pending[1]:
                feed(self)

    Feeding.feed = feed
    server, servers, port = await _served(script, Feeding)
    chan = h2call.Channel([("127.0.0.1", port)], max_message=12 << 20)
    try:
        small = h2call.Channel([("127.0.0.1", port)], max_message=1000)
        call = small.stream_call(bytes, 5)
        await call.write(b"a")
        assert await _read_all(call) == [b"small", (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                    "Received message larger than max (5000 vs. 1000)")]
        await _until(lambda: any(isinstance(e, h2.events.StreamReset) for e in servers[0].events), "the reset")
        await small.close()
        call = chan.stream_call(bytes, 10)
        await call.write(b"b")
        assert await _read_all(call) == [large]
    finally:
        await chan.close()
        server.close()
