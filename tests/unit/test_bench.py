"""The benchmark's pure parts: wrk output, /proc arithmetic, percentiles and spreads, the report."""

from __future__ import annotations

import json
import os
import time

import pytest

from bench import cases, procstat, report, stats, wrk
from bench.run import (
    Budget,
    Settings,
    case_need,
    floor_ratios,
    plan_seconds,
    ratios,
    run_case,
    scaling_need,
    skipped_rows,
    summarise,
)

WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:8501/v1/models/saved_model_half_plus_three:predict
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.41ms    2.20ms  41.01ms   90.00%
    Req/Sec     1.82k   123.45     2.50k    80.00%
  Latency Distribution
     50%  812.00us
     75%    4.80ms
     90%    6.50ms
     99%    1.20s
  9112 requests in 5.01s, 1.60MB read
  Socket errors: connect 0, read 2, write 0, timeout 5
  Non-2xx or 3xx responses: 3
Requests/sec:   1818.76
Transfer/sec:    327.00KB
"""


# -- wrk ------------------------------------------------------------------------------------------
def test_wrk_output_is_parsed_with_units_and_errors():
    r = wrk.parse(WRK_OUTPUT)
    assert r.requests == 9112
    assert r.duration_s == pytest.approx(5.01)
    assert r.requests_per_s == pytest.approx(1818.76)
    assert r.latency_s == pytest.approx({"50": 812e-6, "75": 4.8e-3, "90": 6.5e-3, "99": 1.2})
    assert r.non_2xx == 3
    assert r.socket_errors == {"connect": 0, "read": 2, "write": 0, "timeout": 5}
    assert r.errors == 10


def test_wrk_output_without_errors_or_in_minutes():
    text = WRK_OUTPUT.replace("  Socket errors: connect 0, read 2, write 0, timeout 5\n", "") \
        .replace("  Non-2xx or 3xx responses: 3\n", "").replace("in 5.01s", "in 1.00m")
    r = wrk.parse(text)
    assert r.errors == 0 and r.duration_s == pytest.approx(60.0)


def test_wrk_output_without_latency_distribution_is_refused():
    text = WRK_OUTPUT[: WRK_OUTPUT.index("  Latency Distribution")] + WRK_OUTPUT[WRK_OUTPUT.index("  9112"):]
    with pytest.raises(wrk.WrkError, match="--latency"):
        wrk.parse(text)
    with pytest.raises(wrk.WrkError, match="request count"):
        wrk.parse("unable to connect to 127.0.0.1:1 Connection refused")


def test_lua_script_quotes_headers_without_opening_a_long_string(tmp_path):
    script = wrk.lua_script(tmp_path / "body.bin", {"Content-Type": "application/json",
                                                    "Inference-Header-Content-Length": "146"})
    assert 'wrk.headers[ [==[Content-Type]==] ] = [==[application/json]==]' in script
    assert "wrk.headers[[" not in script  # "[[" starts a Lua long string: a syntax error wrk only warns about
    assert f'io.open([==[{tmp_path / "body.bin"}]==], "rb")' in script
    with pytest.raises(ValueError):
        wrk.lua_script(tmp_path / "x]==]y", {})


def test_wrk_refuses_anything_but_loopback(tmp_path):
    with pytest.raises(wrk.WrkError, match="127.0.0.1"):
        wrk.run("http://example.com/", tmp_path / "s.lua", 1, 1)


# -- /proc ----------------------------------------------------------------------------------------
def _stat_line(pid, comm, ppid, pgrp, utime, stime, start=1000):
    # fields 3..22: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    #               cutime cstime priority nice threads itrealvalue starttime
    return (f"{pid} ({comm}) S {ppid} {pgrp} {pgrp} 0 -1 4194560 100 0 0 0 {utime} {stime} "
            f"7 8 20 0 1 0 {start} 123456 789 18446744073709551615\n")


def test_stat_parsing_survives_spaces_and_parentheses_in_the_name():
    s = procstat.parse_stat(_stat_line(42, "tritonserver (x) y", 7, 40, 150, 50, start=99))
    assert (s.pid, s.comm, s.ppid, s.pgrp, s.ticks, s.start) == (42, "tritonserver (x) y", 7, 40, 200, 99)


def _fake_proc(tmp_path, rows):
    for pid, ppid, pgrp, utime, stime in rows:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat_line(pid, "python3", ppid, pgrp, utime, stime))
    (tmp_path / "self").mkdir()  # not a pid: ignored
    return tmp_path


def test_tree_group_and_ticks_from_a_fake_proc(tmp_path):
    proc = _fake_proc(tmp_path, [(10, 1, 10, 5, 5), (11, 10, 10, 100, 20), (12, 11, 10, 30, 0),
                                 (20, 1, 20, 1000, 1000), (21, 20, 10, 1, 1)])
    assert procstat.process_tree(10, proc) == [10, 11, 12]
    assert procstat.process_group(10, proc) == [10, 11, 12, 21]
    assert procstat.ticks([10, 11, 12], proc) == 160
    assert procstat.ticks([10, 999], proc) == 10  # a process that is gone counts nothing


def test_cpu_per_request_arithmetic():
    # 200 ticks at 100 Hz = 2 s of CPU over 1000 requests = 2000 µs each
    assert procstat.us_per_request(50, 250, 1000, hz=100) == pytest.approx(2000.0)
    assert procstat.us_per_request(50, 50, 10, hz=100) == 0.0
    assert procstat.us_per_request(0, 10, 0, hz=100) is None
    with pytest.raises(ValueError):
        procstat.us_per_request(10, 9, 5, hz=100)


def test_status_memory_lines():
    text = "Name:\tpython3\nVmHWM:\t  475136 kB\nVmRSS:\t  312320 kB\nThreads:\t5\n"
    assert procstat.parse_status_kib(text, "VmRSS") == 312320
    assert procstat.parse_status_kib(text, "VmHWM") == 475136
    assert procstat.parse_status_kib(text, "VmSwap") is None


def test_own_process_is_read_from_the_real_proc():
    me = procstat.read_stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.pgrp == os.getpgrp()
    assert procstat.memory_kib(os.getpid())["rss_kib"] > 0


# -- percentiles and spreads ---------------------------------------------------------------------
def test_nearest_rank_percentiles():
    values = list(range(100, 0, -1))  # unsorted on purpose
    assert stats.percentile(values, 50) == 50
    assert stats.percentile(values, 99) == 99
    assert stats.percentile(values, 100) == 100
    assert stats.percentile(values, 0) == 1
    assert stats.percentile([3.0], 99) == 3.0
    assert stats.percentile([1, 2, 3, 4], 50) == 2
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1], 101)


def test_spread_over_repeats_skips_missing_values():
    s = stats.spread([30.0, None, 10.0, 20.0])
    assert (s.median, s.min, s.max, s.n) == (20.0, 10.0, 30.0, 3)
    assert stats.spread([None, None]) is None
    assert stats.spread([4.0, 1.0]).median == 2.5


def test_ratio_is_gateway_over_direct():
    assert stats.ratio(stats.Spread(500, 0, 0, 1), stats.Spread(2000, 0, 0, 1)) == 0.25
    assert stats.ratio(None, stats.Spread(1, 1, 1, 1)) is None
    assert stats.ratio(stats.Spread(1, 1, 1, 1), stats.Spread(0, 0, 0, 1)) is None


def test_summaries_and_ratios_of_runs():
    direct = summarise([{"req_per_s": 1000.0, "p50_ms": 1.0}, {"req_per_s": 1200.0, "p50_ms": 1.2},
                        {"req_per_s": 1100.0, "p50_ms": None}])
    gateway = summarise([{"req_per_s": 500.0, "p50_ms": 2.0, "gateway_cpu_us": 400.0},
                         {"req_per_s": 550.0, "p50_ms": 2.2, "gateway_cpu_us": 420.0}])
    assert direct["req_per_s"] == {"median": 1100.0, "min": 1000.0, "max": 1200.0, "n": 3}
    assert direct["p50_ms"]["n"] == 2
    r = ratios(gateway, direct)
    assert r["req_per_s"] == pytest.approx(525 / 1100)
    assert r["p50_ms"] == pytest.approx(2.1 / 1.1)
    assert "gateway_cpu_us" not in r  # nothing to divide by: the gateway is not on the direct path


def test_floor_ratio_is_gateway_cpu_over_floor_cpu():
    gateway = summarise([{"req_per_s": 500.0, "p50_ms": 2.0, "gateway_cpu_us": 400.0, "triton_cpu_us": 100.0},
                         {"req_per_s": 600.0, "p50_ms": 2.2, "gateway_cpu_us": 420.0, "triton_cpu_us": 110.0},
                         {"req_per_s": 550.0, "p50_ms": 2.4, "gateway_cpu_us": 380.0, "triton_cpu_us": 90.0}])
    floor = summarise([{"req_per_s": 1000.0, "p50_ms": 1.0, "floor_cpu_us": 200.0, "triton_cpu_us": 100.0},
                       {"req_per_s": 1100.0, "p50_ms": 1.2, "floor_cpu_us": 250.0, "triton_cpu_us": 100.0}])
    assert floor["floor_cpu_us"] == {"median": 225.0, "min": 200.0, "max": 250.0, "n": 2}
    r = floor_ratios(gateway, floor)
    assert r["cpu_us"] == pytest.approx(400 / 225)  # medians: the gateway's own CPU over the floor's
    assert r["req_per_s"] == pytest.approx(550 / 1050) and r["p50_ms"] == pytest.approx(2.2 / 1.1)
    assert r["triton_cpu_us"] == pytest.approx(1.0)
    assert not {"gateway_cpu_us", "floor_cpu_us"} & set(r)  # each is one side's own: only cpu_us divides them
    assert "cpu_us" not in floor_ratios(gateway, summarise([{"req_per_s": 1.0}]))  # no floor CPU: no ratio
    llm_gw = summarise([{"gateway_cpu_us": 8000.0, "gateway_cpu_us_token": 800.0}])
    llm_floor = summarise([{"floor_cpu_us": 5000.0, "floor_cpu_us_token": 500.0}])
    assert floor_ratios(llm_gw, llm_floor) == {"cpu_us": pytest.approx(1.6), "cpu_us_token": pytest.approx(1.6)}
    assert "floor_cpu_us" not in ratios(floor, gateway)


# -- the floor's cases ------------------------------------------------------------------------------
def _cases():
    return cases.build("http://127.0.0.1:1", "127.0.0.1:2", lambda name: "http://127.0.0.1:3",
                       lambda name: "127.0.0.1:4", 8, 2)


def test_every_path_gets_a_floor_with_the_gateways_request_and_check():
    built = cases.with_floors(_cases(), "http://127.0.0.1:5", "127.0.0.1:6")
    keys = {c.key for c in built}
    assert set(cases.FLOOR_HOW) <= keys  # no floor for a path that does not exist
    for c in built:
        assert c.floor is not None, c.key
        f, gw = c.floor, c.gateway
        assert (f.kind, f.body, f.check, f.method, f.headers) == (gw.kind, gw.body, gw.check, gw.method, gw.headers)
        assert (f.is_token, f.how.startswith("floor: ")) == (gw.is_token, True)
        if f.kind in ("http", "llm"):
            assert f.address == "http://127.0.0.1:5" + gw.address.removeprefix("http://127.0.0.1:3")
        else:
            assert f.address == "127.0.0.1:6"
    tf = next(c for c in built if c.key == "tf_rest_small")
    assert tf.floor.address == "http://127.0.0.1:5/v1/models/saved_model_half_plus_three:predict"
    v2 = next(c for c in built if c.key == "v2_rest_binary")
    assert v2.floor.address == "http://127.0.0.1:5/v2/models/saved_model_half_plus_three/infer"
    assert v2.floor.headers == v2.gateway.headers and "Inference-Header-Content-Length" in v2.floor.headers
    llm = next(c for c in built if c.key == "llm_openai")
    assert llm.floor.address == "http://127.0.0.1:5/v1/chat/completions" and llm.floor.kind == "llm"
    grps = next(c for c in built if c.key == "grps_bin")
    assert grps.floor.address == "http://127.0.0.1:5/grps/v1/infer/predict"
    assert grps.floor.headers == {"Content-Type": "application/octet-stream"}


class _FakeRunner:
    """run_case's view of a Runner: answer checks (``bad``: sides whose check fails) and measured runs."""

    def __init__(self, bad=(), refused=()):
        self.bad, self.refused, self.calls = set(bad), set(refused), []
        self.stack = type("S", (), {"assert_running": lambda self: None})()

    def check(self, side):
        if side.how in self.bad:
            raise cases.BadAnswer(f"{side.how} answered nonsense")

    def load(self, side, concurrency, duration):
        self.calls.append(("warmup", side.how))

    def measure(self, side, concurrency, duration, hop="gateway"):
        self.calls.append(("run", side.how, hop))
        if side.how in self.refused:
            raise ConnectionError(f"{side.how}: 1 channel(s) not all ready in 10 s (TRANSIENT_FAILURE)")
        cpu = {"gateway": 450.0, "floor": 300.0}
        out = {"req_per_s": {"direct": 2000.0, "gateway": 1000.0, "floor": 1500.0}[side.how], "requests": 10}
        if hop is not None:
            out[f"{hop}_cpu_us"] = cpu[hop]
        return out


