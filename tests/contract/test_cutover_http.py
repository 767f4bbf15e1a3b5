"""Cutting over on the HTTP dialects (issue 54), with real clients, on every route.

The legacy side: no TF Serving, GRPS or MindIE binary installs here, so the "legacy server" is a
second gateway speaking that dialect in front of the session's Triton, with its own model mapping:
``hp3`` is the same model on both sides (every answer matches); ``pert*`` is half_plus_two on the
front gateway's Triton side and ``cutover_perturbed`` on the legacy side (docs/models.md: y off by
1e-3, y2 missing, y3 extra, an error for x >= 1000). The front gateway (two workers: the figures
must hold across them) routes each model: triton, legacy, shadow, canary. Clients: curl for TF
Serving REST, requests for GRPS HTTP, the openai SDK for MindIE's OpenAI routes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway, wait_http

HTTP = ("tfserving_rest", "grps_http", "mindie_http", "admin_http")
PERT_SIG = {"serving_default": {"inputs": {"x": "x"}, "outputs": {"y": "y", "y2": "y2"}}}
PERTS = ("pert", "pert_legacy", "pert_c0", "pert_c100", "pert_sticky")


def _tf_models(front: bool) -> dict:
    models = {"hp3": {"triton": "saved_model_half_plus_three"}}
    for name in PERTS:
        models[name] = {"triton": "half_plus_two", "signatures": PERT_SIG} if front else {"triton": "cutover_perturbed"}
    return models


MINDIE = {"models": {"tiny_llm": {"profile": "trtllm", "tokenizer": "words", "max_tokens": 512,
                                  "max_new_tokens": 20}}}


def _grps_models(front: bool) -> dict:
    if front:
        return {name: {"triton_model": "half_plus_two", "triton_version": "123"} for name in ("pert-1", "pert_legacy-1")}
    return {name: {"triton_model": "cutover_perturbed", "triton_version": "1"} for name in ("pert-1", "pert_legacy-1")}


def _ports() -> dict[str, int]:
    return {name: free_port() for name in HTTP}


@pytest.fixture(scope="module")
def legacy(triton, tmp_path_factory):
    """The stand-in legacy server: a gateway speaking TF Serving REST, GRPS HTTP and MindIE."""
    cfg = gateway_config(triton.grpc_target, _ports(), {"dialects": {
        "tfserving": {"models": _tf_models(front=False)},
        "grps": {"models": _grps_models(front=False)},
        "mindie": {**MINDIE, "aliases": {"legacy_only": "tiny_llm"}}}})
    gw = start_gateway(cfg, tmp_path_factory.mktemp("legacy"))
    yield gw
    stop_gateway(gw)


def _front_config(triton_target: str, legacy_gw, mig: str, **tf_legacy) -> dict:
    tf = {"http": legacy_gw.url("tfserving_rest"), "route": "triton", "shadow_timeout_s": 20,
          "mismatches": {"path": mig, "per_model": 50}, "ready_after": 20,
          "models": {"hp3": {"route": "shadow"}, "pert": {"route": "shadow"}, "pert_legacy": {"route": "legacy"},
                     "pert_c0": {"route": "canary", "canary_percent": 0},
                     "pert_c100": {"route": "canary", "canary_percent": 100, "reverse_shadow": True},
                     "pert_sticky": {"route": "canary", "canary_percent": 50, "sticky": "header:x-user"}}}
    tf.update(tf_legacy)
    common = {"shadow_timeout_s": 20, "mismatches": {"path": mig, "per_model": 50}, "ready_after": 20}
    grps = {"http": legacy_gw.url("grps_http"), **common,
            "models": {"saved_model_half_plus_three-123": {"route": "shadow"}, "pert-1": {"route": "shadow"},
                       "pert_legacy-1": {"route": "legacy"}, "tiny_llm-1": {"route": "legacy"},
                       "grps_echo-1": {"route": "legacy"}}}
    mindie = {"http": legacy_gw.url("mindie_http"), **common,
              "models": {"legacy_only": {"route": "legacy"}, "tiny_llm": {"route": "shadow"}}}
    return gateway_config(triton_target, _ports(), {"workers": 2, "dialects": {
        "tfserving": {"models": _tf_models(front=True), "legacy": tf},
        "grps": {"models": _grps_models(front=True), "legacy": grps},
        "mindie": {**MINDIE, "legacy": mindie}}})


@pytest.fixture(scope="module")
def front(triton, legacy, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    gw = start_gateway(_front_config(triton.grpc_target, legacy, str(tmp / "migration")), tmp)
    gw.mig = tmp / "migration"
    yield gw
    stop_gateway(gw)


# -- clients and figures ---------------------------------------------------------------------------
def curl(base: str, path: str, body: str | None = None, headers: dict | None = None) -> tuple[int, str, bytes]:
    """(status, content-type, body bytes) as curl got them."""
    cmd = ["curl", "-sS", "--max-time", "60", "-o", "-", "-w", "\n%{http_code} %{content_type}", base + path]
    if body is not None:
        cmd += ["-X", "POST", "--data-binary", body]
    for k, v in (headers or {}).items():
        cmd += ["-H", f"{k}: {v}"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=90).stdout
    data, _, tail = out.rpartition(b"\n")
    status, _, ctype = tail.decode().partition(" ")
    return int(status), ctype, data


def migration(gw, dialect: str = "tfserving") -> dict[tuple[str, str, str], float]:
    """{(model, route, outcome): count} from the gateway's /metrics (every worker's sum)."""
    with urllib.request.urlopen(gw.url("admin_http") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gateway_migration_total" and s.labels["dialect"] == dialect:
                key = (s.labels["model"], s.labels["route"], s.labels["outcome"])
                out[key] = out.get(key, 0) + s.value
    return out


def wait_counts(gw, want: dict, dialect: str = "tfserving", timeout: float = 60) -> dict:
    """Until every (model, route, outcome) of ``want`` has at least its count; the figures then."""
    deadline = time.monotonic() + timeout
    while True:
        got = migration(gw, dialect)
        if all(got.get(k, 0) >= v for k, v in want.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def predict(x: list[float]) -> str:
    return json.dumps({"instances": x})


def columns(x: list[float]) -> str:
    return json.dumps({"inputs": {"x": x}})


# -- legacy: the request and the answer pass unchanged ---------------------------------------------
@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/models/pert_legacy:predict", predict([1.0, 2.0, 5.0])),
    ("POST", "/v1/models/pert_legacy:predict", columns([1.0, 2.0])),
    ("POST", "/v1/models/pert_legacy:predict", predict([2000.0])),  # the legacy model's own error
    ("POST", "/v1/models/pert_legacy:predict", "{not json"),
    ("POST", "/v1/models/pert_legacy/versions/7:predict", predict([1.0])),
    ("GET", "/v1/models/pert_legacy", None),
    ("GET", "/v1/models/pert_legacy/metadata", None),
])
def test_legacy_route_passes_request_and_answer_unchanged(front, legacy, method, path, body):
    direct = curl(legacy.url("tfserving_rest"), path, body)
    relayed = curl(front.url("tfserving_rest"), path, body)
    assert relayed == direct
    if path.endswith(":predict") and "2000" not in body and "{not" not in body and "/7" not in path:
        assert b"2.501" in relayed[2] or b"2.5010" in relayed[2]  # the perturbed legacy model answered


def test_triton_route_is_todays_path(front, legacy):
    """A model on no legacy route, and canary at 100 %: Triton answers (y exact, y2 present)."""
    status, _, body = curl(front.url("tfserving_rest"), "/v1/models/saved_model_half_plus_three:predict",
                           predict([1.0, 2.0, 5.0]))
    assert (status, body) == (200, b'{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}')  # TF Serving's own bytes
    status, _, body = curl(front.url("tfserving_rest"), "/v1/models/pert_c100:predict", columns([1.0]))
    assert status == 200, body
    outs = json.loads(body)["outputs"]
    assert outs["y"] == [2.5] and outs["y2"] == [3.5]
    status, _, body = curl(front.url("tfserving_rest"), "/v1/models/pert_c0:predict", columns([1.0]))
    assert json.loads(body) == json.loads(curl(legacy.url("tfserving_rest"), "/v1/models/pert_c0:predict",
                                               columns([1.0]))[2])


# -- shadow: the legacy answer to the client, Triton compared in the background -------------------
def test_shadow_identical_model_all_match(front, legacy):
    before = migration(front)
    n = 30
    for i in range(n):
        body = predict([float(i), i + 0.25, -i * 3.5])
        assert curl(front.url("tfserving_rest"), "/v1/models/hp3:predict", body) == \
            curl(legacy.url("tfserving_rest"), "/v1/models/hp3:predict", body)
    want = {("hp3", "shadow", "match"): before.get(("hp3", "shadow", "match"), 0) + n}
    got = wait_counts(front, want)
    assert got.get(("hp3", "shadow", "match"), 0) == want[("hp3", "shadow", "match")]
    assert not any(got.get(("hp3", "shadow", o), 0) for o in ("mismatch", "legacy_error", "triton_error", "dropped"))


def test_shadow_perturbed_model_names_its_outputs_and_errors(front, legacy):
    before = migration(front)
    for i in range(10):
        body = columns([float(i), 1.5])
        assert curl(front.url("tfserving_rest"), "/v1/models/pert:predict", body) == \
            curl(legacy.url("tfserving_rest"), "/v1/models/pert:predict", body)
    for _ in range(2):  # the legacy model fails these; the client gets the legacy error as it is
        body = columns([1000.0])
        relayed = curl(front.url("tfserving_rest"), "/v1/models/pert:predict", body)
        assert relayed == curl(legacy.url("tfserving_rest"), "/v1/models/pert:predict", body)
        assert relayed[0] != 200 and b"x >= 1000 refused" in relayed[2]

    def at(outcome):
        return before.get(("pert", "shadow", outcome), 0)

    want = {("pert", "shadow", "mismatch"): at("mismatch") + 10, ("pert", "shadow", "legacy_error"): at("legacy_error") + 2}
    got = wait_counts(front, want)
    assert {k: got.get(k, 0) for k in want} == want
    lines = [json.loads(x) for f in sorted(front.mig.glob("tfserving-mismatches.jsonl*"))
             for x in f.read_text().splitlines()]
    mism = [x for x in lines if x["model"] == "pert" and x["outcome"] == "mismatch"]
    assert mism, lines
    outs = mism[-1]["outputs"]
    assert outs["y"]["reason"] == "values" and abs(outs["y"]["max_abs"] - 0.001) < 1e-4
    assert outs["y2"]["reason"] == "missing in legacy" and outs["y3"]["reason"] == "missing in triton"
    assert "legacy_b64" not in mism[-1] and len(mism[-1]["request_digest"]) == 32
    errs = [x for x in lines if x["model"] == "pert" and x["outcome"] == "legacy_error"]
    assert errs and "x >= 1000 refused" in errs[-1]["legacy_error"]


# -- canary -----------------------------------------------------------------------------------------
def _side(body: bytes) -> str:
    """Which side answered a pert* predict of [1.0]: Triton's half_plus_two has y2, the legacy one y3."""
    outs = json.loads(body)["outputs"]
    return "triton" if "y2" in outs else "legacy"


