"""MindIE PD roles against the real Triton + tiny_llm: P and D instances on their own, then a
coordinator in front of two P and two D instances, compared with a standard instance."""

from __future__ import annotations

import concurrent.futures
import time

import openai
import orjson
import pytest
import requests
from text_generation import Client

from tests.pd_support import DResultReader, normalise, p_answer, start_role
from tests.support import stop_gateway
from tests.triton_proxy import TcpProxy

SEED_BODY = {"model": "llama2_7b", "messages": [{"role": "system", "content": "You are a helpful assistant."}],
             "max_tokens": 20, "presence_penalty": 1.03, "frequency_penalty": 1.0, "seed": None,
             "temperature": 0.5, "top_p": 0.95, "stream": True}


@pytest.fixture(scope="module")
def instances(triton, tmp_path_factory):
    """Started together: d0 (read directly by the tests), p1, p2, d1, d2 and a coordinator over them."""
    started = {}

    def start(name, pd, **kw):
        started[name] = start_role(triton.grpc_target, tmp_path_factory.mktemp(name), pd, **kw)
        return started[name]

    try:
        start("d0", {"role": "decode", "heartbeat_s": 0.3}, workers=2)  # records reach the worker holding /dresult
        start("p1", {"role": "prefill"}, workers=2)  # P keeps no state between requests: any worker serves
        start("p2", {"role": "prefill"}, workers=2)
        start("p3", {"role": "prefill", "phase_split": False, "serve_without_pd_headers": True}, workers=2)
        start("d1", {"role": "decode"}, workers=2)
        start("d2", {"role": "decode"}, workers=2)
        addr = {n: f"127.0.0.1:{g.port('mindie_http')}" for n, g in started.items()}
        start("coord", {"role": "coordinator", "prefill": [addr["p1"], addr["p2"]],
                        "decode": [addr["d1"], addr["d2"]], "max_requests": 4})
        wait_ready(started["coord"].url("mindie_http"))
        yield started
    finally:
        for g in started.values():
            stop_gateway(g)