def _case_with_floor():
    side = lambda how: cases.Side(how, "http", "http://127.0.0.1:1/x", b"{}", lambda raw: None)  # noqa: E731
    return cases.Case("tf_rest_small", "TF REST small", "4 floats", 8, side("direct"), side("gateway"), side("floor"))


def test_run_case_interleaves_the_floor_and_divides_cpu_by_it():
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "2"})
    runner = _FakeRunner()
    out = run_case(runner, _case_with_floor(), s, Budget(600))
    runs = [c[1:] for c in runner.calls if c[0] == "run"]
    assert runs == [("direct", None), ("gateway", "gateway"), ("floor", "floor"),  # alternating order
                    ("floor", "floor"), ("gateway", "gateway"), ("direct", None)]
    assert out["floor"]["how"] == "floor" and len(out["floor"]["runs"]) == 2
    assert out["floor"]["summary"]["floor_cpu_us"]["median"] == 300.0
    assert "gateway_cpu_us" not in out["direct"]["summary"] and "floor_cpu_us" not in out["gateway"]["summary"]
    assert out["floor_ratio"]["cpu_us"] == pytest.approx(1.5)
    assert out["floor_ratio"]["req_per_s"] == pytest.approx(1000 / 1500)
    assert out["ratio"]["req_per_s"] == pytest.approx(0.5) and not out["errors"]


