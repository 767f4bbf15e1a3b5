"""bench/nginx_side.py and bench/anchors.py, the parts that run without a Triton: nginx's config,
its start and stop by pid, the ratios round by round, the report, what ``make bench`` runs."""

from __future__ import annotations

import shutil

import pytest

from bench import anchors, kserve_side, nginx_side, procstat


def test_the_config_is_one_worker_grpc_pass_with_keepalive_on_loopback(tmp_path):
    text = nginx_side.config_text(tmp_path, 7001, "127.0.0.1:5001")
    assert "worker_processes 1;" in text and "daemon off;" in text
    assert "listen 127.0.0.1:7001 http2;" in text and "grpc_pass grpc://triton;" in text
    assert "server 127.0.0.1:5001;" in text and "keepalive 64;" in text
    assert f"pid {tmp_path}/nginx.pid;" in text and f"access_log {tmp_path}/access.log;" in text
    assert "0.0.0.0" not in text and "listen 7001" not in text


@pytest.mark.parametrize("port, triton", [(7001, "10.0.0.2:8001"), (7001, "triton:8001"), (0, "127.0.0.1:8001")])
def test_the_config_refuses_anything_but_loopback(tmp_path, port, triton):
    with pytest.raises(ValueError):
        nginx_side.config_text(tmp_path, port, triton)


def test_a_missing_nginx_is_said_and_nothing_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(nginx_side.shutil, "which", lambda name: None)
    monkeypatch.setattr(nginx_side.os, "access", lambda path, mode: False)
    res = nginx_side.run("127.0.0.1:1", "127.0.0.1:2", [], list, tmp_path / "nginx")
    assert "nginx is not installed" in res["skipped"] and "apt-get install -y nginx-light" in res["skipped"]
    assert not (tmp_path / "nginx").exists()
    assert "Not run: nginx is not installed" in "\n".join(nginx_side.markdown(res))


@pytest.mark.skipif(shutil.which("nginx") is None and shutil.which("/usr/sbin/nginx") is None,
                    reason="nginx is not installed (make bench-nginx)")
def test_nginx_starts_with_a_master_and_one_worker_and_stops_by_pid(tmp_path):
    n = nginx_side.Nginx(tmp_path / "nginx", "127.0.0.1:1")  # nothing listens at Triton's address: no call is made
    n.start()
    pids = list(n.pids)
    try:
        assert len(pids) == 2 and n.alive() and n._listening()
    finally:
        n.stop()
    assert not any(procstat.read_stat(p) for p in pids) and not n.alive()
    n.stop()  # twice is harmless


def _run(cpu, errors=0):
    return {"per_s": 1000.0, "p50_ms": 5.0, "side_cpu_us": cpu, "triton_cpu_us": 400.0, "errors": errors}


def test_ratios_pair_each_rounds_runs_and_leave_out_failed_rounds():
    gateway = [_run(200), _run(300, errors=1), _run(150), _run(None)]
    nginx = [_run(50), _run(60), _run(50), _run(50)]
    assert nginx_side.round_ratios(gateway, nginx) == [4.0, 3.0]
    assert nginx_side.side_order(0) == ("gateway", "nginx") and nginx_side.side_order(1) == ("nginx", "gateway")


def test_the_report_gives_both_sides_and_the_ratio_per_kind():
    row = {side: {"runs": [], "summary": nginx_side.summarise([_run(c) for c in cpus])}
           for side, cpus in (("gateway", (200, 150, 160)), ("nginx", (50, 50, 40)))}
    row["ratio"] = {"median": 3.2, "min": 3.0, "max": 4.0, "n": 3}
    res = {"concurrency": 8, "rounds": 3, "seconds": 5, "nginx_version": "1.22.1", "kinds": {"unary": row},
           "checks": [{"kind": "unary", "same_bytes": True, "bytes": {}}]}
    text = "\n".join(nginx_side.markdown(res))
    assert "nginx 1.22.1" in text and "**3.20× (rounds 3.00–4.00)**" in text
    assert "| ModelInfer, 4 FP32 (unary calls) | gateway | 1000 | 5.00 | 160 (150–200) | 400 |" in text
    assert "same answer bytes through both: unary yes" in text


def test_make_bench_runs_the_anchors_unless_bench_only_leaves_them_out():
    assert anchors.wanted_by_make_bench({})
    assert anchors.wanted_by_make_bench({"BENCH_ONLY": "tf_rest_small,anchors"})
    assert not anchors.wanted_by_make_bench({"BENCH_ONLY": "tf_rest_small"})


def test_the_anchors_gateway_adds_the_v2_grpc_listener():
    conf = kserve_side.make_run_config("127.0.0.1:5001", 6001, 6002, v2_grpc_port=6003)
    enabled = {n: lst for n, lst in conf["listeners"].items() if lst.get("enabled", True)}
    assert enabled == {"tfserving_rest": {"host": "127.0.0.1", "port": 6001},
                       "admin_http": {"host": "127.0.0.1", "port": 6002},
                       "v2_grpc": {"host": "127.0.0.1", "port": 6003}}


def test_the_arguments_pass_kserves_own_on():
    a = anchors.parse_args(["--only", "nginx", "--kserve-args", "--concurrency 1,8 --rounds 2"])
    assert a.only == "nginx" and a.rounds == 3 and a.concurrency == 8
    assert a.kserve.concurrency == [1, 8] and a.kserve.rounds == 2
    assert anchors.parse_args([]).kserve.image_concurrency == 0


def test_the_results_say_which_anchor_did_not_run(tmp_path):
    res = {"nginx": {"skipped": "nginx is not installed"}, "kserve": {"skipped": ".venv-kserve is missing"},
           "errors": [], "meta": {"started": "now", "git": {"commit": "abc"}}}
    md, js = anchors.write(res, tmp_path)
    text = md.read_text()
    assert "Not run: nginx is not installed" in text and "Not run: .venv-kserve is missing" in text
    assert js.exists()
