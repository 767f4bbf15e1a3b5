"""Unary ModelInfer requests carried as messages of a few long-lived ModelStreamInfer streams.

A unary gRPC call costs grpc.aio (and Triton's gRPC front end) a call object, metadata, its
completion-queue operations and an HTTP/2 stream opened and closed; a message on a stream that is
already open costs a write and a read. ``Mux`` keeps ``streams`` such streams per worker (opened
when first needed, each a call of its own, so a ``round_robin`` channel puts them on successive
Triton replicas) and sends each request on the next one in turn; one reader task per stream hands
each answer to the request whose ``id`` it carries.

Only what a stream gives exactly as a unary call does is sent this way (``TritonUpstream.infer_bytes``
decides, ``Mux.route`` here): a model whose metadata says it is not decoupled (one answer per
request), a request no larger than ``max_bytes`` (a large message would hold the small ones behind
it on the same HTTP/2 stream) whose inputs are all in it (none in shared memory), with an ``id`` of its own that no other request on that stream
carries at the time (the answer and any error text name it, as the unary answer would), and no
trace context to send (a stream has one set of headers). Everything else is a unary call.

What the caller sees matches the unary call: the ModelInferResponse's bytes, or a ``GatewayError``
of the kind the unary call's status gives (``status_of``: Triton writes only the text of an error
into the stream, and its texts say which status the unary call has); the request's deadline ends
the wait with DEADLINE_EXCEEDED; a caller that goes away stops waiting. Triton cannot cancel one
message of a stream, so the request runs on there (as it would after a unary call's deadline). A
stream that breaks (Triton restarted, the connection lost) fails the requests in flight on it with
UNAVAILABLE, never sent again; the next request opens a new stream.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging

import grpc
from google.protobuf.message import DecodeError

from gateway.core.errors import ErrorKind, GatewayError, from_grpc_code
from gateway.core.protowire import read_varint

from . import direct

log = logging.getLogger(__name__)

MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
_ID_TAG = 0x1A  # ModelInferRequest.id and ModelInferResponse.id: field 3, length-delimited
_ERROR_TAG = 0x0A  # ModelStreamInferResponse.error_message: field 1
_ANSWER_TAG = 0x12  # ModelStreamInferResponse.infer_response: field 2
_PARAMS_TAG = 0x22  # ModelInferResponse.parameters: field 4, one map entry each
# the entry a stream's answer carries and the unary call's does not (triton_final_response: true)
_FINAL_ENTRY = b'"\x1b\n\x15triton_final_response\x12\x02\x08\x01'
_last_logged = [""]
BROKEN = "the stream to Triton broke with the request in flight"


def _skip(data, tag: int, pos: int) -> int:
    """The offset after the value of a field of wire type ``tag & 7`` that starts at ``pos``."""
    wire = tag & 7
    if wire == 2:
        n, pos = read_varint(data, pos)
        return pos + n
    if wire == 0:
        return read_varint(data, pos)[1]
    if wire in (1, 5):
        return pos + (8 if wire == 1 else 4)
    raise ValueError(f"wire type {wire}")


def request_id(data) -> bytes:
    """The ``id`` of a serialized ModelInferRequest (the last one written, as protobuf reads it;
    b"" when it has none); ValueError when ``data`` is no message. One-byte tags and lengths (every
    field but large contents) are read inline: this runs once a request."""
    found, pos, end = b"", 0, len(data)
    try:
        while pos < end:
            tag = data[pos]
            if tag & 7 == 2 and tag < 0x80:  # length-delimited, field 1-15
                n = data[pos + 1]
                if n < 0x80:
                    pos += 2
                else:
                    n, pos = read_varint(data, pos + 1)
                if tag == _ID_TAG:
                    found = data[pos:pos + n]
                pos += n
            else:
                tag, pos = read_varint(data, pos)
                pos = _skip(data, tag, pos)
    except (IndexError, DecodeError):
        raise ValueError("truncated message") from None
    if pos != end:
        raise ValueError("field runs past the end of the message")
    return bytes(found)


def split_answer(data: bytes) -> tuple[bytes, bytes, str]:
    """A ModelStreamInferResponse's (id of its infer_response, infer_response's bytes as the unary
    call answers them, error_message): less the ``triton_final_response`` parameter the stream adds."""
    error, start, end, pos, size = "", 0, 0, 0, len(data)
    while pos < size:
        tag, pos = read_varint(data, pos)
        if tag == _ERROR_TAG or tag == _ANSWER_TAG:
            n, pos = read_varint(data, pos)
            if tag == _ERROR_TAG:
                error = data[pos:pos + n].decode("utf-8", "replace")
            else:
                start, end = pos, pos + n
            pos += n
        else:
            pos = _skip(data, tag, pos)
    key, pos = b"", start
    while pos < end:  # model_name 1, model_version 2, id 3, parameters 4: all before the outputs
        tag = data[pos]
        if tag > _PARAMS_TAG:
            break
        if tag == _PARAMS_TAG and data.startswith(_FINAL_ENTRY, pos):
            return key, data[start:pos] + data[pos + len(_FINAL_ENTRY):end], error
        n = data[pos + 1]
        if tag & 7 == 2 and n < 0x80:
            pos += 2
        else:
            tag, pos = read_varint(data, pos)
            if tag & 7 != 2:
                pos = _skip(data, tag, pos)
                continue
            n, pos = read_varint(data, pos)
        if tag == _ID_TAG:
            key = data[pos:pos + n]
        pos += n
    return key, data[start:end], error


# Triton's error texts → the status its unary ModelInfer answers with (server: TRITONSERVER_Error
# codes through its gRPC front end): the phrases of its request checks (a client's mistake), in
# order, first match wins; any other text is INTERNAL, as a model's or its backend's failure is
# (a python stub gone with Triton: "unable to find expected response output", say). The
# differential test (tests/contract/test_streammux.py) holds each to the unary call on the real Triton.
_STATUS_PHRASES: tuple[tuple[str, grpc.StatusCode], ...] = (
    ("failed to process the request", grpc.StatusCode.INTERNAL),  # the model's own words may follow
    ("has no available versions", grpc.StatusCode.UNAVAILABLE),
    ("request for unknown model", grpc.StatusCode.NOT_FOUND),
    ("unexpected inference input", grpc.StatusCode.INVALID_ARGUMENT),
    ("unexpected inference output", grpc.StatusCode.INVALID_ARGUMENT),
    ("unexpected shape for input", grpc.StatusCode.INVALID_ARGUMENT),
    ("input byte size mismatch", grpc.StatusCode.INVALID_ARGUMENT),
    ("inputs but got", grpc.StatusCode.INVALID_ARGUMENT),
    ("data-type is", grpc.StatusCode.INVALID_ARGUMENT),
    ("batch-size must be", grpc.StatusCode.INVALID_ARGUMENT),
    ("invalid value type for", grpc.StatusCode.INVALID_ARGUMENT),
    ("does not support batching", grpc.StatusCode.INVALID_ARGUMENT),
)


def status_of(message: str) -> grpc.StatusCode:
    """The status Triton's unary ModelInfer gives with ``message`` (INTERNAL: a model's own failure)."""
    low = message.lower()
    for words, code in _STATUS_PHRASES:
        if words in low:
            return code
    return grpc.StatusCode.INTERNAL


class _Lane:
    """One stream: its call, the requests waiting for an answer (by id), the messages to write."""

    __slots__ = ("call", "waiting", "queue", "wake", "reader", "writer", "broken")

    def __init__(self, call):
        self.call = call
        self.waiting: dict[bytes, asyncio.Future] = {}
        self.queue: collections.deque = collections.deque()
        self.wake: asyncio.Future | None = None
        self.broken = False
        self.reader = asyncio.ensure_future(self._read())
        self.writer = asyncio.ensure_future(self._write())

    def send(self, key: bytes, data: bytes, fut: asyncio.Future) -> None:
        self.waiting[key] = fut
        self.queue.append((data, fut))
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _write(self) -> None:
        """Messages in order, one write at a time (a stream takes one); a writer of its own, so that
        a caller that goes away cannot cancel the stream's write, and with it every request on it."""
        call, queue, loop = self.call, self.queue, asyncio.get_running_loop()
        write = call.write  # the first write waits for the stream to be open; then grpc.aio's Cython call
        try:
            while True:
                while queue:
                    data, fut = queue.popleft()
                    if not fut.done():  # gone (deadline, client) before it was written: not sent
                        await write(data)
                        write = direct.stream_op(call, "send_serialized_message") or write
                self.wake = loop.create_future()
                await self.wake
                self.wake = None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the stream broke; the reader fails the waiting
            self._break(exc)

    async def _read(self) -> None:
        call, waiting = self.call, self.waiting
        read = call.read  # the first read waits for the stream to be open; then grpc.aio's Cython call
        exc: BaseException | None = None
        try:
            while True:
                msg = await read()
                read = direct.stream_op(call, "receive_serialized_message") or read
                if msg is grpc.aio.EOF:
                    break
                key, answer, error = split_answer(msg)
                fut = waiting.pop(key, None)
                if fut is not None and not fut.done():
                    fut.set_result((answer, error))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001
            exc = e
        finally:
            self._break(exc)

    def _break(self, exc: BaseException | None) -> None:
        failed = GatewayError(ErrorKind.UNAVAILABLE, BROKEN)
        if isinstance(exc, grpc.aio.AioRpcError) and exc.code() is grpc.StatusCode.UNAVAILABLE:
            failed = from_grpc_code(exc.code(), exc.details())  # Triton unreachable: the unary call's words
        elif not self.broken and exc is not None and not isinstance(exc, asyncio.CancelledError):
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if text != _last_logged[0]:  # each new reason once in a row, not once a request
                _last_logged[0] = text
                log.warning("stream to Triton broke: %s", text)
        self.broken = True
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(failed)
        self.waiting.clear()
        self.queue.clear()
        if not self.call.done():
            self.call.cancel()
        for task in (self.reader, self.writer):
            if task is not asyncio.current_task() and not task.done():
                task.cancel()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded"))


