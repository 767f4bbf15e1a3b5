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
def test_an_obedient_client_cannot_make_one_call_hold_more_than_a_window(target):
    """A unary call announcing a 96 MiB message, DATA sent only within the windows the server
    grants, for 3 s: main gave the window back as bytes arrived, so all 96 MiB were taken and held.
    The stream window advertised (8 MiB) plus one window granted is the most a call may hold before
    its message is whole and read."""
    sock = _open(target.port, R.frame(R.HEADERS, R.END_HEADERS, 1, R.request_block(UNARY)))
    with sock:
        got, _ = R.read_frames(sock, quiet=0.2, limit=2)
        stream = next((v for f in got if f.kind == R.SETTINGS and not f.flags & R.ACK
                       for k, v in (struct.unpack_from(">HI", f.payload, i) for i in range(0, len(f.payload) - 5, 6))
                       if k == R.INITIAL_WINDOW_SIZE), 65535)
        conn = 65535 + sum(int.from_bytes(f.payload, "big") for f in got if f.kind == R.WINDOW_UPDATE and f.sid == 0)
        body = b"\x00" + struct.pack(">I", 96 << 20)
        sent, closed, chunk = 0, False, 16384
        for _ in range(60):
            room = min(stream, conn)
            while room >= chunk:
                payload = (body if sent == 0 else b"") + b"\x00" * (chunk - (5 if sent == 0 else 0))
                sock.sendall(R.frame(R.DATA, 0, 1, payload))
                sent += chunk
                stream -= chunk
                conn -= chunk
                room -= chunk
            got, closed = R.read_frames(sock, quiet=0.05, limit=0.1)
            for f in got:
                if f.kind == R.WINDOW_UPDATE and len(f.payload) == 4:
                    inc = int.from_bytes(f.payload, "big")
                    if f.sid == 0:
                        conn += inc
                    elif f.sid == 1:
                        stream += inc
            if closed or any(f.kind == R.RST_STREAM and f.sid == 1 for f in got):
                break
        held, _ = target.held()
    assert sent <= 24 << 20, f"{sent >> 20} MiB taken on one call within the windows granted"
    assert held <= 24 << 20, f"{held >> 20} MiB held for one call"
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