def wait_ready(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if requests.get(url + "/health", timeout=2).status_code == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


def pd_headers(req_id: str, d, **extra) -> dict:
    return {"req-id": req_id, "req-type": "prefill", "d-target": f"127.0.0.1;{d.port('mindie_http')}", **extra}


@pytest.fixture(scope="module")
def d0_reader(instances):
    reader = DResultReader(instances["d0"].url("mindie_http"))
    yield reader
    reader.close()


# -- P and D on their own -----------------------------------------------------------------------

def test_seed_example_p_envelope_then_dresult_carries_the_rest(instances, d0_reader, gateway):
    p, d0 = instances["p1"], instances["d0"]
    body = {**SEED_BODY, "seed": 7}
    r = requests.post(p.url("mindie_http") + "/v1/chat/completions", json=body, headers=pd_headers("12345", d0))
    env = p_answer(r)
    assert r.content.startswith(b'{"reqId":"12345","isStream":true,"isLastResp":false,"output":"data: {')
    assert list(env) == ["reqId", "isStream", "isLastResp", "output"]
    assert env["reqId"] == "12345" and env["isStream"] is True and env["isLastResp"] is False
    events = [e for e in env["output"].split("\n\n") if e]
    assert len(events) == 2  # the role chunk and the first token
    assert orjson.loads(events[0][len("data: "):])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert orjson.loads(events[1][len("data: "):])["id"] == "12345"
    recs = d0_reader.finished("12345")
    assert [x.kind for x in recs[:-1]] == ["data"] * (len(recs) - 1) and recs[-1].kind == "lastData"
    assert all(x.body.startswith(b"data: ") for x in recs)
    assert b"data: [DONE]" in recs[-1].body and d0_reader.raw.count(b"reqId:12345\0lastData:") == 1
    assert b"reqId:12345\0data:data: {" in d0_reader.raw  # the wire shows data:data: as in MindIE
    whole = env["output"].encode() + b"".join(x.body for x in recs)
    standard = requests.post(gateway.url("mindie_http") + "/v1/chat/completions", json=body).content
    assert normalise(whole) == normalise(standard)


def test_non_stream_p_answers_no_output_and_d_sends_the_whole_body(instances, d0_reader, gateway):
    p, d0 = instances["p2"], instances["d0"]
    body = {"inputs": "My name is Olivier", "parameters": {"max_new_tokens": 6, "details": True, "seed": 3}}
    r = requests.post(p.url("mindie_http") + "/generate", json=body, headers=pd_headers("abc123", d0))
    p_answer(r)  # isLastResp too, which MindIE's own P leaves out here (docs/mindie.md)
    assert r.content == b'{"reqId":"abc123","isStream":false,"isLastResp":false}'
    recs = d0_reader.finished("abc123")
    assert [x.kind for x in recs] == ["lastData"]
    standard = requests.post(gateway.url("mindie_http") + "/generate", json=body).content
    assert normalise(recs[0].body) == normalise(standard)


def test_request_finished_on_p_has_is_last_resp_and_nothing_goes_to_d(instances, d0_reader, gateway):
    p, d0 = instances["p1"], instances["d0"]
    body = {"prompt": "Hello", "max_tokens": 1, "stream": True}
    r = requests.post(p.url("mindie_http") + "/generate", json=body, headers=pd_headers("beef", d0))
    env = p_answer(r)
    assert env["isLastResp"] is True and env["isStream"] is True
    assert env["output"].encode() == requests.post(gateway.url("mindie_http") + "/generate", json=body).content
    time.sleep(0.3)
    assert d0_reader.of("beef") == []


@pytest.mark.parametrize("p_name", ["p1", "p3"])  # the context phase on P; P runs it all (no split)
def test_non_stream_request_finished_on_p_has_the_whole_body_in_output(instances, d0_reader, gateway, p_name):
    p, d0 = instances[p_name], instances["d0"]
    body = {"model": "tiny_llm", "max_tokens": 1, "messages": [{"role": "user", "content": "one"}]}
    rid = "4101" if p_name == "p1" else "4103"  # decimal, as a coordinator sends it
    r = requests.post(p.url("mindie_http") + "/v1/chat/completions", json=body, headers=pd_headers(rid, d0))
    env = p_answer(r)
    assert r.content.startswith(f'{{"reqId":"{rid}","isStream":false,"isLastResp":true,"output":"'.encode())
    want = requests.post(gateway.url("mindie_http") + "/v1/chat/completions", json=body).content
    assert normalise(env["output"].encode()) == normalise(want)
    time.sleep(0.3)
    assert d0_reader.of(rid) == []


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"model": "tiny_llm", "stream": True, "max_tokens": 6,
                              "messages": [{"role": "user", "content": "relay me"}]}),
    ("/generate", {"prompt": "relay me", "max_tokens": 6, "stream": True}),
])
def test_without_a_phase_split_p_generates_and_relays_the_rest_to_d(instances, d0_reader, gateway, path, body):
    p, d0 = instances["p3"], instances["d0"]
    rid = str(abs(hash(path)) % 10**9)
    env = p_answer(requests.post(p.url("mindie_http") + path, json=body, headers=pd_headers(rid, d0)))
    assert env["isStream"] is True and env["isLastResp"] is False and env["output"]
    recs = d0_reader.finished(rid)
    assert recs[-1].kind == "lastData" and all(x.kind == "data" for x in recs[:-1]) and len(recs) >= 5
    whole = env["output"].encode() + b"".join(x.body for x in recs)
    assert normalise(whole) == normalise(requests.post(gateway.url("mindie_http") + path, json=body).content)