def test_a_floor_that_answers_wrong_is_left_out_and_the_case_still_runs():
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "1"})
    runner = _FakeRunner(bad={"floor"})
    out = run_case(runner, _case_with_floor(), s, Budget(600))
    assert "floor" not in out and "floor_ratio" not in out and "skipped" not in out
    assert out["errors"] == ["floor answer check failed: BadAnswer: floor answered nonsense"]
    assert [c[1] for c in runner.calls if c[0] == "run"] == ["direct", "gateway"]
    bad_gateway = run_case(_FakeRunner(bad={"gateway"}), _case_with_floor(), s, Budget(600))
    assert bad_gateway["skipped"].startswith("gateway answer check failed")  # as before the floor


def test_a_load_that_cannot_run_skips_its_case_with_why_and_the_bench_goes_on():
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "2"})
    out = run_case(_FakeRunner(refused={"gateway"}), _case_with_floor(), s, Budget(600))
    assert out["skipped"] == ("a load failed: ConnectionError: gateway: 1 channel(s) not all ready in 10 s "
                              "(TRANSIENT_FAILURE)")
    assert "- skipped TF REST small (conc 8): a load failed: ConnectionError" in report.markdown(
        {**_results(), "cases": [out]})


def test_a_scaling_step_that_cannot_run_is_listed_and_the_next_worker_count_runs():
    """bench.run.scaling: Triton direct's load failing, or one worker count's, is said in
    ``skipped`` with why; the worker counts after it still run and keep their figures."""
    from bench.run import scaling

    class Stack:
        gateway_pids: list[int] = []

        def start_gateway(self, workers):
            self.workers = workers

        def assert_running(self):
            pass

    class Runner(_FakeRunner):
        def load(self, side, concurrency, duration, **load):
            self.calls.append(("warmup", side.how, load))
            if side.how == "direct" or (side.how == "gateway" and stack.workers == 2):
                raise ConnectionError(f"{side.how}: 16 channel(s) not all ready in 10 s (CONNECTING)")

        def measure(self, side, concurrency, duration, hop="gateway", **load):
            return super().measure(side, concurrency, duration, hop)

    stack, runner = Stack(), Runner()
    side = lambda how: cases.Side(how, "grpc_stream", "127.0.0.1:1", b"", lambda raw: None)  # noqa: E731
    case = cases.Case("v2_stream", "V2 streamed", "1 message", 8, side("direct"), side("gateway"))
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "1", "BENCH_IDLE": "0",
                           "BENCH_SCALING_WORKERS": "1,2,4"})
    out = scaling(runner, stack, s, Budget(600), None, case, lambda st: "127.0.0.1:2", channels=4, clients=2)
    assert out["skipped"] == ["Triton direct: ConnectionError: direct: 16 channel(s) not all ready in 10 s (CONNECTING)",
                              "2 workers: ConnectionError: gateway: 16 channel(s) not all ready in 10 s (CONNECTING)"]
    assert [w["workers"] for w in out["runs"]] == [1, 4] and out["direct"]["runs"] == []
    assert out["runs"][1]["summary"]["req_per_s"]["median"] == 1000.0
    assert (out["kind"], out["channels"], out["clients"]) == ("grpc_stream", 4, 2)
    assert {c[2]["processes"] for c in runner.calls if c[0] == "warmup"} == {2}  # the stream load's client processes


def test_a_grpc_load_that_cannot_connect_fails_at_once_with_the_channels_state(monkeypatch):
    from bench import grpcload
    from tests.support import free_port

    monkeypatch.setattr(grpcload, "CONNECT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=r"^127\.0\.0\.1:\d+: 2 channel\(s\) not all ready in 0.5 s \(\w+"):
        grpcload.load("grpc_stream", f"127.0.0.1:{free_port()}", "/test.Echo/Chat", b"y", 2, 5.0, channels=2)
    assert time.monotonic() - t0 < 3


def test_without_the_floor_setting_the_floor_side_is_not_run():
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "1", "BENCH_FLOOR": "0"})
    runner = _FakeRunner()
    out = run_case(runner, _case_with_floor(), s, Budget(600))
    assert "floor" not in out and [c[1] for c in runner.calls if c[0] == "run"] == ["direct", "gateway"]


def test_the_budget_counts_the_floor_side():
    s = Settings.from_env({"BENCH_QUICK": "1"})  # 3 sides x (0.5 + 2 x (2 + 0.5)) + 2 = 18.5 s
    assert "skipped" in run_case(_FakeRunner(), _case_with_floor(), s, Budget(17))
    assert "skipped" not in run_case(_FakeRunner(), _case_with_floor(), s, Budget(19))


def test_a_case_without_a_floor_entry_keeps_none():
    c = _cases()[0]
    c.key = "v2_rest"  # a path added later, with no floor yet
    assert cases.with_floors([c], "http://127.0.0.1:5", "127.0.0.1:6")[0].floor is None


