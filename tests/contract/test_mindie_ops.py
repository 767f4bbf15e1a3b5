"""MindIE as it is deployed (issue 43): stopInfer and slots across workers, the operations routes,
the management routes MindIE-MS's controller reads, and /stopService stopping the worker set.

Expected bodies come from MindIE Server's ``http_handler.cpp`` / ``dmi_role.cpp`` (Ascend/MindIE-LLM)
and MindIE-Motor's coordinator; see gateway/dialects/mindie/ops.py and management.py.
"""

from __future__ import annotations

import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from gateway.dialects import LISTENERS
from tests.pd_support import MINDIE
from tests.support import free_port, gateway_config, start_gateway, stop_gateway
from tests.triton_proxy import TcpProxy

FRESH = {"Connection": "close"}  # a new connection each: the kernel spreads them over the workers
LIMIT = 64  # limits.max_inflight per worker
LONGEST = 24  # tiny_llm's longest reply (tokens), about 360 ms


def long_prompts(n: int) -> list[str]:
    """Prompts tiny_llm answers with its longest reply (its natural length is 8 + crc32 % 17)."""
    out = (f"stop me {i}" for i in range(10_000))
    return [p for p in out if zlib.crc32(p.encode()) % 17 == 16][:n]


@pytest.fixture(scope="module")
def two(triton, tmp_path_factory):
    """Two workers whose generations hold after their first token (tests/triton_proxy.py): Triton
    generates on, the gateway sees no more, so only a stop ends them, however loaded the machine."""
    proxy = TcpProxy(int(triton.grpc_target.rpartition(":")[2]))
    proxy.hold("/ModelStreamInfer", 1)
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(f"127.0.0.1:{proxy.port}", ports, {"workers": 2, "limits": {"max_inflight": LIMIT},
                                                            "dialects": {"mindie": MINDIE}})
    gw = start_gateway(cfg, tmp_path_factory.mktemp("mindie-two"))
    yield gw
    if gw.proc.poll() is None:
        stop_gateway(gw)
    proxy.cut()