@pytest.mark.parametrize(("headers", "message"), [
    ({"req-id": "1", "req-type": "prefill"}, "DMI request must have req-type, req-id, d-target headers"),
    ({"req-id": "12g", "req-type": "prefill", "d-target": "127.0.0.1"},
     "Invalid req-id, the character of req-id should be hex char [0-9, a-f, A-F], but got 12g"),
    ({"req-id": "a" * 1025, "req-type": "prefill", "d-target": "127.0.0.1"}, "The length of req-id cannot exceed 1024"),
    ({"req-id": "1", "req-type": "decode", "d-target": "127.0.0.1"}, "Parameter req-type must be prefill but got decode"),
    ({"req-id": "1", "req-type": "prefill", "d-target": "256.0.0.1;3025"}, "Parameter d-target must be an IPv4 address"),
    ({"req-id": "1", "req-type": "prefill", "d-target": "d_0;3025"}, "Parameter d-target must be an IPv4 address"),
    ({"req-id": "1", "req-type": "prefill", "d-target": "::g;3025"}, "Parameter d-target must be an IPv4 address"),
    ({"req-id": "1", "req-type": "prefill", "d-target": "127.0.0.1", "is-recompute": "yes"},
     "Parameter is-recompute is an optional parameter. When it is set, it must be true or false."),
])
def test_bad_pd_headers_are_400_with_mindie_messages(instances, headers, message):
    r = requests.post(instances["p1"].url("mindie_http") + "/infer", json={"inputs": "hi"}, headers=headers)
    assert r.status_code == 400
    assert r.json() == {"error": message, "error_type": "Bad Request"}


def test_roles_refuse_what_they_do_not_serve(instances):
    r = requests.post(instances["d0"].url("mindie_http") + "/infer", json={"inputs": "hi"},
                      headers={"req-id": "1", "req-type": "prefill", "d-target": "127.0.0.1"})
    assert r.status_code == 400 and r.json()["error"].startswith("DMI inference requests can be sent only to the prefill")
    r = requests.get(instances["p1"].url("mindie_http") + "/dresult", timeout=5)
    assert r.status_code == 400 and r.json()["error"] == "Only the Decode node supports dresult but you send to prefill"


def test_hand_off_to_a_d_that_is_not_there_is_a_p_node_error(instances):
    from tests.support import free_port

    headers = {"req-id": "77", "req-type": "prefill", "d-target": f"127.0.0.1;{free_port()}"}
    r = requests.post(instances["p1"].url("mindie_http") + "/infer", json={"inputs": "hi", "stream": True},
                      headers=headers)
    assert r.status_code == 500 and r.json()["error"].startswith("[P Node] Send D request failed")


def test_recompute_skips_what_the_user_already_has(instances, d0_reader, gateway):
    """is-recompute: P and D leave out the chunks already delivered (pd_recompute.skip)."""
    p, d0 = instances["p2"], instances["d0"]
    body = {"text_input": "recompute me", "parameters": {"max_new_tokens": 6}}
    standard = requests.post(gateway.url("mindie_http") + "/v2/models/tiny_llm/generate_stream", json=body).content
    events = [e + b"\n\n" for e in standard.split(b"\n\n") if e]
    again = {**body, "pd_recompute": {"skip": 3}}
    r = requests.post(p.url("mindie_http") + "/v2/models/tiny_llm/generate_stream", json=again,
                      headers=pd_headers("55", d0, **{"is-recompute": "true"}))
    assert p_answer(r)["output"] == "" and r.json()["isLastResp"] is False
    rest = b"".join(x.body for x in d0_reader.finished("55"))
    assert normalise(rest) == normalise(b"".join(events[3:]))
    r = requests.post(p.url("mindie_http") + "/infer", json={"inputs": "1,2,3"},
                      headers=pd_headers("56", d0, **{"is-recompute": "true"}))
    assert r.status_code == 422 and r.json()["error"] == "Try to do recompute but it is not supported."


def test_heartbeats_on_an_idle_dresult(d0_reader):
    start = len([r for r in d0_reader.records if r.kind == "ka"])
    time.sleep(1.0)
    beats = [t for t, c in d0_reader.chunks if c == b"ka:heartbeat\0"]
    assert len([r for r in d0_reader.records if r.kind == "ka"]) - start >= 2
    gaps = [b - a for a, b in zip(beats[-3:], beats[-2:], strict=False)]
    assert all(g >= 0.25 for g in gaps)
    assert d0_reader.headers["content-type"].startswith("text/event-stream")
    assert d0_reader.headers.get("transfer-encoding") == "chunked"


