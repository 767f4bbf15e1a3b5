"""MindIE's ``/dresult`` record stream (reference §2.5): framing on D, parsing on the coordinator.

    record := "reqId:" ID NUL KIND ":" BODY NUL  |  "ka:heartbeat" NUL
    KIND   := data | lastData | error | retry | close

BODY is exactly the bytes the user receives next (so an SSE chunk shows as ``data:data: {...}``).
D writes a ``reqId`` record and its payload record in one write (one HTTP chunk), because the
coordinator's parser resets its ``reqId`` state at every HTTP chunk. Parsing: split on NUL, where a
run of NULs is one delimiter whose body keeps all but the last NUL (vLLM chunks end with NUL).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

DATA, LAST, ERROR, RETRY, CLOSE = "data", "lastData", "error", "retry", "close"
KINDS = (DATA, LAST, ERROR, RETRY, CLOSE)
HEARTBEAT = b"ka:heartbeat\0"
CLOSE_ID = "0xffffffffffffffff"
CLOSE_TEXT = "new connection is to established, close the old one."


def record(req_id: str, kind: str, body: bytes) -> bytes:
    return b"reqId:" + req_id.encode() + b"\0" + kind.encode() + b":" + body + b"\0"


def close_record() -> bytes:
    return record(CLOSE_ID, CLOSE, CLOSE_TEXT.encode())


@dataclass(frozen=True, slots=True)
class Record:
    req_id: str  # "" for heartbeats
    kind: str  # one of KINDS, or "ka"
    body: bytes


def _fields(chunk: bytes) -> Iterator[bytes]:
    """NUL-delimited fields; a run of n NULs ends a field that keeps n-1 of them."""
    i, n = 0, len(chunk)
    while i < n:
        j = chunk.find(b"\0", i)
        if j < 0:
            yield chunk[i:]  # unterminated: tolerated at the end of a chunk
            return
        k = j
        while k + 1 < n and chunk[k + 1] == 0:
            k += 1
        yield chunk[i:j] + b"\0" * (k - j)
        i = k + 1


def parse_chunk(chunk: bytes) -> list[Record]:
    """The records of one HTTP chunk (the reqId state does not cross chunks, as in MindIE-Motor)."""
    out: list[Record] = []
    req_id = ""
    for field in _fields(chunk):
        key, sep, body = field.partition(b":")
        if not sep:
            continue
        while body.startswith(b":"):  # a run of ':' collapses
            body = body[1:]
        name = key.decode("latin-1")
        if name == "reqId":
            req_id = body.decode("latin-1")
        elif name == "ka":
            out.append(Record("", "ka", body))
        elif name in KINDS:
            out.append(Record(req_id, name, body))
    return out
