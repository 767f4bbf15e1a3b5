"""tests/triton_proxy.py's hold, on hand-made frames: what the contract tests rely on to keep a
generation open (tests/contract/test_mindie_pd.py, test_mindie_ops.py)."""

from __future__ import annotations

import hpack

from tests.triton_proxy import PREFACE, _Answers, _Requests


def frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def msg(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


class Rule:  # what _Answers reads of its TcpProxy
    def __init__(self, rule):
        import threading

        self.rule, self.held = rule, threading.Event()


def requests_for(paths: dict[int, str]) -> bytes:
    enc, out = hpack.Encoder(), bytearray(PREFACE)
    for sid, path in paths.items():
        out += frame(1, 0x4, sid, enc.encode([(":method", "POST"), (":path", path)]))
    return bytes(out)


def test_a_stream_is_cut_where_its_withheld_message_begins_and_unary_calls_flow():
    paths: dict[int, str] = {}
    wire = requests_for({1: "/inference.GRPCInferenceService/ModelStreamInfer",
                         3: "/inference.GRPCInferenceService/ModelMetadata"})
    assert _Requests(paths).feed(wire) == wire  # passed on unchanged, paths learnt
    assert paths == {1: "/inference.GRPCInferenceService/ModelStreamInfer",
                     3: "/inference.GRPCInferenceService/ModelMetadata"}
    t1, t2, t3 = msg(b"tok1"), msg(b"tok2"), msg(b"tok3")
    settings, h1, h3 = frame(4, 0, 0, b""), frame(1, 4, 1, b"h"), frame(1, 4, 3, b"h")
    unary = h3 + frame(0, 0, 3, msg(b"meta")) + frame(1, 5, 3, b"t")
    wire = settings + h1 + frame(0, 0, 1, t1 + t2[:3]) + unary + frame(0, 0, 1, t2[3:] + t3) + frame(1, 5, 1, b"t")
    proxy = Rule(("/ModelStreamInfer", 2))
    answers = _Answers(proxy, paths)
    out = b"".join(answers.feed(wire[i:i + 1]) for i in range(len(wire)))  # byte by byte: any split holds
    assert out == settings + h1 + frame(0, 0, 1, t1 + t2[:3]) + unary + frame(0, 0, 1, t2[3:])
    assert proxy.held.is_set() and answers.held == {1}


def test_without_a_rule_everything_flows():
    paths: dict[int, str] = {}
    _Requests(paths).feed(requests_for({1: "/inference.GRPCInferenceService/ModelStreamInfer"}))
    wire = frame(1, 4, 1, b"h") + frame(0, 0, 1, msg(b"a") + msg(b"b")) + frame(1, 5, 1, b"t")
    proxy = Rule(None)
    assert _Answers(proxy, paths).feed(wire) == wire and not proxy.held.is_set()


def test_hold_zero_withholds_the_first_answer():
    paths: dict[int, str] = {}
    _Requests(paths).feed(requests_for({1: "/inference.GRPCInferenceService/ModelStreamInfer"}))
    wire = frame(1, 4, 1, b"h") + frame(0, 0, 1, msg(b"all")) + frame(1, 5, 1, b"t")
    assert _Answers(Rule(("/ModelStreamInfer", 0)), paths).feed(wire) == frame(1, 4, 1, b"h")

