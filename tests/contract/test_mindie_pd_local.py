"""`make run-pd`'s launcher: Triton, a coordinator, two P and two D instances; SIGINT stops all."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import orjson
import requests
import yaml

from tests.contract.test_docs_examples import loose_mismatch, parse
from tests.pd_support import DResultReader, p_answer
from tests.support import ROOT, free_port

INTER_COMM = 1121  # MindIE's default interCommPort: D's P-D port, which MindIE-MS names in d-target


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _run_the_docs_example(ports: list[int], tmp_path) -> None:
    """docs/mindie.md's PD request by hand, as written, against this cluster (its ports put in)."""
    block = next(b for b in parse(ROOT / "docs" / "mindie.md") if "/dresult" in b.code and b.lang == "sh")
    default = dict(zip((1025, 2025, 2026, 3025, 3026), ports, strict=True))
    code = re.sub(r"\b(1025|2025|2026|3025|3026)\b", lambda m: str(default[int(m[1])]), block.code)
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert block.expected and loose_mismatch(block.expected, out.stdout) is None, \
        (loose_mismatch(block.expected, out.stdout), out.stdout[-1500:], out.stderr)
    assert "reqId:0xffffffffffffffff" not in out.stdout  # the coordinator did not take the link back


def _longest_prompt() -> str:
    """A prompt tiny_llm answers with its longest reply (24 tokens)."""
    import zlib

    return next(p for p in (f"stop me {i}" for i in range(1000)) if zlib.crc32(p.encode()) % 17 == 16)


def _mindie_ms(ports: list[int]) -> None:
    """What MindIE-MS does with P and D, written from MindIE-Motor's sources: the controller
    (controller/request_handler/ServerRequestHandler.cpp) reads /v1/config and /v1/status, assigns
    the roles (BuildPostRoleReqBody), reads the status again; the coordinator (RequestRepeater.cpp
    PDRouteHandler) sends the user's request to P with req-id, req-type, d-target = D's ip;interCommPort
    and d-port = D's port, relays P's output then D's /dresult records; when the user goes away it
    sends stopInfer {"id": req-id} to P and D (UserDisConnectExceptionHandler.cpp)."""
    _c, p1, _p2, d1, _d2 = ports
    p_url, d_url = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{d1}"
    ids = {p1: 1, d1: 2}
    for url, port, role in ((p_url, p1, "prefill"), (d_url, d1, "decode")):
        cfg = requests.get(url + "/v1/config", timeout=5).json()  # IsValidStaticInfoResp
        assert isinstance(cfg["modelName"], str) and 0 <= cfg["maxSeqLen"] and 1 <= cfg["maxOutputLen"]
        assert 1 <= cfg["cacheBlockSize"] <= 128
        st = requests.get(url + "/v1/status", timeout=5).json()  # IsValidNodeStatusResp
        assert st["service"]["roleStatus"] in ("RoleUnknown", "RoleSwitching", "RoleReady")
        assert st["service"]["currentRole"] == role and 0 <= st["resource"]["availSlotsNum"] <= 5000
        peer = d1 if role == "prefill" else p1
        body = {"local": {"device": [], "server_ip": "127.0.0.1", "id": ids[port], "instance_idx_in_pod": 0,
                          "num_instances_per_pod": 1, "is_single_container": False, "host_ip": "127.0.0.1"},
                "peers": [{"device": [], "server_ip": "127.0.0.1", "id": ids[peer], "host_ip": "127.0.0.1"}]}
        r = requests.post(url + f"/v1/role/{role}", json=body, timeout=5)
        assert (r.status_code, r.content) == (200, b'{"result":"ok"}')
        st = requests.get(url + "/v1/status", timeout=5).json()
        assert st["service"] == {"roleStatus": "RoleReady", "currentRole": role}
        assert st["linkStatus"] == {"peers": [{"target": ids[peer], "link": "ok"}]}
    model = requests.get(p_url + "/v1/config", timeout=5).json()["modelName"]
    reader = DResultReader(d_url)  # the coordinator's long connection to D
    try:
        assert reader.status == 200
        headers = {"req-id": "4242", "req-type": "prefill", "d-target": f"127.0.0.1;{INTER_COMM}",
                   "d-port": str(d1)}
        body = {"inputs": "My name is Olivier and I", "stream": True, "parameters": {"max_new_tokens": 6}}
        env = p_answer(requests.post(p_url + "/infer", json=body, headers=headers, timeout=30))
        assert (env["reqId"], env["isStream"], env["isLastResp"]) == ("4242", True, False)
        records = reader.finished("4242")
        got = env["output"].encode() + b"".join(r.body for r in records)
        assert [r.kind for r in records][-1] == "lastData"
        events = [orjson.loads(e[len(b"data: "):]) for e in got.split(b"\n\n") if e]
        assert len(events) == 6  # six tokens, six events, the last one the final (MindIE's)
        assert events[-1]["generated_text"].startswith("".join(e["token"]["text"] for e in events[:-1]))
        assert events[-1]["token"]["text"] is None and len(events[-1]["token"]["id"]) == 1
        # the user goes away after P's answer: stopInfer to P and to D, as MindIE-MS
        body = {"inputs": _longest_prompt(), "stream": True, "parameters": {"max_new_tokens": 24}}
        env = p_answer(requests.post(p_url + "/infer", json=body, headers={**headers, "req-id": "4244"}, timeout=30))
        assert env["isLastResp"] is False
        stop = orjson.dumps({"id": "4244"})
        answers = [requests.post(f"{url}/v2/models/{model}/stopInfer", data=stop, timeout=5,
                                 headers={"Accept": "*/*", "Content-Type": "application/json"})
                   for url in (p_url, d_url)]
        assert (answers[0].status_code, answers[0].content) == (
            404, b'{"error":"RequestId is 4244 not found.","error_type":"NotFoundError"}')  # P handed off already
        assert (answers[1].status_code, answers[1].content) == (200, stop)  # D was generating it
        records = reader.finished("4244")
        assert records[-1].kind == "error" and b"stopInfer" in records[-1].body
        assert len([r for r in records if r.kind == "data"]) < 23
    finally:
        reader.close()


