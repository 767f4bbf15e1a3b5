"""Protobuf's wire format, by hand: varints, length-delimited fields and a scan of a message's
fields. For the messages the gateway writes or reads as bytes without protobuf's classes (KServe V2
requests and answers in gateway/upstream/wire.py, TF Serving's Predict in its dialect); what the
bytes mean stays with their message's owner."""

from __future__ import annotations

from google.protobuf.message import DecodeError

_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def varint(n: int) -> bytes:
    """A protobuf base-128 varint (non-negative ``n``)."""
    if n < 0x80:  # tags and short lengths: one byte
        return _ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def delimited(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2) of a protobuf message."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(a protobuf varint at ``data[pos]``, the offset after it); DecodeError when truncated or overlong."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def fields(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int, int]]:
    """(tag, start, payload start, end) of each field of the message in ``data[start:end]`` (the
    whole of ``data`` by default: its top-level fields); DecodeError: not a message."""
    found, pos, end = [], start, len(data) if end is None else end
    while pos < end:
        tag, p = read_varint(data, pos)
        wire = tag & 7
        if wire == 2:
            n, p = read_varint(data, p)
            q = p + n
        elif wire == 0:
            q = read_varint(data, p)[1]
        elif wire in (1, 5):
            q = p + (8 if wire == 1 else 4)
        else:
            raise DecodeError(f"unexpected wire type {wire}")
        if q > end:
            raise DecodeError("field runs past the end of the message")
        found.append((tag, pos, p, q))
        pos = q
    return found