def test_canary_shares_stickiness_and_reverse_shadow(front):
    base = front.url("tfserving_rest")
    assert {_side(curl(base, "/v1/models/pert_c0:predict", columns([1.0]))[2]) for _ in range(5)} == {"legacy"}
    before = migration(front)
    sides = {_side(curl(base, "/v1/models/pert_c100:predict", columns([1.0]))[2]) for _ in range(5)}
    assert sides == {"triton"}
    key = ("pert_c100", "canary", "mismatch")  # reverse_shadow: the legacy side ran in the background
    assert wait_counts(front, {key: before.get(key, 0) + 5}).get(key, 0) == before.get(key, 0) + 5
    seen = {}
    for user in range(16):
        got = {_side(curl(base, "/v1/models/pert_sticky:predict", columns([1.0]), {"x-user": f"u{user}"})[2])
               for _ in range(3)}
        assert len(got) == 1, (user, got)  # sticky: one side per user
        seen[user] = got.pop()
    assert set(seen.values()) == {"triton", "legacy"}  # 50 %: both sides over 16 users


def test_routes_reload_without_restart(front):
    base = front.url("tfserving_rest")
    original = front.config_path.read_text()
    cfg = yaml.safe_load(original)
    cfg["dialects"]["tfserving"]["legacy"]["models"]["pert_legacy"] = {"route": "triton"}
    try:
        front.config_path.write_text(yaml.safe_dump(cfg))
        deadline = time.monotonic() + 20
        sides: list[str] = []
        while time.monotonic() < deadline:  # each worker follows the file; a fresh connection each time
            sides = [_side(curl(base, "/v1/models/pert_legacy:predict", columns([1.0]))[2]) for _ in range(6)]
            if set(sides) == {"triton"}:
                break
            time.sleep(0.3)
        assert set(sides) == {"triton"}, front.log_tail()
    finally:
        front.config_path.write_text(original)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if {_side(curl(base, "/v1/models/pert_legacy:predict", columns([1.0]))[2]) for _ in range(6)} == {"legacy"}:
            break
        time.sleep(0.3)
    assert {_side(curl(base, "/v1/models/pert_legacy:predict", columns([1.0]))[2]) for _ in range(6)} == {"legacy"}