def _user_goes_away(ports: list[int]) -> None:
    """Through the gateway's coordinator: the user closes the connection after the first chunk; the
    coordinator sends stopInfer for the request's req-id to its P and its D (its log says so)."""
    coord = f"http://127.0.0.1:{ports[0]}"
    log = ROOT / ".run" / "pd" / "coordinator.log"
    before = log.read_text().count("went away; stopInfer to")
    deadline = time.monotonic() + 15
    while requests.get(coord + "/v1/readiness", timeout=5).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    for probe in ("/v1/startup", "/v1/health", "/v2/health/live", "/v2/health/ready"):  # MindIE-MS's status port's
        r = requests.get(coord + probe, timeout=5)
        assert (r.status_code, r.content) == (200, b""), probe
    r = requests.post(coord + "/v1/tokenizer", json={"inputs": "My name is Olivier"}, timeout=5)
    assert r.status_code == 200 and r.json()["token_number"] == 4  # a MindIE-MS user route: a P counts
    body = {"inputs": _longest_prompt(), "stream": True, "parameters": {"max_new_tokens": 24}}
    with requests.post(coord + "/infer", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200
        next(r.iter_content(None))
    deadline = time.monotonic() + 15
    while log.read_text().count("went away; stopInfer to") < before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [ln for ln in log.read_text().splitlines() if "went away; stopInfer to" in ln][before:]
    assert len(lines) >= 2, lines
    targets = [int(ln.split("stopInfer to ")[1].split(":")[1]) for ln in lines[:2]]
    assert len(set(targets) & set(ports[1:3])) == 1 and len(set(targets) & set(ports[3:5])) == 1, lines  # P and D


def test_run_pd_starts_a_cluster_that_answers_and_stops_on_ctrl_c(tmp_path):
    ports = [free_port() for _ in range(5)]
    triton = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    shutil.copytree(ROOT / "model_repository" / "tiny_llm", tmp_path / "models" / "tiny_llm")  # all it calls
    cfg = tmp_path / "local.yaml"
    cfg.write_text(yaml.safe_dump({"local_triton": {"venv": str(ROOT / ".venv-triton"), "workdir": ".run/test-pd-triton",
                                                    "model_repository": str(tmp_path / "models"),
                                                    "startup_timeout_s": 180, **triton}}))
    log = open(tmp_path / "launcher.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "run-pd", "--config", str(cfg),
                             "--ports", ",".join(map(str, ports)), "--admin-base", "0"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        coord = f"http://127.0.0.1:{ports[0]}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "launcher.log").read_text()
            try:
                if requests.get(coord + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError((tmp_path / "launcher.log").read_text())
        for port in ports:
            assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        r = requests.post(coord + "/v1/chat/completions", timeout=30, json={
            "model": "llama2_7b", "stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.content.endswith(b"data: [DONE]\n\n")
        _run_the_docs_example(ports, tmp_path)
        _mindie_ms(ports)
        time.sleep(1)  # the coordinator takes its /dresult link back (takeover_backoff_s)
        _user_goes_away(ports)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        text = (tmp_path / "launcher.log").read_text()
        assert "stopped the PD instances and Triton" in text
        assert all(_refused(p) for p in ports + [triton["grpc_port"]])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
