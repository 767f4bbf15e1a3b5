"""PD pieces without Triton: /dresult records, P header checks, the pd config, the hub, the profile split."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from gateway import config
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.mindie.config import MindieConfig
from gateway.dialects.mindie.pd import headers as pdh
from gateway.dialects.mindie.pd import records as rec
from gateway.dialects.mindie.pd.config import PdConfig
from gateway.dialects.mindie.pd.coordinator import inband_error, prompt_chars
from gateway.dialects.mindie.pd.instance import DResultHub
from gateway.llm import profiles
from gateway.llm.pd import Resume
from gateway.llm.types import GenerateRequest
from gateway.settings import SettingsError

# -- records -----------------------------------------------------------------------------------------


def test_record_framing_is_mindies():
    assert rec.record("12", "data", b"data: {}\n\n") == b"reqId:12\0data:data: {}\n\n\0"
    assert rec.close_record() == b"reqId:0xffffffffffffffff\0close:new connection is to established, close the old one.\0"
    assert rec.HEARTBEAT == b"ka:heartbeat\0"


def test_parser_keeps_a_vllm_bodys_own_nul_and_reads_every_kind():
    chunk = (rec.record("89", "lastData", b'{"text":["a"]}\0') + rec.HEARTBEAT + rec.record("7", "retry", b"{}")
             + rec.record("8", "error", b"boom"))
    got = rec.parse_chunk(chunk)
    assert got == [rec.Record("89", "lastData", b'{"text":["a"]}\0'), rec.Record("", "ka", b"heartbeat"),
                   rec.Record("7", "retry", b"{}"), rec.Record("8", "error", b"boom")]


def test_parser_resets_req_id_per_chunk_and_ignores_unknown_keys():
    assert rec.parse_chunk(b"data:orphan\0") == [rec.Record("", "data", b"orphan")]
    assert rec.parse_chunk(b"reqId:1\0what:x\0data:y\0") == [rec.Record("1", "data", b"y")]


def test_round_trip_of_bodies_with_colons_and_newlines():
    body = b'data: {"a":"b:c"}\n\ndata: [DONE]\n\n'
    assert rec.parse_chunk(rec.record("1", "lastData", body)) == [rec.Record("1", "lastData", body)]


# -- P headers ---------------------------------------------------------------------------------------

GOOD = {"req-id": "12345", "req-type": "prefill", "d-target": "172.17.0.9"}


def test_good_headers_with_and_without_port():
    h = pdh.check(GOOD, 1025)
    assert (h.req_id, h.d_host, h.d_port, h.recompute) == ("12345", "172.17.0.9", 1025, False)
    h = pdh.check({**GOOD, "d-target": "127.0.0.1;3025", "is-recompute": "true"}, 1025)
    assert (h.d_host, h.d_port, h.recompute) == ("127.0.0.1", 3025, True)


def test_ipv6_d_target_as_mindie_ms_writes_it():
    """MindIE-MS writes ``decodeIp + ";" + interCommPort``: a bare IPv6 address (issue 43, item 4)."""
    for target in ("::1;3025", "[::1];3025"):
        h = pdh.check({**GOOD, "d-target": target}, 1025)
        assert (h.d_host, h.d_port) == ("::1", 3025)


def test_d_port_names_the_hand_off_port_beside_the_inter_comm_port():
    """MindIE-MS sends ``d-target: <ip>;<interCommPort>`` and ``d-port: <D's HTTP port>``
    (RequestRepeater.cpp PDRouteHandler): the hand-off (HTTP) goes to d-port."""
    h = pdh.check({**GOOD, "d-target": "10.0.0.3;1121", "d-port": "1025"}, 9)
    assert (h.d_host, h.d_port) == ("10.0.0.3", 1025)
    mapped = pdh.check({**GOOD, "d-target": "10.0.0.3;1121"}, 9, {"10.0.0.3;1121": "decode-0.pd:3025"})
    assert (mapped.d_host, mapped.d_port) == ("decode-0.pd", 3025)
    assert (pdh.check({**GOOD, "d-target": "10.0.0.3;1121"}, 9).d_port) == 1121  # the gateway's coordinator


@pytest.mark.parametrize(("change", "message"), [
    ({"req-id": None}, "DMI request must have req-type, req-id, d-target headers"),
    ({"req-id": "0x12"}, "Invalid req-id, the character of req-id should be hex char [0-9, a-f, A-F], but got 0x12"),
    ({"req-type": "Prefill"}, "Parameter req-type must be prefill but got Prefill"),
    ({"d-target": "300.1.2.3"}, "Parameter d-target must be an IPv4 address"),
    ({"d-target": "::g;3025"}, "Parameter d-target must be an IPv4 address"),
    ({"d-target": "1.2.3.4;x"}, "Parameter d-target must be an IPv4 address"),
    ({"is-recompute": "True"}, "Parameter is-recompute is an optional parameter. When it is set, it must be true or false."),
])
def test_bad_headers(change, message):
    headers = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(pdh.BadPdRequest) as e:
        pdh.check(headers, 1025)
    assert str(e.value) == message


def test_req_id_of_1024_hex_chars_is_fine_and_1025_is_not():
    assert pdh.check({**GOOD, "req-id": "f" * 1024}, 1).req_id == "f" * 1024
    with pytest.raises(pdh.BadPdRequest, match="cannot exceed 1024"):
        pdh.check({**GOOD, "req-id": "f" * 1025}, 1)


# -- config ------------------------------------------------------------------------------------------


def test_pd_config_defaults_and_strictness():
    assert MindieConfig.model_validate({}).pd == PdConfig()
    assert PdConfig().role == "standard" and PdConfig().heartbeat_s == 5.0
    cfg = MindieConfig.model_validate({"pd": {"role": "coordinator", "prefill": ["127.0.0.1:2025"],
                                     "decode": ["127.0.0.1:3025"], "min_pd_prompt_chars": 16}}).pd
    assert cfg.prefill == ("127.0.0.1:2025",) and cfg.min_pd_prompt_chars == 16
    with pytest.raises(ValidationError):
        cfg.role = "decode"  # frozen
    for bad in ({"role": "flex"}, {"heartbeat_s": "5"}, {"unknown": 1}, {"role": "coordinator"},
                {"decode": ["no-port"]}, {"trusted_peers": ["not a host"]}, {"decode": ["d_0:3025"]},
                {"tls": {"cert_file": "/nonexistent.pem"}}, {"tls": {"ca_file": "/nonexistent.pem"}}):
        with pytest.raises(SettingsError, match="dialects.mindie.pd"):
            config.load(None, env={"GATEWAY__DIALECTS__MINDIE__PD": orjson.dumps(bad).decode()})


# -- coordinator helpers -----------------------------------------------------------------------------


def test_prompt_chars_of_every_family():
    assert prompt_chars(b'{"inputs": "abc"}') == 3
    assert prompt_chars(b'{"prompt": "abcd"}') == 4
    assert prompt_chars(b'{"text_input": "ab"}') == 2
    assert prompt_chars(b'{"messages": [{"role": "user", "content": "ab"}, {"content": "cd"}]}') == 4
    assert prompt_chars(b"not json") is None and prompt_chars(b"[]") is None


def test_inband_errors_use_the_familys_framing():
    assert inband_error("/generate", b'{"prompt": "x"}', "m").endswith(b"\0")
    assert inband_error("/generate", b'{"inputs": "x", "prompt": "y"}', "m").startswith(b"data: ")
    assert inband_error("/v2/models/m/generate_stream", b"{}", "m").startswith(b'data:{"error":"m"')


# -- D's hub -----------------------------------------------------------------------------------------


class FakeResponse:
    def __init__(self):
        self.sent: list[tuple[float, bytes]] = []
        self.ended = False

    async def send(self, data: bytes, end_stream: bool | None = None):
        self.sent.append((asyncio.get_running_loop().time(), data))

    async def eof(self):
        self.ended = True


class FakeRequest:
    def __init__(self):
        self.resp = FakeResponse()

    async def respond(self, **_kw):
        return self.resp


async def test_hub_queues_records_until_a_connection_and_heartbeats_when_idle():
    hub = DResultHub(heartbeat_s=0.05, max_pending=10)
    hub.push("1", rec.DATA, b"a")
    first = FakeRequest()
    task = asyncio.create_task(hub.serve(first))

    def payloads():
        return [d for _, d in first.resp.sent if d]

    async with asyncio.timeout(10):  # two heartbeats, however slow the machine: no fixed sleep
        while payloads().count(rec.HEARTBEAT) < 2:
            await asyncio.sleep(0.01)
    assert payloads()[0] == rec.record("1", rec.DATA, b"a")
    second = FakeRequest()
    task2 = asyncio.create_task(hub.serve(second))
    await asyncio.wait_for(task, 1)  # taken over: the old one ends with a close record
    assert first.resp.sent[-1][1] == rec.close_record() and first.resp.ended
    hub.push("2", rec.LAST, b"z")
    async with asyncio.timeout(10):
        while rec.record("2", rec.LAST, b"z") not in [d for _, d in second.resp.sent]:
            await asyncio.sleep(0.01)
    task2.cancel()


def test_hub_bounds_what_it_keeps_without_a_connection():
    hub = DResultHub(heartbeat_s=5, max_pending=2)
    for i in range(3):
        hub.push(str(i), rec.DATA, b"x")
    assert list(hub.pending) == [rec.record("1", rec.DATA, b"x"), rec.record("2", rec.DATA, b"x")]


# -- profile split and Resume ------------------------------------------------------------------------

META = ModelMetadata(name="m", versions=("1",), platform="python",
                     inputs=(TensorSpec("text_input", "BYTES", (-1, 1)), TensorSpec("max_tokens", "INT32", (-1, 1)),
                             TensorSpec("context_phase_params", "UINT8", (-1, -1))),
                     outputs=(TensorSpec("text_output", "BYTES", (-1, -1)),
                              TensorSpec("context_phase_params", "UINT8", (-1, -1))),
                     max_batch_size=8, decoupled=True)


def test_trtllm_profile_maps_phases_onto_disaggregated_requests():
    p = profiles.profile("trtllm")
    req = GenerateRequest(model="m", prompt="hi", max_tokens=4)
    ctx = p.encode_phase(req, "m", META, 1, profiles.CONTEXT_ONLY)
    assert ctx.parameters["request_type"] == "context_only"
    assert "context_phase_params" not in [t.name for t in ctx.inputs]
    gen = p.encode_phase(req, "m", META, 1, profiles.GENERATION_ONLY, b"\x01\x02\x03")
    assert gen.parameters["request_type"] == "generation_only"
    t = next(t for t in gen.inputs if t.name == "context_phase_params")
    assert t.datatype == "UINT8" and t.shape == (1, 3) and t.data.tobytes() == b"\x01\x02\x03"
    resp = InferResponse(model="m", version="1", outputs=[Tensor("text_output", np.array([[b" w"]], dtype=object), "BYTES"),
                                             Tensor("context_phase_params", np.array([[7, 8]], dtype=np.uint8))])
    chunk = p.decode(resp)
    assert chunk.text == " w" and chunk.context_phase_params == b"\x07\x08"
    with pytest.raises(Exception, match="context_phase_params"):
        p.encode_phase(req, "m", META, 1, profiles.GENERATION_ONLY, None)


def test_profiles_without_the_tensors_cannot_split():
    plain = ModelMetadata(name="m", versions=("1",), platform="python", inputs=META.inputs[:2],
                          outputs=META.outputs[:1], max_batch_size=8, decoupled=True)
    assert profiles.profile("trtllm").can_split(META) and not profiles.profile("trtllm").can_split(plain)
    assert not profiles.profile("vllm").can_split(META)


def test_resume_round_trips_through_json():
    r = Resume(seed=3, context_phase_params=b"\0\xff", raw=" a", shown=" a", pending="", n_in=None, n_out=None,
               elapsed_s=0.01, ttft_s=0.005)
    assert Resume.from_json(r.to_json()) == r


# -- keys between PD peers ---------------------------------------------------------------------------
def test_peer_api_key_file_is_checked_with_the_settings(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("# no key\n")
    for path, problem in ((tmp_path / "missing", "cannot read"), (empty, "holds no key")):
        with pytest.raises(SettingsError, match=problem):
            config.load(None, env={"GATEWAY__DIALECTS__MINDIE__PD__PEER_API_KEY_FILE": str(path)})
    key = tmp_path / "key"
    key.write_text("# the PD peers' key\ns3cret\n")
    assert PdConfig(peer_api_key_file=str(key)).peer_headers() == {"Authorization": "Bearer s3cret"}
    assert PdConfig().peer_headers() == {}


async def test_a_coordinator_sends_its_peer_key_to_d_and_p(tmp_path):
    """With keys on the P/D instances' listeners, the coordinator's calls (its /dresult link to each D,
    the requests it sends P) carry peer_api_key_file's key."""
    from aiohttp import web

    from gateway.app import Worker
    from tests.fakes import FakeUpstream, trtllm_meta
    from tests.support import free_port, worker_settings

    seen: list[tuple[str, str | None]] = []
    linked, done = asyncio.Event(), asyncio.Event()

    async def dresult(request):
        seen.append(("dresult", request.headers.get("Authorization")))
        linked.set()
        resp = web.StreamResponse()
        await resp.prepare(request)
        await done.wait()
        return resp

    async def prefill(request):
        seen.append(("prefill", request.headers.get("Authorization")))
        return web.json_response({"error": "stop here", "error_type": "x"}, status=400)

    app = web.Application()
    app.router.add_get("/dresult", dresult)
    app.router.add_post("/v1/completions", prefill)
    runner = web.AppRunner(app)
    await runner.setup()
    peer_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", peer_port).start()
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    port = free_port()
    w = Worker(worker_settings({"mindie_http": port}, "127.0.0.1:1", DIALECTS__MINDIE__PD__ROLE="coordinator",
                               DIALECTS__MINDIE__PD__PREFILL=f"['127.0.0.1:{peer_port}']",
                               DIALECTS__MINDIE__PD__DECODE=f"['127.0.0.1:{peer_port}']",
                               DIALECTS__MINDIE__PD__PEER_API_KEY_FILE=str(key)),
               upstream_factory=lambda _s: FakeUpstream(metas=[trtllm_meta("tiny_llm")]))
    await w.start()
    try:
        await asyncio.wait_for(linked.wait(), 10)
        from tests.support import http_call

        await asyncio.to_thread(http_call, f"http://127.0.0.1:{port}", "POST", "/v1/completions",
                                b'{"model": "tiny_llm", "prompt": "hi"}', {"Content-Type": "application/json"})
    finally:
        done.set()
        await w.stop(grace=0.1)
        await runner.cleanup()
    assert ("dresult", "Bearer s3cret") in seen
    assert ("prefill", "Bearer s3cret") in seen


