"""Issue 52's defects, one test each, as a hostile client sends them (raw frames, tests/h2raw.py)
to an h2serve listener in a process of its own (tests/h2target.py), so that a hung loop fails the
test instead of hanging it. Each failed on main at 2f2b3fb; after each, the listener still answers
a well-behaved call on a fresh connection."""

from __future__ import annotations

import socket
import struct

import pytest

from tests import h2raw as R
from tests.h2target import SINK, STREAM, UNARY, Target


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    log = tmp_path_factory.mktemp("h2defects") / "listener.log"
    t = Target("h2", log=log)
    t.log = log
    yield t
    t.stop()


def _open(port: int, *frames: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(R.PREFACE + R.settings() + b"".join(frames))
    return sock


def _still_serving(target) -> None:
    assert target.alive()
    assert R.good_call(target.port, b"after", timeout=10) == b"after"
    text = target.log.read_text()
    assert "Traceback" not in text and "Fatal error" not in text, text[-3000:]


def _stream_call(sid: int, count: int, size: int) -> bytes:
    return (R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(STREAM))
            + R.frame(R.DATA, R.END_STREAM, sid, R.message(struct.pack(">II", count, size))))


# -- 1. SETTINGS_MAX_FRAME_SIZE=0 -------------------------------------------------------------------
@pytest.mark.parametrize("when", ["after_first_answer", "before_headers"])
def test_max_frame_size_zero_is_a_protocol_error_not_a_hang(target, when):
    """Below 16,384 is a connection error PROTOCOL_ERROR (RFC 9113 6.5.2); main looped forever in
    ``_pump`` (after the first answer) or raised in ``header_frames`` (before it)."""
    if when == "before_headers":
        sock = _open(target.port, R.settings((R.MAX_FRAME_SIZE, 0)), _stream_call(1, 3, 100))
    else:
        sock = _open(target.port, _stream_call(1, 3, 100))
        got, _ = R.read_frames(sock, quiet=0.2, limit=3)
        assert any(f.kind == R.DATA and f.sid == 1 for f in got)
        sock.sendall(R.settings((R.MAX_FRAME_SIZE, 0)))
    with sock:
        got, _ = R.read_frames(sock, quiet=0.5, limit=5)
    assert R.goaway_code(got) == R.PROTOCOL_ERROR, got[-3:]
    _still_serving(target)


# -- 2. the HPACK bomb past the header-list limit ---------------------------------------------------
def test_hpack_bomb_of_indexed_fields_is_refused(target):
    """A 1 KiB field put in the dynamic table, then a 16 KiB block of its one-byte index: 16 MB of
    metadata on main (the indexed-only fast path skipped hpack's 64 KiB header-list limit). Refused
    (GOAWAY, or the stream reset/answered with an error) and nothing near that size held."""
    first = (b"\x83\x86" + R.literal(":path", SINK, indexed=True)
             + R.literal("content-type", "application/grpc", indexed=True) + R.literal("x-big", "v" * 1024, indexed=True))
    bomb = b"\x83\x86\xc0\xbf" + b"\xbe" * (16384 - 4)
    with _open(target.port, R.frame(R.HEADERS, R.END_HEADERS, 1, first), R.frame(R.HEADERS, R.END_HEADERS, 3, bomb)) as sock:
        got, closed = R.read_frames(sock, quiet=0.3, limit=5)
        held, _ = target.held()
        assert held < 256 << 10, f"{held} bytes held after a 16 KiB header block"
        refused = closed or R.goaway_code(got) is not None or any(
            f.kind == R.RST_STREAM and f.sid == 3 or f.kind == R.HEADERS and f.sid == 3 and f.flags & R.END_STREAM for f in got)
        assert refused, got
    _still_serving(target)


# -- 3. requests buffered without bound by a client that obeys flow control -------------------------
def test_a_unary_call_refuses_a_second_message_at_once(target):
    """main held every message of a unary call until END_STREAM (96 MiB of them in the issue)."""
    with _open(target.port, R.frame(R.HEADERS, R.END_HEADERS, 1, R.request_block(UNARY)),
               R.frame(R.DATA, 0, 1, R.message(b"a" * 1024) * 2)) as sock:
        got, closed = R.read_frames(sock, quiet=0.3, limit=5)
    refused = closed or any(f.kind == R.RST_STREAM and f.sid == 1 for f in got) or any(
        f.kind == R.HEADERS and f.sid == 1 and f.flags & R.END_STREAM for f in got)
    assert refused, got
    _still_serving(target)


def _windows(got, initial=None):
    stream = initial if initial is not None else next(
        (v for f in got if f.kind == R.SETTINGS and not f.flags & R.ACK
         for k, v in (struct.unpack_from(">HI", f.payload, i) for i in range(0, len(f.payload) - 5, 6))
         if k == R.INITIAL_WINDOW_SIZE), 65535)
    return stream


