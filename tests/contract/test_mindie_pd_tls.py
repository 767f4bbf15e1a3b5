"""PD on a real network (issue 22): every PD link over mTLS (coordinator -> P, coordinator -> D's
/dresult, P -> D's hand-off and relay), peers named by host name (``localhost``), certificates made
at test time by trustme; P with two workers."""

from __future__ import annotations

import time

import pytest
import requests

from gateway.dialects import LISTENERS
from tests.pd_support import MINDIE, normalise, p_answer
from tests.support import free_port, gateway_config, start_gateway, stop_gateway
from tests.unit.test_access_tls import Pki


def _start(triton, tmp, pki: Pki, pd: dict, workers: int = 1):
    ports = {name: free_port() for name in LISTENERS}
    peer_tls = {"ca_file": str(pki.ca_file), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    cfg = gateway_config(triton.grpc_target, ports, {"workers": workers, "dialects": {"mindie": {
        **MINDIE, "pd": {**pd, "tls": peer_tls}}}})
    if pd["role"] != "coordinator":  # P and D: mTLS listeners, a client certificate from the CA required
        cfg["listeners"]["mindie_http"]["tls"] = {"cert_file": str(pki.cert), "key_file": str(pki.key),
                                                  "client_ca_file": str(pki.ca_file)}
    return start_gateway(cfg, tmp)


@pytest.fixture(scope="module")
def cluster(triton, tmp_path_factory):
    pki = Pki(tmp_path_factory.mktemp("pd-pki"))
    started = {}
    try:
        started["d"] = _start(triton, tmp_path_factory.mktemp("tls-d"), pki, {"role": "decode"})
        started["p"] = _start(triton, tmp_path_factory.mktemp("tls-p"), pki, {"role": "prefill"}, workers=2)
        started["p_relay"] = _start(triton, tmp_path_factory.mktemp("tls-pr"), pki,
                                    {"role": "prefill", "phase_split": False})
        port = {n: g.port("mindie_http") for n, g in started.items()}
        started["coord"] = _start(triton, tmp_path_factory.mktemp("tls-c"), pki, {
            "role": "coordinator", "prefill": [f"localhost:{port['p']}"], "decode": [f"localhost:{port['d']}"]})
        url = started["coord"].url("mindie_http")
        deadline = time.monotonic() + 30
        while requests.get(url + "/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, started["coord"].log_tail()
            time.sleep(0.1)
        yield started, pki
    finally:
        for g in started.values():
            stop_gateway(g)


def test_p_and_d_listeners_require_a_client_certificate(cluster):
    started, pki = cluster
    d = f"https://localhost:{started['d'].port('mindie_http')}/health"
    with pytest.raises(requests.exceptions.ConnectionError):  # TLS 1.3: refused just after the handshake
        requests.get(d, verify=str(pki.ca_file), timeout=5)  # no client certificate: no handshake
    r = requests.get(d, verify=str(pki.ca_file), cert=(str(pki.client_cert), str(pki.client_key)), timeout=5)
    assert r.status_code == 200


@pytest.mark.parametrize(("path", "body"), [
    ("/generate_stream", {"inputs": "over tls", "parameters": {"max_new_tokens": 8}}),
    ("/v1/chat/completions", {"model": "llama2_7b", "max_tokens": 8, "stream": True,
                              "messages": [{"role": "user", "content": "over tls"}]}),
    ("/generate", {"inputs": "over tls", "parameters": {"max_new_tokens": 8}}),
])
def test_coordinator_p_and_d_over_mtls_by_host_name_answer_as_a_standard_instance(cluster, gateway, path, body):
    started, _ = cluster
    got = requests.post(started["coord"].url("mindie_http") + path, json=body, timeout=30)
    want = requests.post(gateway.url("mindie_http") + path, json=body, timeout=30)
    assert got.status_code == 200, got.content
    assert normalise(got.content) == normalise(want.content)


def test_p_hands_off_and_relays_to_d_named_by_host_name_over_mtls(cluster):
    started, pki = cluster
    d_port = started["d"].port("mindie_http")
    auth = {"verify": str(pki.ca_file), "cert": (str(pki.client_cert), str(pki.client_key)), "timeout": 30}
    for p in ("p", "p_relay"):  # the hand-off (POST /pd/v1/decode), and the relayed records (/pd/v1/relay)
        r = requests.post(f"https://localhost:{started[p].port('mindie_http')}/generate_stream",
                          json={"inputs": "named", "parameters": {"max_new_tokens": 6}},
                          headers={"req-id": "4242", "req-type": "prefill", "d-target": f"localhost;{d_port}"}, **auth)
        env = p_answer(r)
        assert env["reqId"] == "4242" and env["isLastResp"] is False