# -- PD on real networks: host names and TLS ---------------------------------------------------------

def test_peers_are_named_by_address_or_host_name():
    from gateway.dialects.mindie.pd import peers

    assert all(peers.is_host(h) for h in ("127.0.0.1", "::1", "localhost", "decode-0.pd.svc.cluster.local", "d1."))
    assert not any(peers.is_host(h) for h in ("256.1.1.1", "1.2.3", "d_0", "-d", "a b", "x" * 254, ""))
    assert pdh.check({**GOOD, "d-target": "decode-0.pd;3025"}, 1025).d_host == "decode-0.pd"
    assert peers.base_url("decode-0.pd", 3025, None) == "http://decode-0.pd:3025"
    assert peers.base_url("::1", 3025, PdConfig.model_validate({}).tls or object()) == "https://[::1]:3025"
    cfg = PdConfig.model_validate({"role": "coordinator", "prefill": ["prefill-0.pd:1025"],
                                   "decode": ["decode-0.pd:1025", "[::1]:3025"]})
    assert cfg.decode == ("decode-0.pd:1025", "[::1]:3025")


async def test_trusted_peers_may_be_host_names():
    from gateway.dialects.mindie.pd.peers import TrustedPeers

    assert await TrustedPeers(["localhost"]).allows("127.0.0.1")
    assert await TrustedPeers(["10.0.0.1"]).allows("10.0.0.1")
    assert not await TrustedPeers(["10.0.0.1"]).allows("127.0.0.1")


