"""A loopback TCP forwarder in front of Triton's gRPC port, for contract tests that must make an
instance lose its Triton (``cut``) or stay mid-generation until the test acts (``hold``).

``hold("/ModelStreamInfer", n)``: from then on, each call whose ``:path`` ends so hands the
instance at most ``n`` of Triton's gRPC messages; the rest of that stream (later messages, the
trailers) is withheld while the call stays open and Triton generates on, unseen. Other calls
(readiness, metadata) and the connection's own frames flow. ``held`` is set once a call is held.
A generation thus cannot end before the test kills or stops its instance, however loaded the
machine is: no sleep decides what a test sees.

Both directions are read frame by frame: the instance's, after the client preface, to learn each
stream's ``:path`` (HPACK-decoded in order, before its bytes go on, so the path is known before
Triton can answer); Triton's, to count each stream's messages (5-byte prefix, then the body) and
cut a DATA frame where a withheld message begins."""

from __future__ import annotations

import socket
import threading

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, CONTINUATION = 0, 1, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20


class TcpProxy:
    def __init__(self, target_port: int):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.closed = False
        self.rule: tuple[str, int] | None = None
        self.held = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self, path_suffix: str, messages: int) -> None:
        """Calls whose ``:path`` ends with ``path_suffix`` get at most ``messages`` answers from now on."""
        self.rule = (path_suffix, messages)

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, upstream]
            paths: dict[int, str] = {}
            threading.Thread(target=self._pipe, args=(client, upstream, _Requests(paths)), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, _Answers(self, paths)), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, frames: _Frames):
        try:
            while data := src.recv(65536):
                if data := frames.feed(data):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the other thread
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass


class _Frames:
    """One direction of one connection, split into whole frames; ``frame`` says what goes on."""

    skip = 0  # bytes passed on before the first frame (the client preface)

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = bytearray()
        if self.skip:
            if len(self.buf) < self.skip:
                return b""
            assert self.buf.startswith(PREFACE), bytes(self.buf[:24])
            out += self.buf[:self.skip]
            del self.buf[:self.skip]
            self.skip = 0
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            head, payload = bytes(self.buf[:9]), bytes(self.buf[9:9 + length])
            del self.buf[:9 + length]
            out += self.frame(head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, head, payload)
        return bytes(out)

    def frame(self, ftype: int, flags: int, sid: int, head: bytes, payload: bytes) -> bytes:
        raise NotImplementedError


class _Requests(_Frames):
    """The instance's side: every header block decoded (the HPACK table must follow them all)."""

    skip = len(PREFACE)

    def __init__(self, paths: dict[int, str]):
        super().__init__()
        self.paths = paths
        self.decoder = hpack.Decoder()
        self.block = bytearray()

    def frame(self, ftype, flags, sid, head, payload):
        if ftype == HEADERS:
            block = payload
            if flags & PADDED:
                block = block[1:len(block) - block[0]]
            if flags & PRIORITY:
                block = block[5:]
            self.block = bytearray(block)
        elif ftype == CONTINUATION:
            self.block += payload
        if ftype in (HEADERS, CONTINUATION) and flags & END_HEADERS:
            for name, value in self.decoder.decode(bytes(self.block), raw=True):
                if name == b":path":
                    self.paths[sid] = value.decode()
        return head + payload


class _Answers(_Frames):
    """Triton's side (a server sends no preface): each stream's messages counted; a held stream's
    frames from the first byte of its withheld message on are dropped."""

    def __init__(self, proxy: TcpProxy, paths: dict[int, str]):
        super().__init__()
        self.proxy, self.paths = proxy, paths
        self.streams: dict[int, _Messages] = {}
        self.held: set[int] = set()

    def frame(self, ftype, flags, sid, head, payload):
        if sid in self.held:
            return b""
        if ftype != DATA or not payload:
            return head + payload
        assert not flags & PADDED, "a PADDED DATA frame from Triton"  # grpc does not pad
        rule = self.proxy.rule
        limit = rule[1] if rule and self.paths.get(sid, "").endswith(rule[0]) else None
        keep = self.streams.setdefault(sid, _Messages()).walk(payload, limit)
        if keep == len(payload):
            return head + payload
        self.held.add(sid)
        self.proxy.held.set()
        if not keep:
            return b""
        # what came before the withheld message, without END_STREAM
        return keep.to_bytes(3, "big") + bytes([DATA, flags & ~END_STREAM]) + head[5:9] + payload[:keep]


class _Messages:
    """One stream's gRPC messages: how many have begun, and where the current one stands."""

    __slots__ = ("begun", "prefix", "left")

    def __init__(self):
        self.begun, self.prefix, self.left = 0, bytearray(), 0

    def walk(self, payload: bytes, limit: int | None) -> int:
        """How much of this DATA payload goes on: all of it, or what precedes message ``limit + 1``."""
        pos = 0
        while pos < len(payload):
            if not self.left and not self.prefix:  # a message begins here
                if limit is not None and self.begun >= limit:
                    return pos
                self.begun += 1
            if self.left:
                take = min(self.left, len(payload) - pos)
                self.left -= take
            else:  # its 5-byte prefix: the compressed flag, then the body's length
                take = min(5 - len(self.prefix), len(payload) - pos)
                self.prefix += payload[pos:pos + take]
                if len(self.prefix) == 5:
                    self.left = int.from_bytes(self.prefix[1:], "big")
                    self.prefix.clear()
            pos += take
        return pos
