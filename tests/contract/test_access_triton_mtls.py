"""mTLS to a real Triton: its gRPC endpoint started with --grpc-use-ssl-mutual (trustme certificates
made at test time), the gateway's upstream.tls presenting a client certificate; the same gateway
without one is refused by Triton and answers UNAVAILABLE in each dialect's envelope. On both
transports: the HTTP/2 client (the default: asyncio's TLS, ALPN h2) and ``upstream.transport: grpc``."""

from __future__ import annotations

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import trustme

from gateway.app import Worker
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, worker_settings

MODEL = "saved_model_half_plus_three"


@pytest.fixture(scope="module")
def mtls_triton(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mtls")
    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1", "localhost"), ca.issue_cert("gateway.example")
    files = {name: tmp / f"{name}.pem" for name in ("ca", "server", "server-key", "client", "client-key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.cert_chain_pems[0].write_to_path(str(files["server"]))
    server.private_key_pem.write_to_path(str(files["server-key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client"]))
    client.private_key_pem.write_to_path(str(files["client-key"]))
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
                      workdir=str(ROOT / ".run" / "mtls-triton"), http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), startup_timeout_s=120)
    prepare = localtriton.prepare

    def with_tls(c, root):
        cmd, env = prepare(c, root)
        return [*cmd, "--model-control-mode=explicit", f"--load-model={MODEL}", "--grpc-use-ssl=true",
                "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={files['server']}",
                f"--grpc-server-key={files['server-key']}", f"--grpc-root-cert={files['ca']}"], env

    mp = pytest.MonkeyPatch()
    mp.setattr(localtriton, "prepare", with_tls)
    try:
        proc = localtriton.start(cfg, ROOT, log_path=tmp / "triton.log")
    finally:
        mp.undo()
    yield cfg, files
    proc.stop()


async def _gateway(cfg, tls: str | None, transport: str = "h2"):
    ports = {"tfserving_rest": free_port(), "v2_grpc": free_port()}
    extra = {"UPSTREAM__TLS": tls} if tls else {}
    w = Worker(worker_settings(ports, f"127.0.0.1:{cfg.grpc_port}", UPSTREAM__RETRIES="1",
                               UPSTREAM__TRANSPORT=transport, **extra))
    await w.start()
    assert (w.ctx.upstream._h2 is not None) == (transport == "h2")
    return w, ports


@pytest.mark.parametrize("transport", ["h2", "grpc"])
async def test_the_gateway_reaches_triton_over_mtls(mtls_triton, transport):
    cfg, f = mtls_triton
    tls = f"{{ca_file: {f['ca']}, cert_file: {f['client']}, key_file: {f['client-key']}}}"
    w, ports = await _gateway(cfg, tls, transport)
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/{MODEL}:predict"
            async with http.post(url, json={"instances": [1.0, 2.0]}) as r:
                assert r.status == 200 and await r.json() == {"predictions": [3.5, 4.0]}
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['v2_grpc']}")  # plaintext to the gateway
        try:
            x = grpcclient.InferInput("x", [2], "FP32")
            x.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
            result = await client.infer(MODEL, [x])
            assert result.as_numpy("y").tolist() == [3.5, 4.0]
        finally:
            await client.close()
        if transport == "h2":  # TLS with ALPN h2 on the HTTP/2 client's own connection
            conn = w.ctx.upstream._h2._conns[0]
            assert conn.transport.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    finally:
        await w.stop(grace=0.1)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
@pytest.mark.parametrize("tls", ["plaintext", "no_client_cert"])
async def test_triton_refuses_a_gateway_without_its_client_certificate(mtls_triton, tls, transport):
    cfg, f = mtls_triton
    w, ports = await _gateway(cfg, None if tls == "plaintext" else f"{{ca_file: {f['ca']}}}", transport)
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/{MODEL}:predict"
            async with http.post(url, json={"instances": [1.0]}) as r:
                body = await r.json()
                assert r.status == 503 and body == {"error": "Triton is unreachable"}  # no address
    finally:
        await w.stop(grace=0.1)