async def test_d_workers_pass_records_to_the_worker_holding_dresult(tmp_path):
    from gateway.dialects.mindie.pd.fanin import Fanin

    a, b = DResultHub(5.0, 100), DResultHub(5.0, 100)
    a.fanin, b.fanin = Fanin(str(tmp_path), a, me=1), Fanin(str(tmp_path), b, me=2)
    await a.fanin.start()
    await b.fanin.start()
    try:
        a.push("1", rec.DATA, b"before any link")  # no owner yet: it waits where it was made
        await asyncio.sleep(0.05)
        assert list(a.pending) == [rec.record("1", rec.DATA, b"before any link")] and not b.pending
        b.current = object()  # b accepted /dresult (what DResultHub.serve does)
        await b.fanin.claim()
        a.push("1", rec.DATA, b"x")
        a.push("1", rec.LAST, b"y")
        for _ in range(1000):  # up to 10 s on a loaded machine
            if len(b.pending) == 3:
                break
            await asyncio.sleep(0.01)
        assert list(b.pending) == [rec.record("1", rec.DATA, b"before any link"), rec.record("1", rec.DATA, b"x"),
                                   rec.record("1", rec.LAST, b"y")]  # in order
        assert not a.pending
        a.current = object()  # now a accepts a /dresult: b's connection is told to close
        await a.fanin.claim()
        assert id(b.current) in b.replaced
        b.current = None  # b's serve loop ends: what it still holds goes to a
        b.fanin.kick()
        for _ in range(1000):  # up to 10 s on a loaded machine
            if len(a.pending) == 3:
                break
            await asyncio.sleep(0.01)
        assert [r.endswith(b"y\0") for r in a.pending] == [False, False, True] and not b.pending
    finally:
        await a.fanin.close()
        await b.fanin.close()


