"""Edge.unary_now: a unary call begun at once and answered from a callback (the V2 passthrough's
relay on the h2 server and client) gives what Edge.unary's task gives: the answer with its
trailers, a failure in the dialect's status, admission held for the call's length, the deadline
and the server's stop, the metrics' outcome; a call that cannot begin at once is the task's."""

from __future__ import annotations

import collections

import grpc
import pytest
from prometheus_client import REGISTRY

from gateway.call import Admission
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import DefaultRendering
from gateway.edge import Edge
from gateway.h2.rpc import Rpc
from gateway.observe import metrics


class FakeRpc:
    """What the h2 server's call (gateway/h2/rpc.py) gives unary_now."""

    def __init__(self, request: bytes = b"req", metadata=(), remaining: float | None = None):
        self.messages = collections.deque([request])
        self.metadata = metadata
        self.remaining = remaining
        self.expired = False
        self.task = None
        self.answer = None  # ("reply", bytes, trailing) or ("end", code, details, trailing)

    def time_remaining(self):
        return self.remaining

    def invocation_metadata(self):
        return self.metadata

    def reply(self, answer: bytes, trailing=()):
        assert self.answer is None
        self.answer = ("reply", answer, tuple(trailing))

    def end(self, code, details, trailing=()):
        assert self.answer is None
        self.answer = ("end", code, details, tuple(trailing))

    end_cancelled = Rpc.end_cancelled  # the h2 call's own, on this one's ``expired`` and ``end``


class Handle:
    cancelled = False

    def cancel(self):
        self.cancelled = True


def _count(outcome: str, status: str) -> float:
    metrics.flush()
    return REGISTRY.get_sample_value("gateway_requests_total", {
        "dialect": "v2", "listener": "now_test", "route": "ModelInfer", "model": "", "outcome": outcome,
        "status": status}) or 0.0


@pytest.fixture
def edge():
    return Edge("v2", "now_test", DefaultRendering(), Admission(2), 30.0, 600.0)


def test_an_answer_and_its_trailers_admission_held_meanwhile(edge):
    begun = []
    now = edge.unary_now("ModelInfer", lambda request, call, done: begun.append((request, call, done)) or Handle())
    before = _count("ok", "OK")
    rpc = FakeRpc(metadata=(("x-request-id", "abc"),), remaining=5.0)
    assert now(rpc) is True
    request, call, done = begun[0]
    assert request == b"req" and not rpc.messages and rpc.task is not None and not rpc.task.done()
    assert call.request_id == "abc" and call.deadline - call.start <= 5.0  # the client's deadline, shorter
    assert edge.admission.inflight == 1
    done(b"answer")
    assert rpc.answer == ("reply", b"answer", (("x-request-id", "abc"),))
    assert edge.admission.inflight == 0 and rpc.task.done()
    assert _count("ok", "OK") == before + 1
    done(b"again")  # a second end is nothing
    assert rpc.answer[1] == b"answer"


def test_a_failure_is_answered_in_the_dialects_status(edge):
    begun = []
    now = edge.unary_now("ModelInfer", lambda request, call, done: begun.append(done) or Handle(),
                         upstream_error=lambda exc: GatewayError(ErrorKind.NOT_FOUND, f"no: {exc}"))
    rpc = FakeRpc()
    now(rpc)
    begun[0](ValueError("model"))
    kind, code, details, trailing = rpc.answer
    assert (kind, code, details) == ("end", grpc.StatusCode.NOT_FOUND, "no: model")
    assert dict(trailing)["x-request-id"]  # the generated id, as Edge.unary's abort sends it
    assert edge.admission.inflight == 0


def test_a_call_that_cannot_begin_at_once_is_the_tasks(edge):
    now = edge.unary_now("ModelInfer", lambda request, call, done: None)
    rpc = FakeRpc()
    assert now(rpc) is False
    assert list(rpc.messages) == [b"req"] and rpc.task is None and rpc.answer is None
    assert edge.admission.inflight == 0


def test_a_bug_is_internal_and_logged(edge, caplog):
    def begin(request, call, done):
        raise RuntimeError("bug in begin")

    rpc = FakeRpc()
    assert edge.unary_now("ModelInfer", begin)(rpc) is True
    assert rpc.answer[:3] == ("end", grpc.StatusCode.INTERNAL, "Internal error")
    assert "unexpected error" in caplog.text and edge.admission.inflight == 0
    begun = []

    def broken(exc):
        raise RuntimeError("bug in upstream_error")

    rpc = FakeRpc()
    edge.unary_now("ModelInfer", lambda request, call, done: begun.append(done) or Handle(), upstream_error=broken)(rpc)
    begun[0](ValueError("x"))
    assert rpc.answer[:3] == ("end", grpc.StatusCode.INTERNAL, "Internal error")
    assert edge.admission.inflight == 0


def test_the_deadline_and_the_servers_stop_cancel_the_upstream_call(edge):
    handles = []
    now = edge.unary_now("ModelInfer", lambda request, call, done: handles.append(Handle()) or handles[-1])
    before = _count("cancelled", "CANCELLED")
    rpc = FakeRpc()
    now(rpc)
    rpc.expired = True  # the h2 server's deadline timer
    rpc.task.cancel()
    assert handles[0].cancelled and rpc.answer == ("end", grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", ())
    rpc = FakeRpc()
    now(rpc)
    rpc.task.cancel()  # the server stopping
    assert handles[1].cancelled and rpc.answer == ("end", grpc.StatusCode.CANCELLED, "Cancelled", ())
    assert edge.admission.inflight == 0 and _count("cancelled", "CANCELLED") == before + 2


def test_over_the_in_flight_limit_the_overloaded_answer(edge):
    begun = []
    now = edge.unary_now("ModelInfer", lambda request, call, done: begun.append(done) or Handle())
    rpcs = [FakeRpc() for _ in range(3)]
    assert all(now(r) for r in rpcs)
    assert len(begun) == 2 and rpcs[2].answer[:2] == ("end", grpc.StatusCode.UNAVAILABLE)  # the limit is 2
    for done in begun:
        done(b"ok")
    assert edge.admission.inflight == 0


def test_none_with_tracing_on(edge):
    edge.tracer = object()
    assert edge.unary_now("ModelInfer", lambda *a: Handle()) is None