def test_a_new_dresult_connection_takes_over(instances, d0_reader):
    d0 = instances["d0"]
    first = DResultReader(d0.url("mindie_http"))
    try:
        second = DResultReader(d0.url("mindie_http"))
        try:
            closed = first.wait(lambda rs: [r for r in rs if r.kind == "close"])
            assert closed[0].req_id == "0xffffffffffffffff"
            assert closed[0].body == b"new connection is to established, close the old one."
            assert first.ended.wait(5)
            p = instances["p1"]
            p_answer(requests.post(p.url("mindie_http") + "/infer", json={"inputs": "take over", "stream": True},
                                   headers=pd_headers("7a", d0)))
            assert second.finished("7a")[-1].kind == "lastData" and first.of("7a") == []
        finally:
            second.close()
    finally:
        first.close()
    # the module's reader was taken over too; take the connection back for the tests after this one
    d0_reader.__init__(d0.url("mindie_http"))


# -- through the coordinator ------------------------------------------------------------------------

CASES = {
    "chat": ("/v1/chat/completions", {"model": "llama2_7b", "max_tokens": 6,
                                      "messages": [{"role": "user", "content": "Hello there"}]}),
    "completions": ("/v1/completions", {"model": "tiny_llm", "prompt": "Once upon a time", "max_tokens": 50}),
    "completions_stop": ("/v1/completions", {"model": "tiny_llm", "prompt": "stop test", "max_tokens": 30,
                                             "stop": ["deterministic"]}),
    "tgi_generate": ("/generate", {"inputs": "Hello", "parameters": {"max_new_tokens": 5, "details": True}}),
    "tgi_compat": ("/", {"inputs": "Hello", "parameters": {"max_new_tokens": 5, "details": True}}),
    "vllm": ("/generate", {"prompt": "Hello", "max_tokens": 5}),
    "triton": ("/v2/models/tiny_llm/generate", {"text_input": "Hello", "parameters": {"max_new_tokens": 5,
                                                                                        "details": True}}),
    "native": ("/infer", {"inputs": "Hello", "parameters": {"max_new_tokens": 5, "details": True}}),
    "one_token": ("/v1/chat/completions", {"model": "tiny_llm", "max_tokens": 1,
                                           "messages": [{"role": "user", "content": "Hi"}]}),
    # token-id prompts: TensorRT-LLM's input_ids/output_ids through P's context and D's generation phase
    "native_ids": ("/infer_token", {"input_id": [11, 12, 13], "parameters": {"max_new_tokens": 5, "details": True}}),
    "completions_ids": ("/v1/completions", {"model": "tiny_llm", "prompt": [7, 8], "max_tokens": 6}),
    # log probabilities from the model's output_log_probs, P's carried to D in the hand-off
    "chat_logprobs": ("/v1/chat/completions", {"model": "tiny_llm", "max_tokens": 5, "logprobs": True,
                                               "messages": [{"role": "user", "content": "Hello there"}]}),
}
STREAM_PATHS = {"/generate": None, "/v2/models/tiny_llm/generate": "/v2/models/tiny_llm/generate_stream"}


def _variants():
    for name, (path, body) in CASES.items():
        yield name, path, body
        if name == "tgi_generate":
            yield name + "_stream", "/generate_stream", body
        elif name == "triton":
            yield name + "_stream", "/v2/models/tiny_llm/generate_stream", body
        else:
            yield name + "_stream", path, {**body, "stream": True}


@pytest.mark.parametrize(("name", "path", "body"), list(_variants()), ids=[v[0] for v in _variants()])
def test_coordinator_answers_as_a_standard_instance(instances, gateway, name, path, body):
    coord = instances["coord"].url("mindie_http")
    got = requests.post(coord + path, json=body, timeout=30)
    want = requests.post(gateway.url("mindie_http") + path, json=body, timeout=30)
    assert got.status_code == want.status_code == 200
    assert got.headers["content-type"].split(";")[0] == want.headers["content-type"].split(";")[0]
    assert normalise(got.content) == normalise(want.content)


