"""Raw HTTP/2 frame sequences, valid and INVALID, against a live h2serve listener (``grpc_server:
h2``; tests/h2target.py, a process of its own so that a hung loop is seen, not shared): wrong
lengths, bad stream ids, settings out of range, padding past the payload, HPACK garbage and HPACK
bombs, CONTINUATION games, window games, DATA past the advertised window. For each sequence:

- no exception leaves the server's frame handling (its log stays free of tracebacks and of
  asyncio's "Exception in callback" / "Fatal error" lines);
- what the server holds for its connections (tests/h2target.py ``held_bytes``: every object
  reachable from them, the transports' write buffers included) stays within what the client sent
  and the server advertised (its connection window), 5/4 of it for a growing buffer's slack, plus
  a fixed allowance, so no small input makes it hold much more (an HPACK bomb would);
- DATA past the windows the server advertised (SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_UPDATE) is not
  taken silently: RST_STREAM or GOAWAY with an error code, or the connection closed;
- the loop still answers a second, well-behaved connection.

``make test`` runs tests/fuzz/profile.py's modest, derandomized count; ``FUZZ_EXAMPLES=N`` a soak.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import h2raw as R
from tests.fuzz.profile import FUZZ
from tests.h2target import SINK, STREAM, UNARY, Target

PATHS = (UNARY, STREAM, SINK, "/no.Such/Method")
ALLOWANCE = 256 << 10  # the HPACK table, settings, a few small answers and what a stream's state weighs
STREAM_WINDOW_BURST = 9 << 20  # past any stream window a server advertises by default (ours: 8 MiB)
_BAD_LOG = re.compile(r"Traceback|Exception in callback|Fatal error|Error on reading|Task exception was never retrieved")

U31 = (1 << 31) - 1
sids = st.sampled_from([0, 1, 2, 3, 5, 7, 9, 101, U31]) | st.integers(0, 0xFFFFFFFF)
interesting = st.sampled_from([0, 1, 5, 6, 7, 8, 16383, 16384, 16385, 65535, 65536, (1 << 24) - 1, 1 << 24,
                               U31, U31 + 1, 0xFFFFFFFF])


@st.composite
def headers_frame(draw):
    sid = draw(sids)
    kind = draw(st.sampled_from(["request", "garbage", "bomb", "trailer", "pseudo_in_trailer", "upper"]))
    if kind == "bomb":  # a call whose fields enter the dynamic table, then one of one-byte indexes only
        size = draw(st.sampled_from([16, 1024, 4000]))
        first = (R.literal(":path", draw(st.sampled_from([SINK, UNARY])), indexed=True)  # 64 after the next two
                 + R.literal("content-type", "application/grpc", indexed=True) + R.literal("x-big", "v" * size, indexed=True))
        second = b"\x83\x86\xc0\xbf" + b"\xbe" * draw(st.integers(1, 4000))  # POST, http, :path, content-type, x-big...
        return (R.frame(R.HEADERS, R.END_HEADERS, sid, b"\x83\x86" + first)
                + R.frame(R.HEADERS, R.END_HEADERS, sid + 2, second))
    if kind == "request":
        block = R.request_block(draw(st.sampled_from(PATHS)),
                                draw(st.lists(st.tuples(st.sampled_from(["x-a", "grpc-timeout", "grpc-encoding", "te"]),
                                                        st.sampled_from(["1", "1S", "gzip", "bogus", ""])), max_size=3)))
    elif kind == "garbage":
        block = draw(st.binary(max_size=64))
    elif kind == "trailer":
        block = R.literal("x-trailer", "1")
    elif kind == "pseudo_in_trailer":
        block = R.literal(":path", UNARY)
    else:
        block = R.request_block(UNARY, (("X-Upper", "1"),))
    flags = draw(st.sampled_from([R.END_HEADERS, R.END_HEADERS | R.END_STREAM, 0, R.END_STREAM])) \
        | draw(st.sampled_from([0, 0, R.PADDED, R.PRIORITY_FLAG, R.PADDED | R.PRIORITY_FLAG]))
    payload = block
    if flags & R.PRIORITY_FLAG:
        payload = struct.pack(">IB", draw(st.sampled_from([0, sid, 1, 3])), 16) + payload
    if flags & R.PADDED:
        pad = draw(st.integers(0, 255))
        payload = bytes((pad,)) + payload + b"\x00" * draw(st.sampled_from([pad, 0, max(0, pad - 1)]))
    out = [R.frame(R.HEADERS, flags, sid, payload)]
    if not flags & R.END_HEADERS:  # CONTINUATION games: on its stream or another, empty, many, interleaved
        for _ in range(draw(st.integers(0, 5))):
            out.append(R.frame(draw(st.sampled_from([R.CONTINUATION, R.CONTINUATION, R.DATA, R.PING])),
                               draw(st.sampled_from([0, R.END_HEADERS])),
                               draw(st.sampled_from([sid, sid, 0, sid + 2])),
                               draw(st.sampled_from([b"", b"\x82", R.literal("x-c", "1"), b"\xbe" * 100]))))
    return b"".join(out)


@st.composite
def data_frame(draw):
    sid = draw(sids)
    flags = draw(st.sampled_from([0, R.END_STREAM, R.PADDED, R.PADDED | R.END_STREAM]))
    body = draw(st.sampled_from([R.message(b"hi"), R.message(struct.pack(">II", 3, 100)), b"", b"\x00\x00",
                                 b"\x00\xff\xff\xff\xff", b"\x01" + struct.pack(">I", 3) + b"abc",
                                 R.message(b"a") * 3])) if draw(st.booleans()) else draw(st.binary(max_size=32))
    if flags & R.PADDED:
        pad = draw(st.integers(0, 255))
        body = bytes((pad,)) + body + b"\x00" * draw(st.sampled_from([pad, 0]))
    return R.frame(R.DATA, flags, sid, body)


window_bursts = st.tuples(st.sampled_from([1, 3, 5]), st.sampled_from([UNARY, SINK]))


def burst_bytes(sid: int, path: str) -> bytes:
    """DATA past the stream window advertised: a call, one message announced larger than the
    window (never whole, so nothing is consumed), then more than the window in full frames
    without waiting for any WINDOW_UPDATE."""
    head = R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(path))
    chunk = 16384
    body = (b"\x00" + struct.pack(">I", 90 << 20)).ljust(STREAM_WINDOW_BURST, b"\x00")
    return head + b"".join(R.frame(R.DATA, 0, sid, body[i:i + chunk]) for i in range(0, len(body), chunk))


other_frames = st.one_of(
        st.builds(lambda pairs, ack, sid: R.frame(R.SETTINGS, R.ACK if ack else 0, sid,
                                                  b"".join(struct.pack(">HI", k, v & 0xFFFFFFFF) for k, v in pairs)),
                  st.lists(st.tuples(st.integers(0, 9), interesting), max_size=4), st.booleans(),
                  st.sampled_from([0, 0, 1])),
        st.builds(lambda sid, inc, n: R.frame(R.WINDOW_UPDATE, 0, sid, struct.pack(">I", inc & 0xFFFFFFFF)[:n]),
                  sids, interesting, st.sampled_from([4, 4, 2, 0])),
        st.builds(lambda ack, sid, n: R.frame(R.PING, R.ACK if ack else 0, sid, b"p" * n),
                  st.booleans(), st.sampled_from([0, 0, 1]), st.sampled_from([8, 8, 3, 0, 9])),
        st.builds(lambda sid, code, n: R.frame(R.RST_STREAM, 0, sid, struct.pack(">I", code)[:n] + b"\x00" * max(0, n - 4)),
                  sids, st.integers(0, 14), st.sampled_from([4, 4, 3, 5])),
        st.builds(lambda sid, dep, n: R.frame(R.PRIORITY, 0, sid, (struct.pack(">I", dep) + b"\x10" + b"\x00" * 4)[:n]),
                  sids, sids, st.sampled_from([5, 5, 4, 6])),
        st.builds(lambda n: R.frame(R.GOAWAY, 0, 0, (b"\x00" * 8 + b"dbg")[:n]), st.sampled_from([8, 11, 4, 0])),
        st.builds(lambda sid: R.frame(R.PUSH_PROMISE, R.END_HEADERS, sid, struct.pack(">I", 2) + b"\x82"), sids),
        st.builds(lambda kind, flags, sid, payload: R.frame(kind, flags, sid, payload),
                  st.integers(10, 255), st.integers(0, 255), sids, st.binary(max_size=16)),
        st.builds(lambda kind, sid, claimed, payload: R.frame(kind, 0, sid, payload, length=claimed),  # a lying length
                  st.integers(0, 9), sids, st.sampled_from([0, 1, 7, 16385, (1 << 24) - 1]), st.binary(max_size=16)),
)


frames = st.one_of(headers_frame(), data_frame(), other_frames)
sequences = st.tuples(
    st.sampled_from(["settings", "settings", "none", "bad_preface"]),
    st.lists(frames, max_size=12),
    st.none() | st.none() | st.none() | window_bursts,
)


@pytest.fixture(scope="module")
def listener(tmp_path_factory):
    """[the h2serve listener, its log]: replaced by a fresh one after a sequence that hung it."""
    log = tmp_path_factory.mktemp("h2fuzz") / "listener.log"
    state = [Target("h2", log=log), log]
    yield state
    state[0].stop()


def _log_since(log, offset: int) -> str:
    with open(log) as f:
        f.seek(offset)
        return f.read()


@FUZZ
@given(sequences)
def test_h2serve_survives_any_frame_sequence(listener, sequence):
    target, log = listener
    start, body, burst = sequence
    offset = log.stat().st_size
    wire = {"settings": R.PREFACE + R.settings(), "none": R.PREFACE,
            "bad_preface": R.PREFACE[:-3] + b"xyz" + R.settings()}[start] + b"".join(body)
    try:
        sock = socket.create_connection(("127.0.0.1", target.port), timeout=5)
        sent = 0
        with sock:
            try:
                sock.sendall(wire)
                sent += len(wire)
                if burst is not None:
                    data = burst_bytes(*burst)
                    sock.sendall(data)
                    sent += len(data)
            except OSError:
                pass  # the server closed first: what it said is read below
            got, closed = R.read_frames(sock, quiet=0.05, limit=3.0)
            held, _ = target.held()
            advertised = 65535 + sum(int.from_bytes(f.payload[:4], "big") for f in got
                                      if f.kind == R.WINDOW_UPDATE and f.sid == 0 and len(f.payload) == 4)
            # a buffer that grows is over-allocated (bytearray: about 1/8), hence the 5/4
            assert held <= min(sent, advertised) * 5 // 4 + ALLOWANCE, f"holds {held} bytes after {sent} sent ({advertised} advertised)"
            if burst is not None and not closed:
                sid, deadline = burst[0], time.monotonic() + 5
                while True:  # what the server says about the burst, read until it has said enough (load)
                    granted = sum(int.from_bytes(f.payload[:4], "big") for f in got
                                  if f.kind == R.WINDOW_UPDATE and f.sid == sid and len(f.payload) == 4)
                    window = next((v for f in got if f.kind == R.SETTINGS and not f.flags & R.ACK
                                   for k, v in (struct.unpack_from(">HI", f.payload, i) for i in range(0, len(f.payload) - 5, 6))
                                   if k == R.INITIAL_WINDOW_SIZE), 65535)
                    refused = closed or any(f.kind == R.GOAWAY or f.kind == R.RST_STREAM and f.sid == sid
                                            and f.payload != b"\x00\x00\x00\x00" for f in got)
                    if refused or STREAM_WINDOW_BURST <= window + granted or time.monotonic() > deadline:
                        break
                    more, closed = R.read_frames(sock, quiet=0.2, limit=1.0)
                    got += more
                assert refused or STREAM_WINDOW_BURST <= window + granted, \
                    f"{STREAM_WINDOW_BURST} bytes taken on stream {sid} past a window of {window} + {granted}"
        assert R.good_call(target.port, b"still there", timeout=10) == b"still there"
    except (TimeoutError, R.CallFailed, AssertionError):
        if not target.alive() or _hung(target):
            target.stop()
            listener[0] = Target("h2", log=log)
        raise
    text = _log_since(log, offset)
    assert not _BAD_LOG.search(text), text[-3000:]


def _hung(target) -> bool:
    try:
        target.held(timeout=3)
    except TimeoutError:
        return True
    return False