def test_obedient_calls_announcing_96_mib_each_are_bounded(target):
    """8 unary calls on one connection, each announcing a 96 MiB message, DATA sent only within
    the windows the server grants, for 3 s: main gave every window back as bytes arrived (832 MiB
    taken in 8 s). What the server has taken for calls it has not answered stays within one
    message of ``limits.max_request_bytes`` (100 MiB: one must always get through) and the windows
    of the others (docs/operations.md, "What one HTTP/2 connection can make a worker hold": 16 +
    16 MiB + 1 MiB a call); a call answered (here: INTERNAL, its message whole and more bytes
    after it) holds nothing more, and the next large message may then come."""
    import time

    sids = range(1, 17, 2)
    sock = _open(target.port, *(R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(UNARY)) for sid in sids))
    with sock:
        got, _ = R.read_frames(sock, quiet=0.2, limit=2)
        initial = _windows(got)
        windows = dict.fromkeys(sids, initial)
        conn = 65535 + sum(int.from_bytes(f.payload, "big") for f in got if f.kind == R.WINDOW_UPDATE and f.sid == 0)
        started, sent, chunk, end = set(), 0, 16384, time.monotonic() + 3
        open_bytes, peak = dict.fromkeys(sids, 0), 0  # bytes sent on calls not answered yet
        while time.monotonic() < end and windows:
            sock.settimeout(5)  # read_frames left a short one
            for sid in list(windows):
                while windows[sid] >= chunk and conn >= chunk:
                    head = b"\x00" + struct.pack(">I", 96 << 20) if sid not in started else b""
                    started.add(sid)
                    sock.sendall(R.frame(R.DATA, 0, sid, head + b"\x00" * (chunk - len(head))))
                    windows[sid] -= chunk
                    conn -= chunk
                    sent += chunk
                    open_bytes[sid] += chunk
                    peak = max(peak, sum(open_bytes.values()))
            got, closed = R.read_frames(sock, quiet=0.02, limit=0.05)
            for f in got:
                if f.kind == R.WINDOW_UPDATE and len(f.payload) == 4:
                    if f.sid == 0:
                        conn += int.from_bytes(f.payload, "big")
                    elif f.sid in windows:
                        windows[f.sid] += int.from_bytes(f.payload, "big")
                elif f.kind == R.RST_STREAM or f.kind == R.HEADERS and f.flags & R.END_STREAM:
                    windows.pop(f.sid, None)  # the call is over: nothing of it is held
                    open_bytes[f.sid] = 0
            if closed:
                break
        held, _ = target.held()
    taken = (100 << 20) + (16 << 20) * 2 + 8 * (1 << 20)  # the documented bound on bytes taken
    assert peak <= taken + (1 << 20), f"{peak >> 20} MiB taken for calls not answered ({sent >> 20} MiB in all)"
    # held: twice that at most, the message's buffer growing as it arrives (the docs say so)
    assert held <= 2 * taken, f"{held >> 20} MiB held ({sent >> 20} MiB sent within the windows granted)"
    _still_serving(target)


# -- 4. malformed frames: the RFC's connection errors, never an exception ----------------------------
MALFORMED = {
    "window_update_of_0": (R.window_update(0, 0), R.PROTOCOL_ERROR),
    "settings_7_bytes": (R.frame(R.SETTINGS, 0, 0, b"\x00" * 7), R.FRAME_SIZE_ERROR),
    "settings_on_a_stream": (R.frame(R.SETTINGS, 0, 1, b""), R.PROTOCOL_ERROR),
    "initial_window_2_31": (R.settings((R.INITIAL_WINDOW_SIZE, 1 << 31)), R.FLOW_CONTROL_ERROR),
    "ping_3_bytes": (R.frame(R.PING, 0, 0, b"abc"), R.FRAME_SIZE_ERROR),
    "window_update_2_bytes": (R.frame(R.WINDOW_UPDATE, 0, 0, b"\x00\x01"), R.FRAME_SIZE_ERROR),
    "padded_headers_empty": (R.frame(R.HEADERS, R.PADDED | R.END_HEADERS, 1, b""), None),  # PROTOCOL_ERROR or FRAME_SIZE_ERROR
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frame_is_the_rfcs_connection_error(target, case):
    bad, code = MALFORMED[case]
    with _open(target.port, bad) as sock:
        got, _ = R.read_frames(sock, quiet=0.5, limit=5)
    found = R.goaway_code(got)
    if code is None:
        assert found in (R.PROTOCOL_ERROR, R.FRAME_SIZE_ERROR), got
    else:
        assert found == code, (found, got)
    _still_serving(target)