def test_coordinator_forwards_p_validation_errors_unchanged(instances, gateway):
    coord = instances["coord"].url("mindie_http")
    body = {"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}], "top_p": 1.5}
    got = requests.post(coord + "/v1/chat/completions", json=body)
    want = requests.post(gateway.url("mindie_http") + "/v1/chat/completions", json=body)
    assert (got.status_code, got.content) == (want.status_code, want.content) == (422, want.content)


def test_coordinator_with_the_openai_sdk(instances, gateway):
    with openai.OpenAI(base_url=instances["coord"].url("mindie_http") + "/v1", api_key="x", max_retries=0) as via, \
            openai.OpenAI(base_url=gateway.url("mindie_http") + "/v1", api_key="x", max_retries=0) as ref:
        msgs = [{"role": "user", "content": "Tell me a story"}]
        a = via.chat.completions.create(model="llama2_7b", messages=msgs, max_tokens=12, seed=5)
        b = ref.chat.completions.create(model="llama2_7b", messages=msgs, max_tokens=12, seed=5)
        assert a.choices[0].message.content == b.choices[0].message.content and a.usage == b.usage
        sa = list(via.chat.completions.create(model="llama2_7b", messages=msgs, max_tokens=12, stream=True))
        sb = list(ref.chat.completions.create(model="llama2_7b", messages=msgs, max_tokens=12, stream=True))
        assert [c.choices[0].delta.content for c in sa] == [c.choices[0].delta.content for c in sb]
        assert sa[-1].usage == sb[-1].usage and sa[-1].usage.completion_tokens > 1
        assert sa[-1].choices[0].finish_reason == sb[-1].choices[0].finish_reason
        ca = list(via.completions.create(model="tiny_llm", prompt="Once upon a time", max_tokens=50, stream=True))
        cb = ref.completions.create(model="tiny_llm", prompt="Once upon a time", max_tokens=50)
        assert "".join(c.choices[0].text for c in ca) == cb.choices[0].text


def test_coordinator_with_the_tgi_client(instances, gateway):
    via = Client(instances["coord"].url("mindie_http"), timeout=30)
    ref = Client(gateway.url("mindie_http"), timeout=30)
    a = via.generate("My name is Olivier and I", max_new_tokens=7, seed=12)
    b = ref.generate("My name is Olivier and I", max_new_tokens=7, seed=12)
    assert a.generated_text == b.generated_text and a.details.seed == 12
    assert a.details.tokens == b.details.tokens
    sa = [r.token.text for r in via.generate_stream("My name is Olivier and I", max_new_tokens=7)]
    sb = [r.token.text for r in ref.generate_stream("My name is Olivier and I", max_new_tokens=7)]
    assert sa == sb and len(sa) == 7  # one event per token, as MindIE's TGI family


def test_coordinator_spreads_load_and_relays_p_before_d(instances):
    coord = instances["coord"].url("mindie_http")
    body = {"prompt": "spread", "max_tokens": 10, "stream": True}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: requests.post(coord + "/generate", json=body, timeout=30).content, range(4)))
    assert len(set(outs)) == 1 and outs[0].count(b"\0") == 10
    metrics = requests.get(instances["coord"].url("admin_http") + "/metrics").text
    for inst in ("p1", "p2", "d1", "d2"):
        assert f'instance="127.0.0.1:{instances[inst].port("mindie_http")}"' in metrics
    assert 'pd_handoff_seconds_count{role="coordinator"}' in metrics


def test_coordinator_refuses_over_its_request_limit_with_plain_text(instances):
    coord = instances["coord"].url("mindie_http")
    body = {"prompt": "busy", "max_tokens": 40, "stream": True}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(requests.post, coord + "/generate", json=body, timeout=30) for _ in range(4)]
        time.sleep(0.25)
        r = requests.post(coord + "/generate", json=body, timeout=30)
        assert all(f.result().status_code == 200 for f in running)
    assert r.status_code == 429 and r.content == b"Too many requests\r\n"
    assert r.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("model", ["tiny_llm", "llama2_7b"])
def test_coordinator_serves_token_inference_as_a_standard_instance(instances, gateway, model):
    body = {"id": "t1", "inputs": [{"name": "input0", "shape": [1, 3], "datatype": "UINT32", "data": [4, 5, 6]}],
            "outputs": [{"name": "output0"}], "parameters": {"max_new_tokens": 6}}
    got = requests.post(instances["coord"].url("mindie_http") + f"/v2/models/{model}/infer", json=body, timeout=30)
    want = requests.post(gateway.url("mindie_http") + f"/v2/models/{model}/infer", json=body, timeout=30)
    assert got.status_code == want.status_code == 200
    assert got.headers["content-type"] == want.headers["content-type"] == "application/json"
    assert got.content == want.content and len(want.json()["outputs"][0]["data"]) == 6


