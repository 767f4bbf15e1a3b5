"""How the watch of the session's Triton (tests/tritonwatch.py) names an exit."""

from tests.tritonwatch import describe_exit

SEGV_LOG = """I1129 08:50:52.593533 30642 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:1"
Signal (11) received.
 0# 0x000055A4D3A8E5C9 in tritonserver
"""


def test_a_signal_is_named():
    assert describe_exit(-9, "") == "killed by SIGKILL (9)"
    assert describe_exit(-11, SEGV_LOG) == "killed by SIGSEGV (11)"


def test_an_exit_code_names_the_signal_tritons_handler_logged():
    assert describe_exit(1, SEGV_LOG) == "exited with code 1 (its log: Signal (11) received: SIGSEGV (11))"
    assert describe_exit(0, "") == "exited with code 0"
    assert describe_exit(1, "Signal (99) received.") == "exited with code 1 (its log: Signal (99) received: signal 99)"