class Stream(threading.Thread):
    """One Triton generate_stream with a client ``id``, read event by event in a thread."""

    def __init__(self, base: str, rid: str, prompt: str, tokens: int = LONGEST, stop: bool = False):
        super().__init__(daemon=True)
        self.base, self.rid, self.prompt, self.tokens, self.stop = base, rid, prompt, tokens, stop
        self.events = 0
        self.started = threading.Event()
        self.ended = threading.Event()
        self.stopped: requests.Response | None = None

    def run(self):
        body = {"id": self.rid, "text_input": self.prompt, "parameters": {"max_new_tokens": self.tokens}}
        with requests.post(self.base + "/v2/models/tiny_llm/generate_stream", json=body, stream=True,
                           headers=FRESH, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith(b"data:"):
                    self.events += 1
                    self.started.set()
                    if self.stop and self.stopped is None:  # at its first token, from a new connection
                        self.stopped = requests.post(self.base + "/v2/models/tiny_llm/stopInfer", timeout=10,
                                                     json={"id": self.rid}, headers=FRESH)
        self.ended.set()


def test_ten_stopinfers_from_new_connections_stop_ten_generations(two):
    base = two.url("mindie_http")
    streams = [Stream(base, f"stop-{i}", p, stop=True) for i, p in enumerate(long_prompts(10))]
    for s in streams:
        s.start()
    workers = set()
    for s in streams:
        assert s.ended.wait(30), f"{s.rid} still streams after stopInfer"
        r = s.stopped
        assert r is not None and (r.status_code, r.content) == (200, b'{"id":"%s"}' % s.rid.encode())
        workers.add(r.headers["X-Request-Id"].split("-")[0])
        assert s.events < LONGEST  # it ended where it was (held after its first token: only the stop ends it)
    assert len(workers) == 2  # the stops landed on both workers, and each found its generation
    r = requests.post(base + "/v2/models/tiny_llm/stopInfer", json={"id": "stop-0"}, headers=FRESH, timeout=10)
    assert (r.status_code, r.content) == (
        404, b'{"error":"RequestId is stop-0 not found.","error_type":"NotFoundError"}')


def test_get_slot_count_sums_both_workers(two):
    base = two.url("mindie_http")
    seen = set()
    for _ in range(12):
        r = requests.get(base + "/v2/models/tiny_llm/getSlotCount", headers=FRESH, timeout=10)
        assert r.status_code == 200
        seen.add(r.content)
    max_tokens = 512
    assert seen == {b'{"total_slots":%d,"free_slots":%d,"available_tokens_length":%d}'
                    % (2 * LIMIT, 2 * LIMIT, 2 * LIMIT * max_tokens)}


def test_getslotcount_counts_a_generation_on_the_other_worker(two):
    base = two.url("mindie_http")
    s = Stream(base, "slot-holder", long_prompts(1)[0])
    s.start()
    assert s.started.wait(30)
    try:
        def ask(path: str) -> dict:
            return requests.get(base + path, headers=FRESH, timeout=10).json()

        with ThreadPoolExecutor(8) as pool:  # whichever worker answers, the generation is one slot taken
            slots = list(pool.map(ask, ["/v2/models/tiny_llm/getSlotCount"] * 4 + ["/v1/status"] * 4))
        assert not s.ended.is_set()  # still running when they answered
        assert [x["free_slots"] for x in slots[:4]] == [2 * LIMIT - 1] * 4
        assert [x["resource"]["runningRequestNum"] for x in slots[4:]] == [1] * 4
        assert [x["resource"]["availSlotsNum"] for x in slots[4:]] == [2 * LIMIT - 1] * 4
    finally:
        requests.post(base + "/v2/models/tiny_llm/stopInfer", json={"id": "slot-holder"}, timeout=10)
        s.ended.wait(20)


def test_tokenizer(gateway):
    url = gateway.url("mindie_http") + "/v1/tokenizer"
    r = requests.post(url, json={"inputs": "My name is Olivier"})
    assert r.status_code == 200
    got = r.json()
    assert list(got) == ["token_number", "tokens"]
    assert got["token_number"] == 4 and len(got["tokens"]) == 4  # tiny_llm's tokens are words
    for body, text in ((b"{", "Req body converts to json fail."), (b'{"inputs": 5}', "Inputs in request body is invalid."),
                       (b'{"inputs": ""}', "Inputs data length in [0, 41943040], but the length of inputs is 0")):
        r = requests.post(url, data=body)
        assert (r.status_code, r.content) == (
            422, b'{"error":"%s","error_type":"Input Validation Error"}' % text.encode())


def test_health_timed(gateway):
    base = gateway.url("mindie_http")
    for path in ("/health/timed", "/health/timed-5"):
        r = requests.get(base + path)
        assert (r.status_code, r.content) == (200, b'{"status":"healthy"}')
    r = requests.get(base + "/health/timed-0")
    assert (r.status_code, r.content) == (
        404, b'{"error":"Wait time should be in range of [1, 600], input is not valid","error_type":"NotFoundError"}')
    r = requests.get(base + "/health/timed-6000")
    assert (r.status_code, r.content) == (
        404, b'{"error":"Max wait time is 600, input is invalid or too long","error_type":"NotFoundError"}')


def test_metrics_json(gateway):
    base = gateway.url("mindie_http")
    requests.post(base + "/generate", json={"inputs": "warm", "parameters": {"max_new_tokens": 3}})
    r = requests.get(base + "/metrics-json")
    assert r.status_code == 200
    got = r.json()
    port = gateway.port("mindie_http")
    names = [row["metric"][0]["__name__"] for row in got["result"]]
    assert got["resultType"] == "vector"
    assert names == ["TTFT", "TBT", "waitingInferRequestNum", "processingInferRequestNum", "remainBlocks"]
    for row in got["result"]:
        assert row["metric"] == [{"__name__": row["metric"][0]["__name__"], "job": "node",
                                  "instance": f"127.0.0.1:{port}"}]
        assert isinstance(row["value"], str)
    assert float(got["result"][0]["value"]) > 0  # the generation above had a first token


def test_management_routes_on_a_standard_instance(gateway):
    base = gateway.url("mindie_http")
    r = requests.get(base + "/v1/config")
    assert r.content == (b'{"modelName":"tiny_llm","maxSeqLen":512,"npuMemSize":-1,"cpuMemSize":0,"worldSize":1,'
                         b'"maxOutputLen":512,"cacheBlockSize":128}')
    st = requests.get(base + "/v1/status").json()
    assert st["service"] == {"roleStatus": "RoleReady", "currentRole": "none"}
    assert list(st["resource"]) == ["availSlotsNum", "availBlockNum", "waitingRequestNum", "runningRequestNum",
                                    "swappedRequestNum", "freeNpuBlockNums", "freeCpuBlockNums",
                                    "totalNpuBlockNums", "totalCpuBlockNums"]
    assert st["linkStatus"] == {"peers": []}
    v2 = requests.get(base + "/v2/status").json()
    assert list(v2["resource"])[-4:] == ["totalAvailNpuSlotsNum", "totalAvailNpuBlockNum", "dpInstMap",
                                         "maxAvailNpuBlockNum"]
    r = requests.post(base + "/v1/role/prefill", json={})
    assert (r.status_code, r.content) == (200, b'{"result":"Can\'t assign DMI role because status is switching."}')
    r = requests.get(base + "/dresult")
    assert (r.status_code, r.content) == (
        400, b'{"error":"Non DMI does not support dresult request","error_type":"Bad Request"}')


def test_stop_service_force_stops_generations_and_the_worker_set(two):
    """Last in this module: it stops the two-worker gateway."""
    base = two.url("mindie_http")
    s = Stream(base, "to-force", long_prompts(1)[0])
    s.start()
    assert s.started.wait(30)
    r = requests.get(base + "/stopService?mode=Force", headers=FRESH, timeout=30)
    assert (r.status_code, r.content) == (200, b"")
    assert s.ended.wait(20) and s.events < LONGEST
    deadline = time.monotonic() + 30
    while two.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert two.proc.poll() is not None  # the supervisor and both workers are gone, as after SIGTERM


def test_stop_service_waits_for_running_generations_then_stops(triton, tmp_path_factory):
    """Graceful: 200 (empty) once no generation runs, the running stream finished whole; then the
    gateway (one worker, no supervisor) stops as on SIGTERM; meanwhile the probes answer MindIE's 503."""
    ports = {name: free_port() for name in LISTENERS}
    gw = start_gateway(gateway_config(triton.grpc_target, ports, {"dialects": {"mindie": MINDIE}}),
                       tmp_path_factory.mktemp("mindie-stop"))
    try:
        base = gw.url("mindie_http")
        s = Stream(base, "graceful", long_prompts(1)[0])
        s.start()
        assert s.started.wait(30)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(requests.get, base + "/stopService", timeout=30)
            probe = requests.get(base + "/health", timeout=5)
            while probe.status_code == 200 and not answer.done():
                probe = requests.get(base + "/health", timeout=5)
            assert (probe.status_code, probe.content) == (
                503, b'{"error":"The service has been stopped.","error_type":"Service Unavailable"}')
            r = answer.result()
        assert (r.status_code, r.content) == (200, b"")
        assert s.ended.wait(5) and s.events == LONGEST  # it ran to its end before the answer
        deadline = time.monotonic() + 30
        while gw.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gw.proc.poll() == 0
    finally:
        if gw.proc.poll() is None:
            stop_gateway(gw)
