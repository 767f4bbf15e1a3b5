"""`gateway local` start-up: progress from Triton's log, and failures that say what failed and what to do.

The log lines are Triton 2.51's own (copied from real runs); Triton itself is faked by a shell
process that writes them and exits, so these tests need no Triton.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from gateway.local import localtriton
from gateway.local.localtriton import LoadProgress, TritonProcess, TritonStartError, explain_exit
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port

LOADING = '''\
I1123 10:38:23.076488 7876 model_lifecycle.cc:472] "loading: half_plus_two:123"
I1123 10:38:23.076525 7876 model_lifecycle.cc:472] "loading: grps_echo:1"
I1123 10:38:24.324856 7876 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: half_plus_two_0_0 (CPU device 0)"
I1123 10:38:24.482709 7876 model_lifecycle.cc:839] "successfully loaded 'grps_echo'"
I1123 10:38:24.504829 7876 model_lifecycle.cc:839] "successfully loaded 'half_plus_two'"
'''

MODEL_RAISES = r'''I1123 11:01:49.037397 4327 model_lifecycle.cc:472] "loading: raises:1"
I1123 11:01:49.037439 4327 model_lifecycle.cc:472] "loading: grps_echo:1"
I1123 11:01:50.352813 4327 model_lifecycle.cc:839] "successfully loaded 'grps_echo'"
E1123 11:01:50.626825 4327 model_lifecycle.cc:642] "failed to load 'raises' version 1: Internal: RuntimeError: weights file missing: /models/raises/weights.bin\n\nAt:\n  /tmp/r1/raises/1/model.py(3): initialize\n"
I1123 11:01:50.626841 4327 model_lifecycle.cc:777] "failed to load 'raises'"
error: creating server: Internal - failed to load all models
'''

BAD_CONFIG = '''\
[libprotobuf ERROR text_format.cc:337] Error parsing text-format inference.ModelConfig: 3:17: Expected string, got:
E1123 11:01:57.886057 4514 model_repository_manager.cc:1460] "Poll failed for model directory 'broken': failed to read text proto from /tmp/r2/broken/config.pbtxt"
error: creating server: Internal - failed to load all models
'''

PORT_TAKEN = '''\
I1123 11:02:02.050784 4538 metrics.cc:770] "Collecting CPU metrics"
E1123 11:02:02.054976 4538 main.cc:245] "failed to start GRPC service: Unavailable - Socket '127.0.0.1:46005' already in use "
'''


def test_progress_is_one_line_per_state_change_with_a_count():
    p = LoadProgress(total=7)
    lines = p.feed(LOADING)
    assert lines == [
        "Triton: loading half_plus_two (version 123) ...",
        "Triton: loading grps_echo (version 1) ...",
        "Triton: grps_echo ... READY (1/7)",
        "Triton: half_plus_two ... READY (2/7)",
    ]
    assert p.ready == 2


def test_progress_waits_for_whole_lines():
    p = LoadProgress(total=2)
    line = "I1123 10:38:24.482709 7876 model_lifecycle.cc:839] \"successfully loaded 'grps_echo'\"\n"
    assert p.feed(line[:40]) == []
    assert p.feed(line[40:]) == ["Triton: grps_echo ... READY (1/2)"]


def test_failed_model_is_named_with_tritons_reason():
    p = LoadProgress(total=2)
    lines = p.feed(MODEL_RAISES)
    assert "Triton: raises ... FAILED: Internal: RuntimeError: weights file missing: /models/raises/weights.bin" in lines
    cfg = LocalTriton(model_repository="model_repository")
    text = explain_exit(cfg, 1, p, Path("/x/triton.log"), MODEL_RAISES.splitlines())
    assert text.startswith("tritonserver exited with code 1 during start-up: model 'raises' failed to load: "
                           "Internal: RuntimeError: weights file missing: /models/raises/weights.bin")
    assert "/tmp/r1/raises/1/model.py(3): initialize" in text  # the reason's lines, unescaped
    assert "fix the model" in text and "model_repository" in text and "/x/triton.log" in text


def test_unreadable_config_is_a_failed_model():
    p = LoadProgress(total=1)
    assert p.feed(BAD_CONFIG) == [
        "Triton: broken ... FAILED: failed to read text proto from /tmp/r2/broken/config.pbtxt"]
    text = explain_exit(LocalTriton(), 1, p, Path("t.log"), BAD_CONFIG.splitlines())
    assert "model 'broken' failed to load: failed to read text proto from /tmp/r2/broken/config.pbtxt" in text


def test_port_taken_after_loading_names_the_setting():
    p = LoadProgress(total=7)
    p.feed(PORT_TAKEN)
    text = explain_exit(LocalTriton(), 1, p, Path("t.log"), PORT_TAKEN.splitlines())
    assert "port 46005 on 127.0.0.1" in text
    assert "`local_triton.grpc_port`" in text and "GATEWAY__LOCAL_TRITON__GRPC_PORT=<port>" in text


def test_other_early_exit_shows_the_last_lines_and_the_log_path():
    lines = [f"line {i}" for i in range(40)] + ["error: creating server: Invalid argument - --foo"]
    text = explain_exit(LocalTriton(), 2, LoadProgress(), Path("/logs/triton.log"), lines)
    assert text.startswith("tritonserver exited with code 2 during start-up. The last lines of its log "
                           "(/logs/triton.log):")
    assert "error: creating server: Invalid argument - --foo" in text
    assert "line 39" in text and "line 20" not in text  # the tail only


def _fake_triton(tmp_path: Path, log_text: str, code: int) -> TritonProcess:
    """A process that writes ``log_text`` as Triton's log and exits with ``code``."""
    src = tmp_path / "src.log"
    src.write_text(log_text)
    log_path = tmp_path / "triton.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["bash", "-c", f"cat {src}; exit {code}"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    cfg = LocalTriton(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), startup_timeout_s=60)
    return TritonProcess(cfg, proc, log_path)