# -- the report ------------------------------------------------------------------------------------
def test_migration_report(front, legacy):
    """After the shadow tests: hp3 agrees 100 % and is ready; pert is not, its outputs named."""
    n = 20 - migration(front).get(("hp3", "shadow", "match"), 0)
    for i in range(max(n, 0)):
        curl(front.url("tfserving_rest"), "/v1/models/hp3:predict", predict([float(i)]))
    wait_counts(front, {("hp3", "shadow", "match"): 20})
    wait_counts(front, {("pert", "shadow", "mismatch"): 1})
    run = subprocess.run([sys.executable, "-m", "gateway", "migration", "report", "--config", str(front.config_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    print(run.stdout)
    (front.mig / "report.txt").write_text(run.stdout)
    assert run.returncode == 1, run.stderr  # pert is not ready
    line = {r.split()[1]: r for r in run.stdout.splitlines() if r.startswith("tfserving ")}
    assert "100.00 %" in line["hp3"] and line["hp3"].endswith("ready to cut over")
    assert "not ready" in line["pert"] and "mismatch" in line["pert"] and "y: abs 0.001" in line["pert"]
    assert "tfserving/pert: output y: values" in run.stdout
    assert "tfserving/pert: output y2: missing in legacy" in run.stdout
    assert "tfserving/pert: output y3: missing in triton" in run.stdout
    js = subprocess.run([sys.executable, "-m", "gateway", "migration", "report", "--config", str(front.config_path),
                         "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    doc = {m["model"]: m for m in json.loads(js.stdout)}
    assert doc["hp3"]["agreement"] == 1.0 and doc["pert"]["worst"]["output"] == "y"


# -- a slow or failing Triton never changes what the client receives ---------------------------------
class Blackhole:
    """A TCP listener that accepts and never answers (a Triton that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.held.append(conn)
            except OSError:
                continue

    def close(self):
        self.stop = True
        for c in self.held:
            c.close()
        self.sock.close()


def _start_without_triton(cfg: dict, tmp):
    """start_gateway for a gateway whose Triton never answers: waits for /live, not /health."""
    import os

    from gateway.local import parent

    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log_path = tmp / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(parent.ending_with_us([sys.executable, "-m", "gateway", "serve", "--config", str(path)]),
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    from tests.support import GatewayProcess

    ports = {n: lst["port"] for n, lst in cfg["listeners"].items() if "port" in lst}
    gw = GatewayProcess(proc, ports, path, log_path, set())
    try:
        wait_http(gw.url("admin_http") + "/live", timeout=60, proc=proc)
        for _ in range(100):  # the TF REST listener bound too
            try:
                socket.create_connection(("127.0.0.1", ports["tfserving_rest"]), 1).close()
                break
            except OSError:
                time.sleep(0.1)
    except Exception:
        proc.kill()
        raise RuntimeError(f"gateway did not start:\n{log_path.read_text()}") from None
    return gw


@pytest.mark.parametrize("triton_kind", ["hangs", "refuses"])
def test_shadow_with_a_slow_or_failing_triton_answers_as_legacy(legacy, tmp_path, triton_kind):
    hole = Blackhole() if triton_kind == "hangs" else None
    target = f"127.0.0.1:{hole.port if hole else free_port()}"
    cfg = _front_config(target, legacy, str(tmp_path / "migration"), shadow_timeout_s=8)
    cfg["workers"] = 1
    gw = _start_without_triton(cfg, tmp_path)
    try:
        n = 6
        for i in range(n):
            body = columns([float(i)])
            t0 = time.monotonic()
            got = curl(gw.url("tfserving_rest"), "/v1/models/hp3:predict", body)
            took = time.monotonic() - t0
            assert got == curl(legacy.url("tfserving_rest"), "/v1/models/hp3:predict", body)
            assert took < 4, took  # the shadow's deadline is 8 s: the client never waited for it
        key = ("hp3", "shadow", "triton_error")
        assert wait_counts(gw, {key: n}, timeout=40).get(key, 0) == n, gw.log_tail()
    finally:
        stop_gateway(gw)
        if hole:
            hole.close()



# -- GRPS HTTP (requests, as GRPS's own http_client.py) ---------------------------------------------
def grps(gw, doc=None, data: bytes | None = None, params=None, headers=None, stream=False):
    import requests

    url = gw.url("grps_http") + "/grps/v1/infer/predict"
    if doc is not None:
        return requests.post(url, json=doc, params=params, headers=headers, timeout=60, stream=stream)
    return requests.post(url, data=data, params=params, headers=headers, timeout=60, stream=stream)


def gtensor_x(x: list[float], model: str) -> dict:
    return {"model": model, "gtensors": {"tensors": [
        {"name": "x", "dtype": "DT_FLOAT32", "shape": [len(x)], "flat_float32": x}]}}


def _same(a, b) -> None:
    assert (a.status_code, a.headers.get("content-type"), a.content) == \
        (b.status_code, b.headers.get("content-type"), b.content)


@pytest.mark.parametrize("case", ["gtensors", "bin_data", "error", "unknown"])
def test_grps_legacy_route_passes_unchanged(front, legacy, case):
    if case == "gtensors":
        args = {"doc": gtensor_x([1.0, 2.0], "pert_legacy-1")}
    elif case == "bin_data":
        args = {"data": bytes(range(256)) * 4, "headers": {"content-type": "application/octet-stream"},
                "params": {"model": "grps_echo-1"}}
    elif case == "error":
        args = {"doc": gtensor_x([5000.0], "pert_legacy-1")}
    else:
        args = {"doc": {"model": "pert_legacy-1", "str_data": "not a tensor"}}
    got, direct = grps(front, **args), grps(legacy, **args)
    _same(got, direct)
    if case == "gtensors":
        assert [t["name"] for t in got.json()["gtensors"]["tensors"]] == ["y", "y3"]  # the legacy model's


def test_grps_legacy_stream_relayed_chunk_by_chunk(front, legacy):
    args = {"doc": {"model": "tiny_llm-1", "str_data": "hello"}, "params": {"streaming": "true"}, "stream": True}
    with grps(front, **args) as r:
        assert r.status_code == 200 and r.headers.get("transfer-encoding") == "chunked"
        chunks = [c for c in r.iter_content(chunk_size=None)]
    with grps(legacy, **args) as r:
        direct = b"".join(r.iter_content(chunk_size=None))
    assert b"".join(chunks) == direct and len(chunks) >= 4  # as they came, not one block


def test_grps_shadow_identical_and_perturbed(front, legacy):
    before = migration(front, "grps")
    for i in range(8):
        doc = gtensor_x([float(i), 0.5], "saved_model_half_plus_three-123")
        _same(grps(front, doc), grps(legacy, doc))
        doc = gtensor_x([float(i), 0.5], "pert-1")
        _same(grps(front, doc), grps(legacy, doc))
    m1, m2 = ("saved_model_half_plus_three-123", "shadow", "match"), ("pert-1", "shadow", "mismatch")
    want = {m1: before.get(m1, 0) + 8, m2: before.get(m2, 0) + 8}
    got = wait_counts(front, want, "grps")
    assert {k: got.get(k, 0) for k in want} == want
    lines = [json.loads(x) for x in (front.mig / "grps-mismatches.jsonl").read_text().splitlines()]
    outs = [x for x in lines if x["model"] == "pert-1"][-1]["outputs"]
    assert outs["y"]["reason"] == "values" and abs(outs["y"]["max_abs"] - 0.001) < 1e-4
    assert outs["y2"]["reason"] == "missing in legacy" and outs["y3"]["reason"] == "missing in triton"


# -- MindIE / OpenAI (the openai SDK) ----------------------------------------------------------------
PROMPT = [{"role": "user", "content": "tell me about the cut over"}]


def oai(gw):
    import openai

    return openai.OpenAI(base_url=gw.url("mindie_http") + "/v1", api_key="unused", max_retries=0)


def test_mindie_legacy_route_whole_and_streamed(front, legacy):
    """``legacy_only`` is an alias only the legacy server has: answered through the front, it was relayed."""
    with oai(front) as f, oai(legacy) as lg:
        whole = f.chat.completions.create(model="legacy_only", messages=PROMPT, max_tokens=6, temperature=0)
        direct = lg.chat.completions.create(model="legacy_only", messages=PROMPT, max_tokens=6, temperature=0)
        assert whole.model == "legacy_only" and whole.choices[0].message.content == direct.choices[0].message.content
        assert whole.usage.completion_tokens == direct.usage.completion_tokens == 6
        chunks = list(f.chat.completions.create(model="legacy_only", messages=PROMPT, max_tokens=6, temperature=0,
                                                stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == direct.choices[0].message.content and len(chunks) >= 6  # event by event
        import openai

        with pytest.raises(openai.UnprocessableEntityError) as e:  # the legacy server's own error, unchanged
            f.chat.completions.create(model="legacy_only", messages=PROMPT, top_p=1.5)
        assert e.value.body == "Parameter top_p must be in (0.0,1.0], got 1.5."


def test_mindie_shadow_greedy_compared_sampled_skipped(front):
    before = migration(front, "mindie")
    with oai(front) as f:
        for _ in range(3):
            r = f.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=5, temperature=0)
            assert r.usage.completion_tokens == 5
        f.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=5, temperature=0.7)
        list(f.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=5, stream=True, temperature=0))
    match, skipped = ("tiny_llm", "shadow", "match"), ("tiny_llm", "shadow", "skipped")
    want = {match: before.get(match, 0) + 3, skipped: before.get(skipped, 0) + 2}
    got = wait_counts(front, want, "mindie")
    assert {k: got.get(k, 0) for k in want} == want
    assert not got.get(("tiny_llm", "shadow", "mismatch"))