# -- the coordinator and P's isLastResp ---------------------------------------------------------------

_D_BODY = b'{"generated_text":" from D","details":null}'
_P_LAST = '{"generated_text":" from P","details":null}'


@pytest.mark.parametrize(("answer", "status", "want"), [
    # a MindIE P: its non-stream answer has no isLastResp; D's lastData is the answer, as with false
    ({"isStream": False}, 200, _D_BODY),
    ({"isStream": False, "isLastResp": False}, 200, _D_BODY),
    # ended on P: P's output is the answer, D is not waited for (it sends nothing here)
    ({"isStream": False, "isLastResp": True, "output": _P_LAST}, 200, _P_LAST.encode()),
    # a stream P that leaves it out: P's first chunk, then D's records
    ({"isStream": True, "output": "data:first\n\n"}, 200, b"data:first\n\n" + _D_BODY),
    ({"isStream": True, "isLastResp": True, "output": "data:all\n\n"}, 200, b"data:all\n\n"),
    # not a bool: a broken P, not a guess
    ({"isStream": False, "isLastResp": "false"}, 500, b"P instance error\r\n"),
])
async def test_the_coordinator_reads_is_last_resp_when_p_sends_it(answer, status, want):
    """A scripted P and D (aiohttp) behind an in-process coordinator: P's envelope decides whether
    the coordinator answers from P's ``output`` or waits for D's ``lastData``."""
    from aiohttp import web

    from gateway.app import Worker
    from tests.fakes import FakeUpstream, trtllm_meta
    from tests.support import free_port, http_call, worker_settings

    records: asyncio.Queue[bytes] = asyncio.Queue()
    linked = asyncio.Event()

    async def dresult(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        linked.set()
        while True:
            await resp.write(await records.get())

    async def prefill(request):
        rid = request.headers["req-id"]
        if not answer.get("isLastResp") and status == 200:  # the rest comes from D
            records.put_nowait(rec.record(rid, rec.LAST, _D_BODY))
        return web.Response(body=orjson.dumps({"reqId": rid, **answer}), content_type="application/json")

    app = web.Application()
    app.router.add_get("/dresult", dresult)
    app.router.add_post("/generate", prefill)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    peer_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", peer_port).start()
    port = free_port()
    w = Worker(worker_settings({"mindie_http": port}, "127.0.0.1:1", DIALECTS__MINDIE__PD__ROLE="coordinator",
                               DIALECTS__MINDIE__PD__PREFILL=f"['127.0.0.1:{peer_port}']",
                               DIALECTS__MINDIE__PD__DECODE=f"['127.0.0.1:{peer_port}']",
                               DIALECTS__MINDIE__PD__INFER_TIMEOUT_S="10"),
               upstream_factory=lambda _s: FakeUpstream(metas=[trtllm_meta("tiny_llm")]))
    await w.start()
    try:
        await asyncio.wait_for(linked.wait(), 10)
        body = orjson.dumps({"inputs": "hi", "stream": answer["isStream"]})
        got = await asyncio.to_thread(http_call, f"http://127.0.0.1:{port}", "POST", "/generate", body,
                                      {"Content-Type": "application/json"}, 15)
    finally:
        await w.stop(grace=0.1)
        await runner.cleanup()
    assert (got[0], got[2]) == (status, want)