def test_waiting_reports_progress_then_the_failed_model(tmp_path):
    tp = _fake_triton(tmp_path, MODEL_RAISES, 1)
    seen: list[str] = []
    with pytest.raises(TritonStartError) as err:
        localtriton._wait_ready(tp, LoadProgress(total=2), seen.append)
    assert "Triton: grps_echo ... READY (1/2)" in seen
    assert any(s.startswith("Triton: raises ... FAILED") for s in seen)
    assert "model 'raises' failed to load" in str(err.value)
    assert str(tp.log_path) in str(err.value)


def test_a_taken_triton_port_is_refused_before_triton_starts(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), http_port=port, grpc_port=free_port(),
                          metrics_port=free_port(), workdir=str(tmp_path / "w"))
        with pytest.raises(TritonStartError) as err:
            localtriton.check_ports(cfg)
    text = str(err.value)
    assert f"port {port} on 127.0.0.1 (Triton's HTTP port, setting `local_triton.http_port`) is already in use" in text
    assert "GATEWAY__LOCAL_TRITON__HTTP_PORT=<port>" in text


def test_missing_triton_environment_says_run_make_install(tmp_path):
    with pytest.raises(TritonStartError, match=r"is missing .* run `make install`"):
        localtriton.prepare(LocalTriton(venv=str(tmp_path / "nowhere")), tmp_path)


def test_models_are_counted_from_the_repository(tmp_path):
    for name in ("a", "b", ".git"):
        (tmp_path / name).mkdir()
    (tmp_path / "README").write_text("")
    assert localtriton.count_models(tmp_path) == 2
    assert localtriton.count_models(ROOT / "model_repository") == 12


def test_not_ready_in_time_names_the_models_still_loading_and_the_setting(tmp_path):
    src = tmp_path / "src.log"
    src.write_text('I1123 10:38:23.076641 7876 model_lifecycle.cc:472] "loading: tiny_llm:1"\n')
    log_path = tmp_path / "triton.log"
    with open(log_path, "wb") as log:  # writes its log, then never becomes ready
        proc = subprocess.Popen(["bash", "-c", f"cat {src}; exec sleep 60"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    cfg = LocalTriton(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), startup_timeout_s=1)
    tp = TritonProcess(cfg, proc, log_path)
    try:
        with pytest.raises(TritonStartError) as err:
            localtriton._wait_ready(tp, LoadProgress(total=1), lambda _line: None)
    finally:
        tp.stop(timeout=5)
    text = str(err.value)
    assert "tritonserver was not ready after 1s (still loading: tiny_llm)" in text
    assert "`local_triton.startup_timeout_s`" in text and str(log_path) in text
