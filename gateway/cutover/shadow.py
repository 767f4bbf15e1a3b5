"""The background side of a request, run and compared without ever touching the client's answer.

    runner = Shadow(dialect, recorder)
    pending = runner.start(model, decision, request_bytes, background)   # None: dropped (counted)
    ... the client's answer is produced and sent as if there were no shadow ...
    pending.settle(answer_or_thunk)                                      # hands the client's side over

``background`` is a coroutine function giving the other side's ``Answer`` (its errors decoded as
the dialect renders them). It runs in a task of its own once the client's side is settled, that
is once the client's answer is about to be written: the client's request never shares the loop,
the upstream connection or the model's queue with its own shadow, and nothing the shadow does
can reach the client's answer. ``settle`` takes the client's side as an ``Answer`` or as a
function that decodes it, called in the background task (the decoding is no part of the client's
time), or as a ``Wire`` (status, bytes, decoder): when both sides are Wires with the same status and
bytes, the answers match without either being decoded (the common case of a byte-exact dialect).

Bounds: at most ``shadow_concurrency`` background tasks per model in each worker (a request over
it is ``dropped`` and counted, never queued); each runs under ``shadow_timeout_s`` of its own (a
side that does not answer by then is that side's error), in a ``Call`` of its own (the request id
of the client's, the shadow's deadline), so the client's deadline, metrics and access line are the
client's alone. A client side never settled within its own deadline (the client went away) is
``dropped``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.call import Call, current, enter
from gateway.core.errors import GatewayError
from gateway.observe import metrics

from .compare import Answer, Wire, compare, failure, resolve, same_bytes
from .record import Recorder
from .routing import Decision

log = logging.getLogger("gateway.cutover")
MAX_MODELS = 1024  # per worker: the per-model counters are bounded like the metrics' model labels
Background = Callable[[], Awaitable[Answer | Wire]]


class Pending:
    """The client's side of one shadowed request, handed to its background task by ``settle``."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future):
        self._future = future

    def settle(self, answer: Answer | Wire | Callable[[], Answer]) -> None:
        """The client's answer: an Answer, a Wire (its bytes, decoded in the background task only
        when they differ from the other side's), or a function decoding it; once."""
        if not self._future.done():
            self._future.set_result(answer)

    def fail(self, status: str, error: str, body: bytes = b"") -> None:
        self.settle(failure(status, error, body))


class Shadow:
    def __init__(self, dialect: str, recorder: Recorder | None = None):
        self.dialect = dialect
        self.recorder = recorder
        self._inflight: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()

    def start(self, model: str, decision: Decision, request: bytes, background: Background) -> Pending | None:
        policy = decision.policy
        n = self._inflight.get(model, 0)
        if n >= policy.shadow_concurrency or (n == 0 and len(self._inflight) >= MAX_MODELS):
            metrics.observe_migration(self.dialect, model, decision.route, "dropped")
            return None
        self._inflight[model] = n + 1
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        call = current()
        rid = call.request_id if call is not None else ""
        wait = max(policy.shadow_timeout_s, call.remaining(True) if call is not None else 0.0)
        task = loop.create_task(self._run(model, decision, request, background, future, rid, wait))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return Pending(future)

    def count(self, model: str, route: str, outcome: str) -> None:
        """An outcome decided without a background task (``skipped``: a request not comparable)."""
        metrics.observe_migration(self.dialect, model, route, outcome)

    async def _run(self, model: str, decision: Decision, request: bytes, background: Background,
                   future: asyncio.Future, rid: str, wait: float) -> None:
        policy = decision.policy
        timeout = policy.shadow_timeout_s
        try:
            try:  # the client's side first: the background starts once the client is answered
                async with asyncio.timeout(wait):  # the client's own deadline, or the shadow's when longer
                    mine = await future
            except TimeoutError:
                metrics.observe_migration(self.dialect, model, decision.route, "dropped")
                return
            enter(Call(rid, "shadow", timeout, timeout))  # this task's context only
            side = decision.background
            try:
                async with asyncio.timeout(timeout):
                    other = await background()
            except TimeoutError:
                other = failure("DEADLINE_EXCEEDED", f"{side}: no answer within the shadow deadline ({timeout:g} s)")
            except GatewayError as exc:
                other = failure(exc.kind.value, exc.message)
            except Exception as exc:  # noqa: BLE001 - the background side's bug is counted, never raised
                log.warning("%s %s: the %s side failed in the background: %r", self.dialect, model, side, exc)
                other = failure("INTERNAL", f"{type(exc).__name__}")
            if same_bytes(mine, other):  # the same status and bytes: equal in every value, nothing to decode
                metrics.observe_migration(self.dialect, model, decision.route, "match")
                return
            try:
                mine = resolve(mine)
            except Exception as exc:  # noqa: BLE001 - an answer the dialect cannot read is counted
                mine = failure("UNREADABLE", f"{type(exc).__name__}: {exc}")
            try:
                other = resolve(other)
            except Exception as exc:  # noqa: BLE001
                other = failure("UNREADABLE", f"{type(exc).__name__}: {exc}")
            legacy, triton = (mine, other) if decision.answer == "legacy" else (other, mine)
            self.judge(model, decision.route, decision.policy, request, legacy, triton)
        except asyncio.CancelledError:  # the worker is stopping
            raise
        except Exception:  # noqa: BLE001 - never let a comparison bug reach the loop's handler silently
            log.exception("%s %s: shadow comparison failed", self.dialect, model)
        finally:
            n = self._inflight.get(model, 1) - 1
            if n <= 0:
                self._inflight.pop(model, None)
            else:
                self._inflight[model] = n

    def judge(self, model: str, route: str, policy, request: bytes, legacy: Answer, triton: Answer):
        """Compare two answers, count the outcome and the errors, record a mismatch; the Comparison."""
        cmp = compare(legacy, triton, policy.rtol, policy.atol)
        errors = [(name, d.max_abs, d.max_rel) for name, d in cmp.outputs.items() if d.max_abs or d.max_rel]
        metrics.observe_migration(self.dialect, model, route, cmp.outcome, errors, cmp.format)
        if cmp.outcome in ("mismatch", "legacy_error", "triton_error") and self.recorder is not None:
            self.recorder.record(model, route, cmp, request, legacy, triton)
        return cmp

    async def close(self, grace: float = 1.0) -> None:
        """Let the background tasks finish for ``grace`` seconds, then cancel what is left."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, left = await asyncio.wait(tasks, timeout=grace)
        for t in left:
            t.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
