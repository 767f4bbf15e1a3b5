"""``upstream.cancel``: what becomes of a call to Triton whose caller went away (the client
disconnected or reset its stream, and the handler awaiting the call was cancelled).

    streams  (the default) a ModelStreamInfer stream is cancelled: Triton passes it on to the model,
             a generation stops; a unary call is left to finish and its answer dropped (it ends in
             milliseconds: cancelling it buys little, and it is what Tritons before 2.59.0 crash on)
    all      both cancelled
    none     neither: a unary call finishes, a stream is read to its end, their answers dropped

A call's deadline ends it in every mode (Triton holds the same ``grpc-timeout``). Each transport
applies the mode where the caller's cancellation reaches it: gateway/h2/client.py
(``Connection.call``'s ``cancel``), grpc.aio's unary call (gateway/upstream/unary.py ``over_grpc``;
the call otherwise awaited in a task of its own, ``uncancelled``), and for streams ``finish`` and ``Reader``
here, used by TritonUpstream.stream, the V2 passthrough and V2 generate. A stream whose final
response was read is never cancelled: it is left to end with Triton's trailers (a cancellation
after the final response is one more of the races those Tritons crash on).
"""

from __future__ import annotations

import asyncio

import grpc

from gateway.h2 import client as h2call

MODES = ("streams", "all", "none")
_draining: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones


def _dropped(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an answer (or error) nobody waits for any more is not logged


async def uncancelled(call):
    """``call`` awaited in a task of its own: a caller that goes away stops waiting, and the call
    runs on to its end (or deadline), its answer dropped (a grpc.aio unary call under streams or none)."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_dropped)
        raise


def unary_cancelled(mode: str) -> bool:
    """Whether a unary call whose caller went away is cancelled."""
    return mode == "all"


def streams_cancelled(mode: str) -> bool:
    """Whether a stream whose caller went away is cancelled."""
    return mode != "none"


class Reader:
    """A stream's messages read so that their caller's going away does not cancel the stream
    (``none``; grpc.aio and h2call cancel a call whose read is cancelled): each read awaited in a
    task of its own, the one in flight kept in ``pending`` for ``finish``. An async iterator, as the
    call is."""

    __slots__ = ("call", "pending")

    def __init__(self, call):
        self.call = call
        self.pending: asyncio.Future | None = None

    async def read(self):
        fut = self.pending = asyncio.ensure_future(self.call.read())
        item = await asyncio.shield(fut)
        self.pending = None
        return item

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.read()
        if item is grpc.aio.EOF:
            raise StopAsyncIteration
        return item


def finish(call, answered: bool, cancel: bool, reader: Reader | None = None) -> None:
    """The caller is through with a ModelStreamInfer ``call`` (grpc.aio's, or h2call.StreamCall).
    ``answered``: Triton's final response was read, so the stream is left to end with its trailers;
    otherwise it is cancelled when ``cancel``, else (``none``) half-closed and read to its end in
    the background, its messages dropped (``reader``: the read in flight when the caller left)."""
    h2 = type(call) is h2call.StreamCall
    if call.done():
        if h2:
            call.close(answered)  # only its deadline timer left to stop
        return
    if answered and h2:
        call.close(True)  # its trailers awaited without a task (h2call.StreamCall.close)
    elif answered or not cancel:
        task = asyncio.ensure_future(_drain(call, reader.pending if reader is not None else None))
        _draining.add(task)
        task.add_done_callback(_draining.discard)
    else:
        call.cancel()


async def _drain(call, pending: asyncio.Future | None) -> None:
    """``call``'s remaining messages read and dropped until its end, its deadline or its failure."""
    try:
        if pending is not None and await pending is grpc.aio.EOF:
            return
        try:
            await call.done_writing()  # the request side closed: Triton ends the stream once its answers are out
        except Exception:  # noqa: BLE001 - a call fed by a request iterator, or one already half-closed
            pass
        while await call.read() is not grpc.aio.EOF:
            pass
    except asyncio.CancelledError:
        call.cancel()  # the worker stopping
        raise
    except Exception:  # noqa: BLE001 - ended by an error (deadline, Triton gone): nothing is waiting for it
        pass


# -- Tritons that crash on a cancellation ----------------------------------------------------------
# Triton's gRPC front end had cancellation races that end in SIGSEGV: server#7368 (fixed by #7840,
# in 2.54.0), #8034 (fixed by #8078, in 2.57.0) and a cancellation of a non-decoupled request between
# its response and its final flag (#8220, in 2.59.0). 2.59.0 (NGC 25.06) is the first release with
# all three (their commits are ancestors of its tag, and of no earlier one's).
FIXED = (2, 59, 0)
FIXED_NGC = "25.06"


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"2.51.0"`` → (2, 51, 0); None for what is not three dotted numbers ("2.54.0dev" reads as 2.54.0)."""
    pieces = version.strip().split(".")
    if len(pieces) != 3:
        return None
    parts = []
    for piece in pieces:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts)


def crash_warning(version: str, mode: str) -> str | None:
    """What to say when Triton ``version`` (its server metadata) is one known to crash when a call is
    cancelled, under ``upstream.cancel`` ``mode``; None when it is not, or nothing is cancelled."""
    found = version_tuple(version)
    if found is None or found >= FIXED or mode == "none":
        return None
    head = (f"Triton {version} is older than {'.'.join(map(str, FIXED))} (NGC {FIXED_NGC}), the first release with "
            f"the fixes of server#7368/#7840, #8034/#8078 and #8220: its gRPC front end can crash (SIGSEGV) when "
            f"a call is cancelled. Upgrade Triton to {FIXED_NGC} or later")
    if mode == "all":
        return (head + "; until then set upstream.cancel to streams (a unary call whose client went away is left "
                "to finish) or none (nothing is cancelled): it is all, so every such call is cancelled")
    return (head + "; until then upstream.cancel streams (the setting now) cancels only streams whose client "
            "went away, and none cancels nothing")
