"""TLS on the listeners (HTTP with a real aiohttp client, gRPC with grpc's own) and TLS / mTLS to
Triton, with certificates made at test time by trustme (nothing checked in, nothing to expire)."""

from __future__ import annotations

import ssl

import aiohttp
import grpc
import pytest
import trustme
from tritonclient.grpc import service_pb2

from gateway import access
from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway.app import Worker
from gateway.core.errors import UNREACHABLE, ErrorKind, GatewayError, public_details
from gateway.settings import UpstreamTls
from gateway.upstream import TritonUpstream
from tests.fakes import fake_triton
from tests.support import free_port, running_worker, worker_settings


class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files."""

    def __init__(self, tmp):
        self.ca = trustme.CA()
        server, client = self.ca.issue_cert("127.0.0.1", "localhost"), self.ca.issue_cert("client.example")
        self.ca_file, self.cert, self.key = tmp / "ca.pem", tmp / "server.pem", tmp / "server-key.pem"
        self.client_cert, self.client_key = tmp / "client.pem", tmp / "client-key.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))

    def tls(self, mutual: bool = False) -> str:
        extra = f", client_ca_file: {self.ca_file}" if mutual else ""
        return f"{{cert_file: {self.cert}, key_file: {self.key}{extra}}}"

    def client_ssl(self, with_cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx

    def grpc_credentials(self, with_cert: bool) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            self.ca_file.read_bytes(), self.client_key.read_bytes() if with_cert else None,
            self.client_cert.read_bytes() if with_cert else None)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def tls_worker(pki):
    ports = {"grps_http": free_port(), "grps_grpc": free_port(), "tfserving_rest": free_port(),
             "admin_http": free_port()}
    async with fake_triton() as (_, target), \
            running_worker(ports, target, LISTENERS__GRPS_HTTP__TLS=pki.tls(), LISTENERS__GRPS_GRPC__TLS=pki.tls(),
                           LISTENERS__TFSERVING_REST__TLS=pki.tls(mutual=True),
                           LISTENERS__ADMIN_HTTP__TLS=pki.tls(mutual=True)):
        yield ports


LIVE = "/grps/v1/health/live"


async def test_an_http_listener_speaks_tls_to_a_real_client(pki, tls_worker):
    ports = tls_worker
    async with aiohttp.ClientSession() as http:
        async with http.post(f"https://127.0.0.1:{ports['grps_http']}{LIVE}", json={},
                             ssl=pki.client_ssl(with_cert=False)) as r:
            assert r.status == 200 and (await r.json())["status"]["status"] == "SUCCESS"
        with pytest.raises(aiohttp.ClientError):  # plaintext to a TLS port gets no answer
            async with http.post(f"http://127.0.0.1:{ports['grps_http']}{LIVE}", json={}) as r:
                await r.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a client that trusts another CA
            async with http.post(f"https://127.0.0.1:{ports['grps_http']}{LIVE}", json={},
                                 ssl=ssl.create_default_context()) as r:
                await r.read()


async def test_an_http_listener_with_a_client_ca_requires_a_client_certificate(pki, tls_worker):
    ports = tls_worker
    async with aiohttp.ClientSession() as http:
        url = f"https://127.0.0.1:{ports['tfserving_rest']}/v1/models"
        async with http.get(url, ssl=pki.client_ssl(with_cert=True)) as r:
            assert r.status == 400  # TF Serving's answer: the TLS layer let it through
        with pytest.raises(aiohttp.ClientError):
            async with http.get(url, ssl=pki.client_ssl(with_cert=False)) as r:
                await r.read()
        async with http.get(f"https://127.0.0.1:{ports['admin_http']}/live", ssl=pki.client_ssl(True)) as r:
            assert r.status == 200


async def test_a_grpc_listener_speaks_tls(pki, tls_worker):
    ports = tls_worker
    target = f"127.0.0.1:{ports['grps_grpc']}"
    async with grpc.aio.secure_channel(target, pki.grpc_credentials(with_cert=False)) as ch:
        ok = await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage(), timeout=10)
        assert ok.status.status == grps_pb2.Status.SUCCESS
    async with grpc.aio.insecure_channel(target) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_grpc_listener_with_a_client_ca_requires_a_client_certificate(pki):
    port = free_port()
    async with fake_triton() as (_, upstream), \
            running_worker({"grps_grpc": port}, upstream, LISTENERS__GRPS_GRPC__TLS=pki.tls(mutual=True)):
        target = f"127.0.0.1:{port}"
        async with grpc.aio.secure_channel(target, pki.grpc_credentials(with_cert=True)) as ch:
            ok = await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage(), timeout=10)
            assert ok.status.status == grps_pb2.Status.SUCCESS
        async with grpc.aio.secure_channel(target, pki.grpc_credentials(with_cert=False)) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await grps_pb2_grpc.GrpsServiceStub(ch).CheckLiveness(grps_pb2.GrpsMessage(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


# -- TLS and mTLS to Triton -----------------------------------------------------------------------------
class ReadyTriton(grpc.GenericRpcHandler):
    def __init__(self):
        self.peers: list[dict] = []

    def service(self, details):
        async def ready(_request: bytes, context):
            self.peers.append(context.auth_context())
            return service_pb2.ServerReadyResponse(ready=True).SerializeToString()

        return grpc.unary_unary_rpc_method_handler(ready) if details.method.endswith("/ServerReady") else None


@pytest.fixture
async def tls_triton(pki):
    """A Triton stand-in that requires a client certificate from our CA (Triton's --grpc-use-ssl-mutual)."""
    fake = ReadyTriton()
    creds = grpc.ssl_server_credentials([(pki.key.read_bytes(), pki.cert.read_bytes())],
                                        root_certificates=pki.ca_file.read_bytes(), require_client_auth=True)
    async with fake_triton(fake, credentials=creds) as (_, target):
        yield fake, int(target.rsplit(":", 1)[1])


async def test_the_worker_reaches_triton_over_mtls(pki, tls_triton):
    fake, port = tls_triton
    tls = (f"{{ca_file: {pki.ca_file}, cert_file: {pki.client_cert}, key_file: {pki.client_key},"
           f" server_name: localhost}}")
    w = Worker(worker_settings({}, f"127.0.0.1:{port}", UPSTREAM__TLS=tls))
    upstream = w._upstream()
    await upstream.connect()
    try:
        assert await upstream.server_ready() is True
        peer = fake.peers[-1]
        assert peer["transport_security_type"] == [b"ssl"]
        assert peer["x509_pem_cert"][0].decode().strip() == pki.client_cert.read_text().strip()  # our client cert
    finally:
        await upstream.close()


@pytest.mark.parametrize("tls", ["none", "no_client_cert", "plaintext"])
async def test_triton_refuses_a_channel_without_the_right_credentials(pki, tls_triton, tls):
    _, port = tls_triton
    if tls == "plaintext":
        upstream = TritonUpstream(f"127.0.0.1:{port}", retries=1)
    else:
        ca = str(pki.ca_file) if tls == "no_client_cert" else None
        creds, options = access.channel_credentials(UpstreamTls(ca_file=ca, server_name="localhost"))
        upstream = TritonUpstream(f"127.0.0.1:{port}", retries=1, credentials=creds, extra_options=options)
    await upstream.connect()
    try:
        assert await upstream.server_ready() is False
        with pytest.raises(GatewayError) as err:
            await upstream.server_metadata()
        assert err.value.kind is ErrorKind.UNAVAILABLE
        assert err.value.message == UNREACHABLE and str(port) not in err.value.message
    finally:
        await upstream.close()


def test_transport_failures_do_not_name_tritons_address_but_tritons_own_texts_stay():
    text = "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.3.7:8001: Connection refused"
    assert public_details(grpc.StatusCode.UNAVAILABLE, text) == UNREACHABLE
    dns = "errors resolving triton.internal:8001: [field:hostname lookup error]"
    assert public_details(grpc.StatusCode.UNAVAILABLE, dns) == UNREACHABLE
    assert public_details(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size") == "Exceeds maximum queue size"
    assert public_details(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'x'") == "Request for unknown model: 'x'"