def test_settings_quick_full_and_overrides():
    full, quick = Settings.from_env({}), Settings.from_env({"BENCH_QUICK": "1"})
    assert not full.quick and quick.quick
    assert quick.duration_s < full.duration_s and quick.repeats <= full.repeats
    assert full.budget_s is None and quick.budget_s is None  # what every row needs
    assert Settings.from_env({"BENCH_BUDGET_S": "90"}).budget_s == 90
    assert 1 in full.scaling_workers and 2 in full.scaling_workers and (os.cpu_count() or 1) in full.scaling_workers
    s = Settings.from_env({"BENCH_QUICK": "0", "BENCH_REPEATS": "5", "BENCH_ONLY": "v2_unary, scaling"})
    assert not s.quick and s.repeats == 5
    assert s.wants("v2_unary") and s.wants("scaling") and not s.wants("grps_bin")
    assert full.floor and quick.floor and not Settings.from_env({"BENCH_FLOOR": "0"}).floor
    many = Settings.from_env({"BENCH_SCALING_WORKERS": "16, 1,4,8", "BENCH_WRK_THREADS": "4",
                              "BENCH_TRITON_INSTANCES": "8"})
    assert many.scaling_workers == (1, 4, 8, 16) and many.wrk_threads == 4 and many.triton_instances == 8
    assert full.wrk_threads == 1 and full.triton_instances is None  # the repository's own count
    grpc_scaling = Settings.from_env({"BENCH_SCALING_CHANNELS": "32", "BENCH_SCALING_CLIENTS": "4"})
    assert grpc_scaling.scaling_channels == 32 and grpc_scaling.scaling_clients == 4
    assert full.scaling_channels == 16 and full.scaling_clients == max(1, (os.cpu_count() or 1) // 4)
    assert Settings.from_env({"BENCH_ONLY": "scaling_grpc"}).wants("scaling_grpc")


def test_wrk_threads_are_passed_and_never_exceed_the_connections(tmp_path, monkeypatch):
    seen = []

    class Done(Exception):
        pass

    def popen(cmd, **_):
        seen.append(cmd)
        raise Done

    monkeypatch.setattr(wrk, "binary", lambda: "wrk")
    monkeypatch.setattr(wrk.subprocess, "Popen", popen)
    for threads, connections in ((4, 64), (4, 2), (1, 16)):
        with pytest.raises(Done):
            wrk.run("http://127.0.0.1:1/", tmp_path / "s.lua", connections, 1, threads=threads)
    assert [c[1] for c in seen] == ["-t4", "-t2", "-t1"]


def test_the_benchmark_repository_copy_sets_every_cpu_instance_count(tmp_path):
    from bench.stack import Stack
    from tests.support import ROOT

    stack = Stack()
    try:
        repo = stack._repository_copy(8)
        configs = [*repo.glob("*/config.pbtxt"), *repo.glob("*/configs/*.pbtxt")]
        cpu = [c for c in configs if "KIND_CPU" in c.read_text()]
        assert len(cpu) >= 5
        for c in cpu:
            assert "count: 8" in c.read_text() and "count: 1 }" not in c.read_text(), c
            original = (ROOT / "model_repository" / c.relative_to(repo)).read_text()
            assert c.read_text() == original.replace("KIND_CPU, count: 1", "KIND_CPU, count: 8")
        gpu = (repo / "multi_tensor_scale" / "config.pbtxt").read_text()
        assert "KIND_GPU, count: 1" in gpu  # GPU instance groups stay as they are
    finally:
        stack.close()


# -- report ---------------------------------------------------------------------------------------
def _sp(median, lo=None, hi=None, n=3):
    return {"median": median, "min": median if lo is None else lo, "max": median if hi is None else hi, "n": n}


def _results():
    meta = {
        "started": "2026-01-01 00:00 UTC", "wall_s": 123.0, "loadavg_before": [1.0, 1.0, 1.0],
        "loadavg_after": [2.0, 2.0, 2.0],
        "machine": {"cpu": "Test CPU", "cores": 2, "cores_usable": 2, "memory_gib": 8.0, "kernel": "6.1"},
        "versions": {"python": "3.11.7", "grpcio": "1.85.1", "triton": "2.51.0"},
        "git": {"commit": "0123456789abcdef", "branch": "b", "dirty": False},
        "settings": {"quick": True, "workers": 1, "repeats": 3, "duration_s": 2.0, "llm_duration_s": 2.0,
                     "warmup_s": 0.5, "concurrency": 8},
    }
    http_case = {
        "key": "tf_rest_small", "kind": "http", "title": "TF REST small", "payload": "4 floats", "concurrency": 8,
        "direct": {"how": "Triton HTTP", "summary": {"req_per_s": _sp(2000, 1900, 2100), "p50_ms": _sp(0.5),
                                                     "p99_ms": _sp(2.0), "triton_cpu_us": _sp(100)}},
        "gateway": {"how": "gateway REST", "summary": {"req_per_s": _sp(1000, 900, 1100), "p50_ms": _sp(4.0),
                                                       "p99_ms": _sp(9.0), "gateway_cpu_us": _sp(450, 440, 460),
                                                       "triton_cpu_us": _sp(200)}},
        "ratio": {"req_per_s": 0.5, "p50_ms": 8.0, "p99_ms": 4.5}, "errors": [],
        "floor": {"how": "floor: Sanic route", "summary": {"req_per_s": _sp(1600), "p50_ms": _sp(2.5),
                                                            "p99_ms": _sp(6.0), "floor_cpu_us": _sp(300, 290, 310),
                                                            "triton_cpu_us": _sp(200)}},
        "floor_ratio": {"req_per_s": 0.625, "p50_ms": 1.6, "p99_ms": 1.5, "cpu_us": 1.5, "triton_cpu_us": 1.0},
    }
    grpc_case = {
        "key": "v2_stream", "kind": "grpc_stream", "title": "V2 streamed", "payload": "4 FP32", "concurrency": 8,
        "direct": {"how": "Triton gRPC", "summary": {"req_per_s": _sp(9000), "triton_cpu_us": _sp(100)}},
        "gateway": {"how": "gateway gRPC", "summary": {"req_per_s": _sp(5000), "gateway_cpu_us": _sp(140),
                                                       "triton_cpu_us": _sp(140)}},
        "ratio": {"req_per_s": 5 / 9}, "errors": ["floor answer check failed: BadAnswer: no"],
    }
    llm_case = {
        "key": "llm_mindie", "kind": "llm", "title": "LLM native", "payload": "tiny_llm", "concurrency": 1,
        "samples": {"direct": "13", "gateway": "12–13", "floor": "13"},
        "direct": {"how": "Triton generate_stream", "summary": {"ttft_p50_ms": _sp(17.0), "itl_p50_ms": _sp(15.8)}},
        "gateway": {"how": "gateway /infer", "summary": {"ttft_p50_ms": _sp(19.0), "itl_p50_ms": _sp(16.0),
                                                         "gateway_cpu_us": _sp(10000)}},
        "floor": {"how": "floor: Sanic route, SSE", "summary": {"ttft_p50_ms": _sp(17.5), "itl_p50_ms": _sp(15.9),
                                                                "floor_cpu_us": _sp(5000), "floor_cpu_us_token": _sp(500)}},
        "ratio": {"ttft_p50_ms": 19 / 17}, "floor_ratio": {"ttft_p50_ms": 19 / 17.5, "cpu_us": 2.0, "cpu_us_token": 1.5},
        "errors": ["gateway repeat 2: 1 errors (HTTP 503)"],
    }
    skipped = {"key": "grps_bin", "kind": "http", "title": "GRPS bin", "payload": "16 MiB", "concurrency": 2,
               "direct": {"how": "x"}, "gateway": {"how": "y"}, "ratio": {}, "errors": [], "skipped": "no time left"}
    scaling = {"title": "TF REST small", "concurrency": 16, "skipped": [],
               "runs": [{"workers": 1, "summary": {"req_per_s": _sp(1700)}},
                        {"workers": 2, "summary": {"req_per_s": _sp(1300, 1200, 1400)}}],
               "direct": {"how": "Triton HTTP", "summary": {"req_per_s": _sp(3400), "triton_cpu_us": _sp(250)}}}
    memory = [{"workers": 1, "role": "worker", "idle_mib": 74.2, "loaded_mib": 305.0, "peak_mib": 464.0,
               "idle_cpu_pct": 1.0}]
    return {"meta": meta, "cases": [http_case, grpc_case, llm_case, skipped], "scaling": scaling, "memory": memory}


def test_cells_show_median_and_range():
    assert report.cell(_sp(1000, 900, 1100)) == "1000 (900–1100)"
    assert report.cell(_sp(1.5, 1.5, 1.5)) == "1.50"
    assert report.cell(_sp(0.1234, 0.1, 0.2, n=1)) == "0.123"
    assert report.cell(stats.Spread(12.34, 12.0, 13.0, 2)) == "12.3 (12.0–13.0)"
    assert report.cell(None) == "–"
    assert report.times(0.456) == "0.46×"


def test_markdown_has_every_section_and_the_numbers():
    md = report.markdown(_results())
    lines = md.splitlines()
    row = next(ln for ln in lines if ln.startswith("| TF REST small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["TF REST small", "8", "2000 (1900–2100)", "1000 (900–1100)", "0.50×"]
    assert cells[11] == "450 (440–460)" and cells[12] == "100 / 200"
    assert cells[13:] == ["300 (290–310)", "1.50×"]  # the floor's CPU per request, gateway ÷ floor
    row = next(ln for ln in lines if ln.startswith("| V2 streamed ⚠ | 8 |"))  # ⚠: its floor failed its check
    assert row.endswith("| 140 | 100 / 140 | – | – |")  # a path without a floor run: dashes
    header = lines[lines.index(row) - 2]
    assert len(header.strip("|").split("|")) == len(cells)  # every row as wide as its header
    assert "(quick mode)" in lines[0]
    assert "direct, gateway and floor interleaved" in md
    res = _results()
    res["meta"]["settings"]["floor"] = False
    assert "direct and gateway interleaved" in report.markdown(res) and "BENCH_FLOOR=0" in report.markdown(res)
    assert "Test CPU, 2 cores" in md and "triton 2.51.0" in md and "`0123456789ab`" in md
    assert "| LLM native: gateway | 12–13 | 19.0 |" in md
    assert "| LLM native: floor | 13 | 17.5 | – | 15.9 | – | – | 5000 | 500 |" in md
    assert "| ÷ floor |  | 1.09× | – | – | – | – | 2.00× | 1.50× |" in md
    assert "The floor (Sanic route, SSE) is the same stream" in md
    assert "LLM native" not in md[md.index("## Against the floor"):md.index("## LLM streaming")]
    assert "## Scaling" in md and "| 2 | 1300 (1200–1400) | 0.76× |" in md
    assert "| Triton direct (Triton HTTP) | 3400 | 2.00× | – | – |  | 250 |" in md  # the ceiling, beside
    assert "| 1 | worker | 74.2 | 305 | 464 | 1.00 |" in md
    assert "- skipped GRPS bin (conc 2): no time left" in md
    assert "- LLM native (conc 1): gateway repeat 2: 1 errors (HTTP 503)" in md
    assert "GRPS bin |" not in md  # a skipped path has no row
    assert "- TF REST small: 4 floats — gateway REST · Triton HTTP · floor: Sanic route" in md
    floor_rows = md[md.index("## Against the floor"):md.index("## LLM streaming")]
    assert "| TF REST small | 8 | 1600 | 1000 (900–1100) | 0.62× | 2.50 | 4.00 | 1.60× | 6.00 | 9.00 | 1.50× " \
           "| 300 (290–310) | 450 (440–460) | 1.50× |" in floor_rows
    assert "V2 streamed" not in floor_rows  # no floor run, no floor row
    assert "- V2 streamed (conc 8): floor answer check failed" in md


def test_markdown_has_the_grpc_scaling_section_with_its_load():
    res = _results()
    res["scaling_grpc"] = {"title": "V2 gRPC unary", "concurrency": 64, "channels": 16, "clients": 4,
                           "skipped": ["16 workers: needed about 30 s, 10 s left"],
                           "runs": [{"workers": 1, "summary": {"req_per_s": _sp(4000), "gateway_cpu_us": _sp(280)}},
                                    {"workers": 4, "summary": {"req_per_s": _sp(12000)}}],
                           "direct": {"how": "Triton gRPC", "summary": {"req_per_s": _sp(24000)}}}
    md = report.markdown(res)
    section = md[md.index("## Scaling: V2 gRPC unary"):]
    assert section.startswith("## Scaling: V2 gRPC unary, 64 callers on 16 connections from 4 client processes")
    assert "| 4 | 12000 | 3.00× |" in section and "| Triton direct (Triton gRPC) | 24000 | 6.00× |" in section
    assert "- skipped: 16 workers: needed about 30 s, 10 s left" in section
    assert md.index("## Scaling: TF REST small, 16 connections") < md.index("## Scaling: V2 gRPC unary")


def test_markdown_has_the_stream_scaling_section_after_the_unary_one():
    res = _results()
    res["scaling_grpc"] = {"title": "V2 gRPC unary", "concurrency": 64, "channels": 16, "clients": 4, "skipped": [],
                           "kind": "grpc_unary", "runs": [], "direct": {"how": "Triton gRPC"}}
    res["scaling_stream"] = {"title": "V2 gRPC streamed", "concurrency": 64, "channels": 16, "clients": 4,
                             "kind": "grpc_stream", "skipped": [],
                             "runs": [{"workers": 1, "summary": {"req_per_s": _sp(9000)}},
                                      {"workers": 8, "summary": {"req_per_s": _sp(36000)}}],
                             "direct": {"how": "Triton gRPC", "summary": {"req_per_s": _sp(40000)}}}
    md = report.markdown(res)
    assert "## Scaling: V2 gRPC unary, 64 callers on 16 connections" in md
    section = md[md.index("## Scaling: V2 gRPC streamed"):]
    assert section.startswith("## Scaling: V2 gRPC streamed, 64 streams on 16 connections from 4 client processes")
    assert "| 8 | 36000 | 4.00× |" in section and "| Triton direct (Triton gRPC) | 40000 | 4.44× |" in section
    assert md.index("## Scaling: V2 gRPC unary") < md.index("## Scaling: V2 gRPC streamed")


def test_results_are_written(tmp_path):
    pytest.importorskip("matplotlib")  # requirements/bench.txt, installed by make bench
    paths = report.write(_results(), tmp_path)
    assert [p.name for p in paths] == ["results.json", "results.md", "results.png"]
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_of_the_llm_streams_alone_writes_no_chart(tmp_path):
    """The chart shows the non-LLM paths: a run without any (BENCH_ONLY=llm_mindie,scaling) has no chart,
    not a failed run."""
    res = _results()
    res["cases"] = [c for c in res["cases"] if c["kind"] == "llm"]
    paths = report.write(res, tmp_path)
    assert [p.name for p in paths] == ["results.json", "results.md"] and not (tmp_path / "results.png").exists()


async def test_the_handler_floor_bench_runs_both_handlers_on_the_canned_answer():
    """bench/handler_floor.py: the gateway's TF REST path and the floor's handler both answer 200."""
    from bench import handler_floor

    assert await handler_floor.gateway_loop(3) > 0
    assert await handler_floor.floor_loop(3) > 0


async def test_the_handler_floor_bench_runs_both_grpc_predict_handlers_on_the_canned_answer():
    """bench/handler_floor.py: the gateway's TF gRPC Predict (answered as bytes) and the floor's both run."""
    from bench import handler_floor

    assert await handler_floor.grpc_gateway_loop(3) > 0
    assert await handler_floor.grpc_floor_loop(3) > 0


async def test_the_handler_floor_bench_runs_both_grps_handlers_on_the_canned_answer():
    """bench/handler_floor.py: GRPS's gtensors predict (its plain path, 200) and the floor's both run."""
    from bench import handler_floor

    assert await handler_floor.grps_gateway_loop(3) > 0
    assert await handler_floor.grps_floor_loop(3) > 0


def test_the_floor_runs_the_gateways_grpc_runtime(monkeypatch):
    """The floor's process gets GRPC_EXPERIMENTS as a gateway worker sets it (the bench's own process
    loaded grpc before it could), and an operator's own value is kept."""
    from bench.stack import floor_env
    from gateway.process import grpcruntime

    monkeypatch.delenv(grpcruntime.ENV, raising=False)
    assert floor_env()[grpcruntime.ENV] == grpcruntime.EXPERIMENTS
    monkeypatch.setenv(grpcruntime.ENV, "-some_experiment")
    assert floor_env()[grpcruntime.ENV] == "-some_experiment"


def test_grpc_features_parses_variants_and_refuses_a_misspelt_feature():
    from bench.grpc_features import Features

    assert Features.parse("plain") == Features() == Features.parse("")
    assert Features.parse("TIMEOUT+TRAIL") == Features(timeout=True, trailing=True)
    assert Features.parse("TIMEOUT+MD+TRAIL+CTX") == Features(True, True, True, True)
    assert Features.parse("SOPTS+COPTS") == Features(server_options=True, channel_options=True)
    with pytest.raises(ValueError, match="TIMOUT"):
        Features.parse("TIMOUT")


def test_grpc_features_options_are_the_gateways_own_or_the_bare_ones():
    """SOPTS: a gateway worker's server options; COPTS: its channel options to Triton; otherwise the
    floor's bare message-size options."""
    from bench.grpc_features import OPTIONS, Features, options
    from gateway.app import grpc_server_options
    from gateway.settings import Settings
    from gateway.upstream.client import channel_options

    assert options(Features()) == (OPTIONS, OPTIONS)
    server, channel = options(Features.parse("SOPTS+COPTS"))
    assert server == grpc_server_options(Settings(), reuse_port=False) and ("grpc.keepalive_time_ms", 30_000) in channel
    assert channel == list(channel_options()) and options(Features.parse("COPTS"))[0] == OPTIONS


@pytest.mark.parametrize("variant", ["plain", "TIMEOUT", "MD", "TRAIL", "CTX", "TIMEOUT+MD+TRAIL+CTX"])
async def test_grpc_features_handler_does_exactly_its_variants_work(variant):
    """bench/grpc_features.py: each feature turned on changes the upstream call or the context as the
    gateway's passthrough would, and nothing else; the answer is Triton's bytes."""
    from bench.grpc_features import Features, handler

    calls, seen = [], []

    async def forward(request, **kwargs):
        calls.append((request, kwargs))
        return b"answer:" + request

    class Context:
        def invocation_metadata(self):
            seen.append("metadata")
            return ()

        def time_remaining(self):
            seen.append("remaining")
            return None

        def set_trailing_metadata(self, md):
            seen.append(("trailing", md))

    f = Features.parse(variant)
    fn = handler(forward, f)
    assert await fn(b"req", Context()) == b"answer:req"
    assert await fn(b"req", Context()) == b"answer:req"
    request, kwargs = calls[-1]
    assert request == b"req"
    assert ("timeout" in kwargs) == f.timeout and kwargs.get("timeout", 30.0) == 30.0
    assert kwargs.get("metadata") == ((("x-request-id", "2"),) if f.metadata else None)
    assert (("trailing", (("x-request-id", "2"),)) in seen) == f.trailing
    assert ("metadata" in seen and "remaining" in seen) == f.context
    assert len(seen) == 2 * (2 * f.context + f.trailing)


def test_the_floor_answers_without_sanics_empty_alt_svc_header():
    """bench/floor.py's HTTP answers carry no empty ``alt-svc:`` line (the gateway's carry none either):
    the floor writes no byte more than it must (Triton unreachable: /ready needs no Triton)."""
    import socket
    import subprocess
    import sys
    import time

    from tests.support import ROOT, free_port

    http_port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.floor", "127.0.0.1:1", str(http_port), str(grpc_port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", http_port), timeout=5) as s:
                    s.sendall(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n")
                    answer = b""
                    while not answer.endswith(b"ready"):
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        answer += chunk
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 200 ok") and answer.endswith(b"ready")
    assert b"alt-svc" not in head, head


def _peer_server():
    """A sync gRPC server on a free loopback port answering any unary call with its request (Call),
    and each message of a stream with itself (Chat), and the peers (client address:port, one per
    connection) it saw."""
    from concurrent import futures

    import grpc

    from tests.support import free_port

    peers: set[str] = set()

    def echo(request, context):
        peers.add(context.peer())
        return request

    def chat(requests, context):
        peers.add(context.peer())
        yield from requests

    server = grpc.server(futures.ThreadPoolExecutor(16))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(echo),
                      "Chat": grpc.stream_stream_rpc_method_handler(chat)})])
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, f"127.0.0.1:{port}", peers


