"""bench/kserve_side.py's parts that run without a stack: the requests, the answer comparison, the
transformer's command line and stop, the gateway's settings, the summaries, ratios and the report."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from bench import cases, kserve_side, procstat
from gateway import config

GATEWAY_SMALL = b'{\n    "predictions": [3.5, 4.0, 5.5, 6.5\n    ]\n}'
KSERVE_SMALL = b'{"predictions":[3.5,4.0,5.5,6.5]}'


def test_the_loads_are_the_small_predict_per_concurrency_then_the_image():
    loads = kserve_side.loads([1, 8, 64], 2)
    assert [(x.key, x.concurrency) for x in loads] == [("small", 1), ("small", 8), ("small", 64), ("image", 2)]
    assert loads[0].body == b'{"instances": [1.0,2.0,5.0,7.0]}'
    image = json.loads(loads[-1].body)["instances"]
    assert len(image) == cases.IMAGE_FLOATS == 150_528
    assert np.array_equal(np.asarray(image, dtype=np.float32), cases.image_values())
    assert [x.key for x in kserve_side.loads([8], None)] == ["small"]


def test_sides_alternate_by_round():
    assert [kserve_side.side_order(r) for r in range(3)] == [("gateway", "kserve"), ("kserve", "gateway"),
                                                             ("gateway", "kserve")]


def test_the_same_predictions_in_other_bytes_are_the_same_answer():
    c = kserve_side.compare_answers(cases.SMALL, GATEWAY_SMALL, KSERVE_SMALL)
    assert c["same_values"] and c["gateway_correct"] and c["kserve_correct"]
    assert not c["same_bytes"] and (c["gateway_bytes"], c["kserve_bytes"]) == (len(GATEWAY_SMALL), len(KSERVE_SMALL))
    # FP32 printed two ways (shortest FP32 text, a float64's repr) is one value
    x = np.float32(0.1)
    y = x * np.float32(0.5) + np.float32(3)
    short, long_ = f'{{"predictions": [{y}]}}'.encode(), f'{{"predictions":[{float(y)!r}]}}'.encode()
    assert short != long_
    assert kserve_side.compare_answers([float(x)], short, long_)["same_values"]


def test_a_different_missing_or_wrong_answer_is_told():
    other = kserve_side.compare_answers(cases.SMALL, GATEWAY_SMALL, b'{"predictions":[3.5,4.0,5.5,6.0]}')
    assert not other["same_values"] and not other["kserve_correct"] and other["gateway_correct"]
    short = kserve_side.compare_answers(cases.SMALL, GATEWAY_SMALL, b'{"predictions":[3.5,4.0,5.5]}')
    assert not short["same_values"] and not short["kserve_correct"]
    broken = kserve_side.compare_answers(cases.SMALL, GATEWAY_SMALL, b'{"error": "boom"}')
    assert not broken["same_values"] and "KeyError" in broken["kserve_error"]
    both_wrong = kserve_side.compare_answers([0.0], b'{"predictions": [1.0]}', b'{"predictions":[1.0]}')
    assert both_wrong["same_values"] and not both_wrong["gateway_correct"] and not both_wrong["kserve_correct"]


def test_the_transformer_is_started_with_the_sdks_grpc_v2_predictor_on_loopback(tmp_path):
    cmd = kserve_side.transformer_command(tmp_path / "python", "m", "127.0.0.1:8001", 4321, 2,
                                          ["--enable_latency_logging", "false"])
    args = dict(zip(cmd[2::2], cmd[3::2], strict=False))
    assert cmd[1] == str(kserve_side.TRANSFORMER)
    assert args["--predictor_host"] == "127.0.0.1:8001" and args["--predictor_protocol"] == "grpc-v2"
    assert (args["--model_name"], args["--http_port"], args["--workers"]) == ("m", "4321", "2")
    assert args["--enable_grpc"] == "false" and cmd[-2:] == ["--enable_latency_logging", "false"]
    text = kserve_side.TRANSFORMER.read_text()
    assert 'kwargs["host"] = "127.0.0.1"' in text  # uvicorn's listener; KServe hard-codes 0.0.0.0


def test_a_missing_kserve_venv_is_said_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(kserve_side, "KSERVE_VENV", tmp_path / "nowhere")
    t = kserve_side.Transformer(tmp_path, "127.0.0.1:1", "m", 1)
    with pytest.raises(RuntimeError, match="make bench-kserve"):
        t.start()
    assert t.proc is None


def test_stop_ends_the_transformers_whole_process_group(tmp_path):
    t = kserve_side.Transformer(tmp_path, "127.0.0.1:1", "m", 2)
    # a parent and a child in a session of their own, as the ModelServer and its worker
    t.proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"],
                              start_new_session=True)
    deadline = time.monotonic() + 10
    while len(procstat.process_group(t.proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pgid = t.proc.pid
    assert len(procstat.process_group(pgid)) == 2
    t.stop()
    assert procstat.process_group(pgid) == [] and t.proc is None and not t.alive()
    t.stop()  # twice is harmless


def test_the_gateway_runs_with_make_runs_settings_on_two_free_ports():
    conf = kserve_side.make_run_config("127.0.0.1:5001", 6001, 6002)
    original = yaml.safe_load((kserve_side.ROOT / "gateway.yaml").read_text())
    assert conf["upstream"]["grpc"] == "127.0.0.1:5001" and "local_triton" not in conf
    for key in ("workers", "log_level", "access_log", "http_fast_path", "limits", "dialects"):
        assert conf[key] == original[key]
    enabled = {n: lst for n, lst in conf["listeners"].items() if lst.get("enabled", True)}
    assert enabled == {"tfserving_rest": {"host": "127.0.0.1", "port": 6001},
                       "admin_http": {"host": "127.0.0.1", "port": 6002}}


def test_the_gateways_settings_load(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(kserve_side.make_run_config("127.0.0.1:5001", 6001, 6002)))
    settings = config.load(path, env={})
    enabled = {(lst.name, lst.host, lst.port) for lst in settings.listeners.values() if lst.enabled}
    assert enabled == {("tfserving_rest", "127.0.0.1", 6001), ("admin_http", "127.0.0.1", 6002)}
    assert settings.upstream.grpc == "127.0.0.1:5001" and settings.workers == 1 and settings.access_log


def _run(rps, cpu, errors=0):
    return {"req_per_s": rps, "p50_ms": 1000 / rps, "p99_ms": 3000 / rps, "side_cpu_us": cpu, "triton_cpu_us": 400,
            "errors": errors}


def test_summaries_skip_runs_with_errors_and_ratios_compare_medians():
    gw = kserve_side.summarise([_run(1800, 450), _run(1700, 470), _run(1750, 460), _run(10, 9999, errors=3)])
    ks = kserve_side.summarise([_run(600, 1400), _run(500, 1500), _run(550, 1450)])
    assert gw["req_per_s"] == {"median": 1750, "min": 1700, "max": 1800, "n": 3}
    c = kserve_side.compare(gw, ks)
    assert c["throughput_x"] == pytest.approx(1750 / 550) and c["meets_target"] is True
    assert c["cpu_per_request_x"] == pytest.approx(1450 / 460)
    assert kserve_side.compare(ks, gw)["meets_target"] is False
    assert kserve_side.compare(gw, kserve_side.summarise([]))["throughput_x"] is None
    assert kserve_side.compare(gw, kserve_side.summarise([]))["meets_target"] is None


def test_round_by_round_ratios_pair_each_rounds_runs_and_skip_failed_rounds():
    gateway = [_run(1800, 450), _run(900, 470), _run(1750, 460)]
    kserve = [_run(600, 1400), _run(450, 1500), _run(500, 1450, errors=2)]
    assert kserve_side.per_round(gateway, kserve) == pytest.approx([3.0, 2.0])
    c = kserve_side.compare(kserve_side.summarise(gateway), kserve_side.summarise(kserve),
                            rounds=kserve_side.per_round(gateway, kserve))
    assert c["throughput_x_rounds"] == {"median": pytest.approx(2.5), "min": pytest.approx(2.0),
                                        "max": pytest.approx(3.0), "n": 2}
    assert kserve_side.compare(kserve_side.summarise(gateway), kserve_side.summarise(kserve))["throughput_x_rounds"] is None


def test_worker_counts_and_arguments():
    assert kserve_side.worker_counts([], 1) == [1]
    assert kserve_side.worker_counts([], 2) == [1, 2]
    assert kserve_side.worker_counts([2, 2, 4], 1) == [2, 4]
    a = kserve_side.parse_args(["--concurrency", "1,64", "--kserve-args", "--enable_latency_logging false"])
    assert a.concurrency == [1, 64] and a.kserve_args == ["--enable_latency_logging", "false"]
    assert (a.rounds, a.image_concurrency) == (3, 2)
    with pytest.raises(SystemExit):
        kserve_side.parse_args(["--rounds", "0"])


def _results():
    gw = kserve_side.summarise([_run(1750, 460)])
    ks = kserve_side.summarise([_run(550, 1450), _run(600, 1400)])
    row = {"load": "small", "title": "TF Serving REST predict, 4 FP32", "concurrency": 8,
           "gateway": {"summary": gw}, "kserve": {"summary": ks}, "compare": kserve_side.compare(gw, ks, rounds=[3.2, 2.9])}
    skipped = {"load": "image", "title": "image", "concurrency": 2, "skipped": "one answer took 12.0 s (> 10 s)"}
    return {"checks": [{"load": "small", **kserve_side.compare_answers(cases.SMALL, GATEWAY_SMALL, KSERVE_SMALL)}],
            "configs": [{"kserve_workers": 1, "gateway_workers": 1, "target_x": 3.0, "rows": [row, skipped]}],
            "errors": [], "meta": {"started": "today", "settings": {"rounds": 2, "seconds": 8},
                                   "versions": {"kserve": "0.21.0"}, "git": {"commit": "abc"}}}


def test_the_report_has_the_check_both_sides_the_ratios_and_the_skipped_row():
    md = kserve_side.markdown(_results())
    assert "| small | yes | yes | **no** | 48 | 33 |" in md
    assert '`{\\n    "predictions": [3.5, 4.0, 5.5, 6.5\\n    ]\\n}`' in md  # one line per answer
    assert "| TF Serving REST predict, 4 FP32 | 8 | gateway | 1750 |" in md
    assert "| TF Serving REST predict, 4 FP32 | 8 | kserve | 575 (550–600) |" in md
    assert "| 3.04× | 3.05× (2.90–3.20) | yes | 3.10× |" in md
    assert "skipped: one answer took 12.0 s" in md and "kserve 0.21.0" in md and "no core pinned" in md
    pinned = _results()
    pinned["meta"]["settings"]["cpus"] = {"BENCH_CPUS_GATEWAY": "1", "BENCH_CPUS_TRITON": "0"}
    assert "cores BENCH_CPUS_GATEWAY=1, BENCH_CPUS_TRITON=0" in kserve_side.markdown(pinned)


def test_results_are_written(tmp_path):
    paths = kserve_side.write(_results(), tmp_path / "kserve")
    assert [p.name for p in paths] == ["results.md", "results.json"]
    assert json.loads(paths[1].read_text())["configs"][0]["rows"][0]["compare"]["meets_target"] is True
