"""Start-up checks of `gateway serve` / `gateway local` (gateway/startup.py): a taken listener port
names the listener and its setting; an unreachable or wrong upstream is a warning that says what to set."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from concurrent import futures

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway import cli, startup
from gateway.local import launch, localtriton
from tests.support import ROOT, free_port, worker_settings


@pytest.fixture
def held_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_taken_listener_port_names_listener_setting_and_variable(held_port):
    s = worker_settings({"tfserving_rest": held_port, "admin_http": free_port()}, "127.0.0.1:1")
    problems = startup.listener_port_problems(s)
    assert problems == [startup.port_in_use_message("127.0.0.1", held_port, "listeners.tfserving_rest.port",
                                                    "TensorFlow Serving REST")]
    assert f"port {held_port} on 127.0.0.1 (TensorFlow Serving REST, setting `listeners.tfserving_rest.port`)" \
        in problems[0]
    assert "GATEWAY__LISTENERS__TFSERVING_REST__PORT=<port>" in problems[0]


def test_free_ports_are_no_problem():
    s = worker_settings({"tfserving_rest": free_port(), "admin_http": free_port()}, "127.0.0.1:1")
    assert startup.listener_port_problems(s) == []


def test_local_refuses_a_taken_listener_port_before_starting_triton(held_port, monkeypatch, capsys):
    def never(*_a, **_k):
        raise AssertionError("Triton must not start when a listener's port is taken")

    monkeypatch.setattr(localtriton, "start", never)
    monkeypatch.setattr(launch, "exit_with_parent", os.getppid)
    s = worker_settings({"grps_http": held_port}, "127.0.0.1:1")
    assert cli.local(s, None) == 1
    err = capsys.readouterr().err
    assert f"error: port {held_port} on 127.0.0.1 (GRPS HTTP, setting `listeners.grps_http.port`)" in err


def test_local_prints_tritons_start_error_and_exits_1(monkeypatch, capsys):
    def fails(*_a, **_k):
        raise localtriton.TritonStartError("model 'x' failed to load: boom")

    monkeypatch.setattr(localtriton, "start", fails)
    monkeypatch.setattr(launch, "exit_with_parent", os.getppid)
    s = worker_settings({"grps_http": free_port()}, "127.0.0.1:1")
    assert cli.local(s, None) == 1
    assert "error: model 'x' failed to load: boom" in capsys.readouterr().err


def test_serve_refuses_a_taken_port_without_a_traceback(held_port, capsys):
    s = worker_settings({"tfserving_grpc": held_port}, "127.0.0.1:1")
    assert cli.serve(s, None) == 1
    err = capsys.readouterr().err
    assert "listeners.tfserving_grpc.port" in err and "Traceback" not in err


def test_unreachable_upstream_names_the_target_and_the_setting():
    port = free_port()  # nothing listens there
    text = startup.upstream_problem(f"127.0.0.1:{port}", timeout=0.5)
    assert text.startswith(f"upstream Triton at 127.0.0.1:{port} is not reachable")
    assert "`upstream.grpc`" in text and "GATEWAY__UPSTREAM__GRPC=host:port" in text


def test_upstream_that_is_not_grpc_is_told_apart(held_port):
    text = startup.upstream_problem(f"127.0.0.1:{held_port}", timeout=0.5)
    assert text.startswith(f"something listens at 127.0.0.1:{held_port} but does not speak gRPC")


class _Triton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, ready: bool) -> None:
        self.ready = ready

    def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=self.ready)


@pytest.mark.parametrize("ready", [True, False])
def test_upstream_readiness(ready):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_Triton(ready), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        text = startup.upstream_problem(f"127.0.0.1:{port}", timeout=5)
    finally:
        server.stop(None)
    if ready:
        assert text is None
    else:
        assert text.startswith(f"upstream Triton at 127.0.0.1:{port} is reachable but not ready")


def test_preflight_warns_about_the_upstream_but_goes_on():
    out = io.StringIO()
    s = worker_settings({"admin_http": free_port()}, f"127.0.0.1:{free_port()}")
    assert startup.preflight(s, out=out) is True
    assert out.getvalue().startswith("warning: upstream Triton at")


def test_a_local_stop_caused_by_the_parent_exiting_says_so(capsys):
    """PR_SET_PDEATHSIG's SIGTERM looks like any other stop: the last line says why, and only then."""
    launch.say_if_parent_gone(os.getppid())
    assert capsys.readouterr().err == ""
    launch.say_if_parent_gone(os.getppid() + 1)  # the parent it was started by is no longer its parent
    err = capsys.readouterr().err
    assert err.startswith("stopped: the process that started it exited") and "`gateway serve`" in err


def test_a_parent_already_gone_at_start_is_said_before_the_stop():
    """Started by a process that exited at once (setsid -f, a daemonizing wrapper): `gateway local`
    stops at once, saying why (in a child process: PR_SET_PDEATHSIG is set for real)."""
    code = ("import os, signal; from gateway.local import launch; os.getppid = lambda: 1; "
            "os.kill = lambda pid, sig: print('signal', signal.Signals(sig).name, pid == os.getpid(), flush=True); "
            "launch.exit_with_parent()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "signal SIGTERM True\n"
    assert out.stderr.startswith("stopping: the process that started it exited")