def test_grpc_load_spreads_its_callers_over_connections_and_client_processes():
    """bench/grpcload.py: ``channels`` channels are as many connections (a gateway's workers each take
    some), and ``processes`` client processes run at once, their counts merged."""
    from bench import grpcload

    server, target, peers = _peer_server()
    try:
        one = grpcload.load("grpc_unary", target, "/test.Echo/Call", b"x", 4, 0.3)
        assert one.requests > 0 and one.errors == 0 and len(peers) == 1  # one channel: one connection
        peers.clear()
        spread = grpcload.load("grpc_unary", target, "/test.Echo/Call", b"x", 6, 0.3, channels=3)
        assert spread.requests > 0 and spread.errors == 0 and len(peers) == 3
        peers.clear()
        both = grpcload.load("grpc_unary", target, "/test.Echo/Call", b"x", 4, 0.5, channels=4, processes=2)
        assert both.errors == 0 and both.requests == len(both.latencies_s) > 0 and len(peers) == 4
        assert 0.5 <= both.duration_s < 2
        with pytest.raises(ValueError, match="at least as many"):
            grpcload.load("grpc_unary", target, "/test.Echo/Call", b"x", 1, 0.1, channels=4, processes=2)
    finally:
        server.stop(0)


def test_grpc_stream_load_spreads_its_streams_over_connections_and_client_processes():
    """The streamed load the same way: ``concurrency`` streams, stream i on channel i mod ``channels``,
    each message answered before the next is written. Runs of a second: "more messages than streams"
    fails only if the loop stalls that long (a 0.3 s run in CI once got one message per stream)."""
    from bench import grpcload

    server, target, peers = _peer_server()
    try:
        one = grpcload.load("grpc_stream", target, "/test.Echo/Chat", b"y", 3, 1.0)
        assert one.requests > 3 and one.errors == 0 and len(peers) == 1  # three streams, one connection
        peers.clear()
        spread = grpcload.load("grpc_stream", target, "/test.Echo/Chat", b"y", 6, 1.0, channels=3)
        assert spread.requests > 6 and spread.errors == 0 and len(peers) == 3
        peers.clear()
        both = grpcload.load("grpc_stream", target, "/test.Echo/Chat", b"y", 4, 1.0, channels=4, processes=2)
        assert both.errors == 0 and both.requests == len(both.latencies_s) > 4
        assert len(peers) == 4 and 1.0 <= both.duration_s < 4
        refused = grpcload.load("grpc_stream", target, "/test.Echo/Nope", b"y", 2, 0.2)  # no such method
        assert (refused.requests, refused.errors) == (0, 2) and refused.first_error  # UNIMPLEMENTED, or INTERNAL
        # when the write meets the call already ended
    finally:
        server.stop(0)