def test_p_serves_every_route_the_coordinator_forwards(instances):
    """Each MindIE-MS user route reaches a P route (a 422 for an empty body), none is P's 404."""
    from gateway.dialects.mindie.pd.coordinator import USER_ROUTES

    p1 = instances["p1"].url("mindie_http")
    pd = {"req-id": "77", "req-type": "prefill", "d-target": f"127.0.0.1;{instances['d1'].port('mindie_http')}"}
    paths = [*USER_ROUTES, *(f"/v2/models/tiny_llm/{s}" for s in ("generate", "generate_stream", "infer"))]
    for path in paths:
        r = requests.post(p1 + path, json={}, headers=pd, timeout=30)
        assert r.status_code == 422 and r.json()["error_type"] == "Input Validation Error", path


def test_coordinator_routes_are_mindie_ms_ones(instances):
    coord = instances["coord"].url("mindie_http")
    assert requests.get(coord + "/v1/models").status_code == 404
    assert requests.get(coord + "/health").status_code == 200


def _metric(gw, name: str, instance: str) -> float | None:
    text = requests.get(gw.url("admin_http") + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f'{name}{{instance="{instance}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_taken_over_d_leaves_the_rotation_and_the_coordinator_does_not_fight(instances):
    coord, d1 = instances["coord"], instances["d1"]
    d1_addr = f"127.0.0.1:{d1.port('mindie_http')}"
    taken_before = _metric(coord, "pd_dresult_taken_over_total", d1_addr) or 0.0
    reader = DResultReader(d1.url("mindie_http"))  # an operator reads D1's /dresult: it takes the link over
    try:
        deadline = time.monotonic() + 10
        while _metric(coord, "pd_dresult_taken_over_total", d1_addr) != taken_before + 1:
            assert time.monotonic() < deadline, requests.get(coord.url("admin_http") + "/metrics").text
            time.sleep(0.05)
        assert _metric(coord, "pd_decode_in_rotation", d1_addr) == 0.0
        for i in range(4):  # every request goes to D2 meanwhile, and finishes
            r = requests.post(coord.url("mindie_http") + "/generate_stream", timeout=30,
                              json={"inputs": f"while d1 is away {i}", "parameters": {"max_new_tokens": 4}})
            assert r.status_code == 200 and b"error" not in r.content and b'"generated_text":"' in r.content
        assert reader.status == 200 and not reader.ended.is_set()
        assert not [x for x in reader.records if x.kind == "close"]  # the coordinator did not take it back
        assert f"another client took over the /dresult link to D {d1_addr}; D is out of rotation" in \
            coord.log_path.read_text()
    finally:
        reader.close()
    deadline = time.monotonic() + 30  # the back-off (5 s) over, the coordinator links D1 again
    while _metric(coord, "pd_decode_in_rotation", d1_addr) != 1.0:
        assert time.monotonic() < deadline, coord.log_tail()
        time.sleep(0.2)


# -- failures: a D that goes away, a D that asks for a recompute ------------------------------------

def test_d_killed_mid_stream_is_a_clean_error_and_non_stream_is_retried(triton, tmp_path_factory, instances, gateway):
    """ds[0] and ds[1] reach Triton through proxies that hold each generation after a few tokens, so
    each is killed mid-generation whatever the machine's load (tiny_llm would end in ~360 ms)."""
    port = int(triton.grpc_target.rpartition(":")[2])
    proxies = [TcpProxy(port), TcpProxy(port)]
    ds = [start_role(triton.grpc_target, tmp_path_factory.mktemp(f"dk{i}"), {"role": "decode"},
                     triton=f"127.0.0.1:{proxy.port}") for i, proxy in enumerate(proxies)]
    ds.append(start_role(triton.grpc_target, tmp_path_factory.mktemp("dk2"), {"role": "decode"}))
    coord = None
    try:
        p = f"127.0.0.1:{instances['p1'].port('mindie_http')}"
        coord = start_role(triton.grpc_target, tmp_path_factory.mktemp("ck"), {
            "role": "coordinator", "prefill": [p], "decode": [f"127.0.0.1:{d.port('mindie_http')}" for d in ds]})
        url = coord.url("mindie_http")
        wait_ready(url)
        proxies[0].hold("/ModelStreamInfer", 3)
        proxies[1].hold("/ModelStreamInfer", 0)  # non-stream: one answer, the whole text
        # stream: goes to ds[0] (least loaded, first); killed once D's tokens reach the user, D held
        with requests.post(url + "/v1/completions", json={"model": "tiny_llm", "prompt": "a long story",
                                                          "max_tokens": 24, "stream": True}, stream=True, timeout=30) as r:
            chunks = r.iter_content(None)
            got = b""
            while got.count(b"\n\n") < 3:  # P's two events (role, first token), then one of D's
                got += next(chunks)
            assert proxies[0].held.wait(20)
            ds[0].proc.kill()
            started = time.monotonic()
            for c in chunks:
                got += c
        assert time.monotonic() - started < 10
        events = [e for e in got.split(b"\n\n") if e]
        last = orjson.loads(events[-1][len(b"data: "):])
        assert last["error_type"] == "Incomplete Generation" and "went away" in last["error"]
        assert b"[DONE]" not in got
        # non-stream: goes to ds[1]; killed mid-generation (held), sent again to ds[2], same answer
        body = {"model": "tiny_llm", "prompt": "a long story", "max_tokens": 24}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(requests.post, url + "/v1/completions", json=body, timeout=30)
            assert proxies[1].held.wait(20)
            ds[1].proc.kill()
            r = fut.result()
        want = requests.post(gateway.url("mindie_http") + "/v1/completions", json=body)
        assert r.status_code == 200 and normalise(r.content) == normalise(want.content)
        metrics = requests.get(coord.url("admin_http") + "/metrics").text
        assert 'pd_retries_total{reason="d_lost"} 2.0' in metrics  # one per kill: the stream's, the retry's
    finally:
        for g in ds + ([coord] if coord else []):
            stop_gateway(g)
        for proxy in proxies:
            proxy.cut()


def test_d_that_loses_triton_asks_for_a_recompute_and_another_d_finishes(triton, tmp_path_factory, instances,
                                                                           gateway):
    proxy = TcpProxy(int(triton.grpc_target.rpartition(":")[2]))
    bad = start_role(triton.grpc_target, tmp_path_factory.mktemp("dbad"), {"role": "decode"},
                     triton=f"127.0.0.1:{proxy.port}")
    good = start_role(triton.grpc_target, tmp_path_factory.mktemp("dgood"), {"role": "decode"})
    coord = None
    try:
        p = f"127.0.0.1:{instances['p2'].port('mindie_http')}"
        coord = start_role(triton.grpc_target, tmp_path_factory.mktemp("cr"), {
            "role": "coordinator", "prefill": [p],
            "decode": [f"127.0.0.1:{bad.port('mindie_http')}", f"127.0.0.1:{good.port('mindie_http')}"]})
        url = coord.url("mindie_http")
        wait_ready(url)
        proxy.cut()
        for path, body in (("/generate_stream", {"inputs": "recompute", "parameters": {"max_new_tokens": 8}}),
                           ("/v1/chat/completions", {"model": "tiny_llm", "max_tokens": 8, "temperature": 0.7,
                                                     "messages": [{"role": "user", "content": "again"}],
                                                     "stream": True})):
            got = requests.post(url + path, json=body, timeout=30).content
            assert b"error" not in got
            if "temperature" not in body:
                want = requests.post(gateway.url("mindie_http") + path, json=body).content
                assert normalise(got) == normalise(want)
            else:  # sampled without a seed: the recompute carries D's seed, so the text is one sample
                events = [orjson.loads(e[len(b"data: "):]) for e in got.split(b"\n\n") if e and e != b"data: [DONE]"]
                text = "".join(e["choices"][0]["delta"]["content"] for e in events)
                assert len(text.split()) == 8 and events[-1]["usage"]["completion_tokens"] == 8
        metrics = requests.get(coord.url("admin_http") + "/metrics").text
        assert "pd_retries_total{reason=\"retry\"} 2.0" in metrics
    finally:
        proxy.cut()
        for g in [bad, good] + ([coord] if coord else []):
            stop_gateway(g)


def test_p_without_pd_headers_is_refused_as_mindie_does(instances):
    body = {"prompt": "plain request", "max_tokens": 5, "stream": True}
    r = requests.post(instances["p1"].url("mindie_http") + "/generate", json=body)
    assert (r.status_code, r.content) == (
        400, b'{"error":"DMI request must have req-type, req-id, d-target headers","error_type":"Bad Request"}')


def test_p_without_pd_headers_serves_as_a_standard_instance_when_told(instances, gateway):
    body = {"prompt": "plain request", "max_tokens": 5, "stream": True}
    got = requests.post(instances["p3"].url("mindie_http") + "/generate", json=body).content  # serve_without_pd_headers
    assert got == requests.post(gateway.url("mindie_http") + "/generate", json=body).content


def test_short_prompts_are_not_disaggregated(triton, tmp_path_factory, instances, gateway):
    d = start_role(triton.grpc_target, tmp_path_factory.mktemp("dc"), {"role": "decode"})
    coord = None
    try:
        coord = start_role(triton.grpc_target, tmp_path_factory.mktemp("cc"), {
            "role": "coordinator", "prefill": [f"127.0.0.1:{instances['p2'].port('mindie_http')}"],
            "decode": [f"127.0.0.1:{d.port('mindie_http')}"], "standard": [f"127.0.0.1:{gateway.port('mindie_http')}"],
            "min_pd_prompt_chars": 12})
        url = coord.url("mindie_http")
        wait_ready(url)
        for prompt in ("short", "a prompt long enough to split"):
            for stream in (False, True):
                body = {"model": "tiny_llm", "prompt": prompt, "max_tokens": 6, "stream": stream}
                got = requests.post(url + "/v1/completions", json=body, timeout=30)
                want = requests.post(gateway.url("mindie_http") + "/v1/completions", json=body, timeout=30)
                assert got.headers["content-type"].split(";")[0] == want.headers["content-type"].split(";")[0]
                assert normalise(got.content) == normalise(want.content)
        metrics = requests.get(coord.url("admin_http") + "/metrics").text
        assert 'pd_requests_total{path="alone"} 2.0' in metrics and 'pd_requests_total{path="pd"} 2.0' in metrics
    finally:
        for g in [d] + ([coord] if coord else []):
            stop_gateway(g)


def test_a_coordinator_with_an_ipv6_d_answers_end_to_end(triton, tmp_path_factory, instances, gateway):
    """Issue 43, item 4: D on ::1, named `[::1]:port` in the coordinator's list; the coordinator writes
    `d-target: ::1;port` as MindIE-MS writes an address, P hands off to it, D's records come back."""
    from gateway.dialects import LISTENERS
    from tests.pd_support import MINDIE
    from tests.support import free_port, gateway_config, start_gateway

    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton.grpc_target, ports, {"dialects": {"mindie": {**MINDIE, "pd": {"role": "decode"}}}})
    cfg["listeners"]["mindie_http"]["host"] = "::1"
    d = start_gateway(cfg, tmp_path_factory.mktemp("d6"))
    coord = None
    try:
        coord = start_role(triton.grpc_target, tmp_path_factory.mktemp("c6"), {
            "role": "coordinator", "prefill": [f"127.0.0.1:{instances['p1'].port('mindie_http')}"],
            "decode": [f"[::1]:{d.port('mindie_http')}"]})
        url = coord.url("mindie_http")
        wait_ready(url)
        for stream in (True, False):
            body = {"model": "tiny_llm", "prompt": "across IPv6", "max_tokens": 6, "stream": stream}
            got = requests.post(url + "/v1/completions", json=body, timeout=30)
            want = requests.post(gateway.url("mindie_http") + "/v1/completions", json=body, timeout=30)
            assert got.status_code == 200
            assert normalise(got.content) == normalise(want.content)
    finally:
        for g in [d] + ([coord] if coord else []):
            stop_gateway(g)