class Mux:
    """``streams`` ModelStreamInfer streams on ``channel``, requests up to ``max_bytes`` on them."""

    def __init__(self, channel: grpc.aio.Channel, streams: int = 2, max_bytes: int = 64 << 10):
        self._open = channel.stream_stream(MODEL_STREAM_INFER)  # bytes in, bytes out
        self.max_bytes = max_bytes
        self._lanes: list[_Lane | None] = [None] * max(1, streams)
        self._turn = itertools.cycle(range(len(self._lanes)))

    def _lane(self, i: int) -> _Lane:
        lane = self._lanes[i]
        if lane is None or lane.broken:
            lane = self._lanes[i] = _Lane(self._open())
        return lane

    def route(self, data) -> tuple[int, bytes] | None:
        """Whether ``data`` (a serialized ModelInferRequest) goes on a stream: (the next stream in
        turn, the request's id) when it does, for ``infer``; None when it is a unary call."""
        if len(data) > self.max_bytes or b"shared_memory_region" in data:
            return None  # large, or an input in shared memory (its region must outlive Triton's read)
        try:
            key = request_id(data)
        except ValueError:
            return None  # Triton gives the unary call's own answer to what is no message
        i = next(self._turn)
        lane = self._lanes[i]
        if not key or (lane is not None and not lane.broken and key in lane.waiting):
            return None
        return i, key

    async def infer(self, route: tuple[int, bytes], data: bytes, timeout: float | None) -> bytes:
        """The answer's bytes to ``data`` sent on the stream ``route`` chose; GatewayError as the
        unary call's status would give it."""
        i, key = route
        lane = self._lane(i)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        timer = loop.call_later(timeout, _expire, fut) if timeout is not None else None
        lane.send(key, data, fut)
        try:
            answer, error = await fut
        finally:
            if timer is not None:
                timer.cancel()
            if lane.waiting.get(key) is fut:
                del lane.waiting[key]
        if error:
            raise from_grpc_code(status_of(error), error)
        return answer

    async def close(self) -> None:
        for lane in self._lanes:
            if lane is not None:
                lane._break(None)
        self._lanes = [None] * len(self._lanes)