def test_grpc_load_results_merge_side_by_side_runs():
    from bench.grpcload import LoadResult, merged

    a = LoadResult(requests=3, duration_s=1.0, latencies_s=[0.1, 0.2, 0.3])
    b = LoadResult(requests=2, duration_s=1.2, errors=1, latencies_s=[0.4, 0.5], first_error="UNAVAILABLE: x")
    m = merged([a, b])
    assert (m.requests, m.errors, m.duration_s, m.first_error) == (5, 1, 1.2, "UNAVAILABLE: x")
    assert sorted(m.latencies_s) == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_the_16_mib_v2_requests_and_their_checks():
    """v2_rest_big: the binary extension with every output in binary; v2_grpc_big: the element as
    ModelInfer's raw input. Each check takes the echo and refuses anything else."""
    import struct

    from tritonclient.grpc import service_pb2

    payload = bytes(range(256)) * 8
    body, headers = cases._v2_binary_big(payload)
    size = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:size])
    assert header["parameters"] == {"binary_data_output": True}
    assert header["inputs"][0]["parameters"]["binary_data_size"] == len(payload) + 4 == len(body) - size
    assert body[size:] == struct.pack("<I", len(payload)) + payload
    req = service_pb2.ModelInferRequest.FromString(cases._v2_bytes_request(payload))
    assert (req.model_name, req.inputs[0].datatype, list(req.raw_input_contents)) == \
        ("grps_echo", "BYTES", [struct.pack("<I", len(payload)) + payload])
    check = cases._check_v2_bytes(payload)
    answer = service_pb2.ModelInferResponse(raw_output_contents=[req.raw_input_contents[0]])
    check(answer.SerializeToString())
    with pytest.raises(cases.BadAnswer):
        check(service_pb2.ModelInferResponse(raw_output_contents=[b"\0\0\0\0"]).SerializeToString())
    built = cases.build("http://127.0.0.1:1", "127.0.0.1:2", lambda n: "http://127.0.0.1:3", lambda n: "127.0.0.1:4", 8, 2)
    big = {c.key: c for c in built if c.key in ("v2_rest_big", "v2_grpc_big")}
    assert big["v2_rest_big"].gateway.address.endswith("/v2/models/grps_echo/infer") and big["v2_grpc_big"].concurrency == 2


