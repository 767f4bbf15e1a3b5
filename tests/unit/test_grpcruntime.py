"""The gateway's processes run gRPC without the EventEngine socket threads (gateway/process/grpcruntime.py),
unless the operator says otherwise; Triton started by the gateway keeps gRPC's defaults."""

from __future__ import annotations

import os
import subprocess
import sys

from gateway.process import grpcruntime
from tests.support import ROOT


def test_it_is_set_before_grpc_loads_and_an_operators_value_wins():
    env: dict[str, str] = {}
    assert grpcruntime.configure(env, grpc_loaded=False)
    assert env == {"GRPC_EXPERIMENTS": grpcruntime.EXPERIMENTS, "GRPC_ENABLE_FORK_SUPPORT": "false"}
    own = {"GRPC_EXPERIMENTS": "-event_engine_client", "GRPC_ENABLE_FORK_SUPPORT": "1"}
    assert not grpcruntime.configure(own, grpc_loaded=False)
    assert own == {"GRPC_EXPERIMENTS": "-event_engine_client", "GRPC_ENABLE_FORK_SUPPORT": "1"}
    half = {"GRPC_EXPERIMENTS": "-x"}
    assert grpcruntime.configure(half, grpc_loaded=False)
    assert half == {"GRPC_EXPERIMENTS": "-x", "GRPC_ENABLE_FORK_SUPPORT": "false"}
    late: dict[str, str] = {}
    assert not grpcruntime.configure(late, grpc_loaded=True)  # too late for this process: left alone
    assert late == {}


def _env_of_a_gateway_process(extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"} | extra | {"PYTHONPATH": str(ROOT)}
    code = "import gateway.cli, grpc, os; print(os.environ.get('GRPC_EXPERIMENTS'))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          cwd=ROOT, timeout=60).stdout.strip()


def test_a_gateway_process_gets_it_first_thing():
    assert _env_of_a_gateway_process({}) == grpcruntime.EXPERIMENTS
    assert _env_of_a_gateway_process({"GRPC_EXPERIMENTS": "-x"}) == "-x"


def test_triton_does_not_inherit_the_gateways_value():
    ours = {"GRPC_EXPERIMENTS": grpcruntime.EXPERIMENTS, "GRPC_ENABLE_FORK_SUPPORT": "false", "A": "1"}
    assert grpcruntime.for_child(ours) == {"A": "1"}
    assert grpcruntime.for_child({"GRPC_EXPERIMENTS": "-x"}) == {"GRPC_EXPERIMENTS": "-x"}  # the operator's


# Fork support off was measured with children started through fork + preexec_fn + exec (6c97aeb):
# on, a few children in a hundred aborted before their exec ("Epoll1Poller ... epoll_wait error: Bad
# file descriptor", SIGABRT). Children now start without a preexec_fn (vfork: no atfork handler
# runs), tests/unit/test_local_parent.py.