def test_the_instructions_bench_reads_callgrinds_totals_and_refuses_unknown_arguments(tmp_path, capsys):
    from bench import instructions

    dump = tmp_path / "callgrind.out.1"
    dump.write_text("# callgrind format\nevents: Ir\nsummary: 0\n\ntotals: 1234567\n")
    assert instructions.totals(dump) == 1234567
    assert instructions.main(["v3", "gateway"]) == 2 and "callgrind" in capsys.readouterr().out


def _baseline(**versions) -> dict:
    return {"instructions_per_call": {"v2": 500_000, "tf": 600_000, "rest": 700_000}, "versions": versions}


def test_the_instructions_guard_fails_above_the_tolerance_and_says_when_the_baseline_can_come_down():
    from bench import instructions_check as check

    now = {"python": "3.11.2"}
    ok, lines = check.compare(_baseline(**now), {"v2": [516_000.0, 514_000.0], "tf": [611_000.0],
                                                 "rest": [700_500.0, 690_000.0]}, now)
    assert ok and len(lines) == 3  # the least run of each: +2.8 %, +1.8 %, -1.4 %
    assert "+2.80%" in lines[0] and "514,000, 516,000" not in lines[0] and "516,000, 514,000" in lines[0]
    assert not any("FAILED" in line or "lower" in line for line in lines)
    ok, lines = check.compare(_baseline(**now), {"v2": [515_500.0], "tf": [570_000.0], "rest": [700_000.0]}, now)
    assert not ok and "FAILED" in lines[0] and "515,500" in lines[0] and "+3.10%" in lines[0]
    assert "FAILED" not in lines[1] and "time to lower the baseline" in lines[1] and "-5.00%" in lines[1]
    ok, lines = check.compare(_baseline(python="3.12.0"), {"v2": [500_000.0]}, now)
    assert ok and "3.12.0" in lines[-1] and "make instructions-baseline" in lines[-1]


def test_the_instructions_baseline_keeps_the_least_run_and_what_it_was_taken_with(tmp_path):
    from bench import instructions_check as check

    path = tmp_path / "baseline.json"
    check.write({"v2": [501_234.4, 500_111.6], "tf": [600_000.0]}, {"python": "3.11.2"}, path)
    doc = json.loads(path.read_text())
    assert doc["instructions_per_call"] == {"v2": 500_112, "tf": 600_000}
    assert doc["runs"]["v2"] == [501_234, 500_112] and doc["versions"] == {"python": "3.11.2"}
    assert check.compare(doc, {"v2": [500_112.0], "tf": [600_000.0]}, {"python": "3.11.2"}) == (
        True, ["v2        500,112 instructions a call, baseline 500,112 (+0.00%; runs: 500,112)",
               "tf        600,000 instructions a call, baseline 600,000 (+0.00%; runs: 600,000)"])
    assert set(check.versions()) == {"python", "grpcio", "sanic", "machine"}
    committed = json.loads(check.BASELINE.read_text())
    assert set(committed["instructions_per_call"]) == set(check.GUARDED) == {"v2", "tf", "rest"}


def test_the_instructions_guard_measures_a_kind_above_its_tolerance_again_before_it_fails(monkeypatch):
    import contextlib

    from bench import instructions
    from bench import instructions_check as check

    counts = {"v2": iter([520_000.0, 530_000.0, 501_000.0, 540_000.0]), "tf": iter([600_000.0, 610_000.0]),
              "rest": iter([800_000.0, 790_000.0, 780_000.0, 785_000.0])}
    monkeypatch.setattr(instructions, "triton_target", lambda _t: contextlib.nullcontext("127.0.0.1:1"))
    monkeypatch.setattr(instructions, "measure", lambda kind, server, triton, n: next(counts[kind]))
    measured = check.measure_all(2, _baseline())
    # v2: +4 % after two runs, two more bring it to +0.2 %; tf within at once; rest +11.4 % stays above
    assert measured == {"v2": [520_000.0, 530_000.0, 501_000.0, 540_000.0], "tf": [600_000.0, 610_000.0],
                        "rest": [800_000.0, 790_000.0, 780_000.0, 785_000.0]}
    assert not check.compare(_baseline(), measured, {})[0]
    counts.update((kind, iter([520_000.0, 530_000.0])) for kind in counts)
    assert check.measure_all(2, None)["v2"] == [520_000.0, 530_000.0]  # --write: no second round


async def test_the_instructions_http_client_keeps_its_connections_and_checks_every_answer():
    """bench/instructions.py's REST caller: ``n`` requests over ``conc`` keep-alive connections, each
    answer read by its Content-Length and checked; a wrong one raises."""
    import asyncio

    from bench import instructions

    connections, requests, answer = [], [], [b'{"predictions": [3.5, 4.0, 5.5, 6.5]}']

    async def serve(reader, writer):
        connections.append(writer)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the client closed its connection
                writer.close()
                return
            length = int(next(v for k, _, v in (line.partition(b": ") for line in head.split(b"\r\n"))
                              if k.lower() == b"content-length"))
            requests.append((head.split(b" ")[1], await reader.readexactly(length)))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(answer[0]), answer[0]))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await instructions._http_calls("rest", port, 10, 3)
        assert len(connections) == 3 and len(requests) == 10
        assert set(requests) == {(cases.TF_PREDICT_PATH.encode(), instructions.REST_BODY)}
        answer[0] = b'{"predictions": [3.5, 4.0, 5.5, 6.0]}'
        with pytest.raises(cases.BadAnswer):
            await instructions._http_calls("rest", port, 1, 1)
    finally:
        server.close()
        await server.wait_closed()


def test_a_dead_stack_skips_the_rest_and_says_which_process_died():
    """Triton (or the gateway, or the floor) gone: no case or scaling measures error pages, each says
    why it was skipped, and the bench goes on to write what it had (Triton 2.51 on CPU crashed twice
    in the image-sized case of a full `make bench`, which then lost every figure)."""
    from bench.run import scaling
    from bench.stack import StackDied

    def died(_self):
        raise StackDied("Triton exited with -11 (logs/triton.log)", "Signal (11) received.")

    runner = _FakeRunner()
    runner.stack = type("S", (), {"assert_running": died})()
    s = Settings.from_env({"BENCH_QUICK": "1", "BENCH_REPEATS": "2"})
    out = run_case(runner, _case_with_floor(), s, Budget(600))
    assert out["skipped"] == "Triton exited with -11 (logs/triton.log)" and runner.calls == []
    sc = scaling(runner, runner.stack, s, Budget(600), None, _case_with_floor(), lambda st: "unused")
    assert sc["skipped"] == ["all: Triton exited with -11 (logs/triton.log)"] and sc["runs"] == []


def test_the_default_run_has_room_for_every_row():
    """`make bench` with its defaults: the budget is what every path and scaling row needs, so none is
    skipped for time; each row is checked against it as run_case and scaling check (same sums)."""
    s = Settings.from_env({})
    built = cases.build("http://127.0.0.1:1", "127.0.0.1:2", lambda n: "http://127.0.0.1:3", lambda n: "127.0.0.1:4",
                        s.concurrency, s.big_concurrency, latency_concurrency=1)
    cases.with_floors(built, "http://127.0.0.1:5", "127.0.0.1:6")
    plan = plan_seconds(s, built)
    assert plan < 15 * 60  # the whole run, every row, stays a coffee break
    left = plan * 1.25
    for c in built:  # each case as the run meets it (run_case skips one that needs more than is left)
        assert case_need(c, s) <= left, c.key
        left -= case_need(c, s)
    first, each = scaling_need(s)
    assert left >= 3 * (first + each * len(s.scaling_workers))  # the three scaling rows, every worker count
    fewer = plan_seconds(Settings.from_env({"BENCH_ONLY": "tf_rest_small"}), built)
    assert 0 < fewer < plan


def test_skipped_rows_are_all_named():
    res = {"cases": [{"title": "A", "concurrency": 8, "skipped": "needed about 20 s, 3 s of the budget left"},
                     {"title": "B", "concurrency": 1}],
           "scaling": {"skipped": ["16 workers: needed about 30 s, 2 s left"]}, "scaling_grpc": None}
    assert skipped_rows(res) == ["A (conc 8): needed about 20 s, 3 s of the budget left",
                                 "scaling: 16 workers: needed about 30 s, 2 s left"]


def test_the_shadow_row_renders_its_routes_and_says_when_skipped():
    from bench import shadow

    row = {"concurrency": 1, "route": "shadow", "requests": 10, "errors": 0, "rps": 3.3, "p50_ms": 1.5,
           "p99_ms": 4.0, "cpu_us": 2000.0}
    text = "\n".join(shadow.markdown({"repeats": 2, "duration_s": 3.0, "rows": [row], "migration": {"match": 10}}))
    assert "| 1 | shadow | 10 | 0 |" in text and "'match': 10" in text
    assert shadow.markdown({"skipped": "no time"})[-1] == "skipped: no time"
    assert shadow.need_s(3.0, 2) > 2 * 3 * len(shadow.CONCURRENCY) * 3.0


def test_the_grpc_shadow_row_is_a_make_bench_row_as_the_http_one():
    """``BENCH_ONLY=shadow_grpc`` selects bench/shadow_grpc.py's row (planned, run, reported, skipped
    with why), as ``BENCH_ONLY=shadow`` does bench/shadow.py's; only when named."""
    from bench import run, shadow, shadow_grpc

    assert dict(run.SHADOW_ROWS) == {"shadow": shadow, "shadow_grpc": shadow_grpc}
    only = Settings.from_env({"BENCH_ONLY": "shadow_grpc"})
    assert only.wants("shadow_grpc") and not only.wants("shadow")
    assert not Settings.from_env({}).wants("shadow_grpc")  # named only: the default run stays under 15 minutes
    assert plan_seconds(only, []) == shadow_grpc.need_s(only.duration_s, only.repeats) > 0
    both = Settings.from_env({"BENCH_ONLY": "shadow,shadow_grpc"})
    assert plan_seconds(both, []) == 2 * plan_seconds(only, [])
    assert skipped_rows({"cases": [], "shadow_grpc": {"skipped": "no time"}}) == ["shadow_grpc: no time"]
    row = {"concurrency": 8, "route": "shadow", "requests": 12, "errors": 0, "rps": 2.0, "p50_ms": 1.5,
           "p99_ms": 4.0, "cpu_us": 1361.0}
    res = _results() | {"shadow_grpc": {"repeats": 2, "duration_s": 3.0, "rows": [row], "migration": {"match": 12}}}
    md = report.markdown(res)
    assert "## Cut-over: TF Serving gRPC small Predict on the shadow route" in md
    assert "| 8 | shadow | 12 | 0 |" in md and "'match': 12" in md
    assert shadow_grpc.markdown({"skipped": "no time"})[-1] == "skipped: no time"
