"""One HTTP/2 connection's core, under the gRPC server (gateway/h2/server.py) and the client of
Triton (gateway/h2/client.py): what a connection does with its streams whatever the calls on them
mean.

    states        each stream's state as RFC 9113 5.1 names it, two bits of who has ended it:
                  OPEN, HALF_CLOSED_REMOTE (the peer's END_STREAM came), HALF_CLOSED_LOCAL (ours
                  went, or is queued), CLOSED; a stream no longer open is remembered in ``Closed``
                  (the last CLOSED_KEPT of them, with the state they closed in), so that a frame
                  that comes late on one is told apart from a frame on an idle stream
    sending       one scheduler (``queue``, ``_pump``): a stream's pieces wait in its ``out`` for its
                  window and the connection's, streams taking turns once their window is spent;
                  memoryviews are DATA (flow-controlled, cut to the peer's frame size; the last
                  one with END_STREAM where the stream's ``fin`` says so), bytes are frames
                  written as they are (trailers) once the bytes before them went. What waits
                  is counted (``queued``): past SEND_CAP, ``room`` waits (a client that takes no
                  answers gets no more of them made)
    windows       a stream's window given back in one place (``window_back``), the connection's in
                  ``Framing.credit``
    going away    one GOAWAY (``goaway``): the last stream id read, the code, a debug text

The frames themselves are read and checked by gateway/h2/wire.py's ``Framing``.
"""

from __future__ import annotations

import collections

from gateway.h2.wire import DATA, END_STREAM, FRAME, GOAWAY, U32, WINDOW_UPDATE, Framing, frame

# stream states (RFC 9113 5.1), as bits: who has ended the stream
OPEN = 0
HALF_CLOSED_REMOTE = REMOTE = 1  # the peer's END_STREAM came: it sends nothing more on it
HALF_CLOSED_LOCAL = LOCAL = 2  # ours went (the trailers written or queued, or RST_STREAM)
CLOSED = REMOTE | LOCAL
CLOSED_KEPT = 256  # closed stream ids remembered per connection
SEND_CAP = 8 << 20  # bytes queued for a peer before ``room`` waits


class Closed:
    """The streams closed lately, at most ``keep`` of them, each with the state it closed in: CLOSED
    (both ends had ended it: a frame on it after is STREAM_CLOSED) or HALF_CLOSED_LOCAL (we ended it
    while the peer was still sending: what it still sends is dropped, and its END_STREAM makes it
    CLOSED)."""

    __slots__ = ("_ids", "keep")

    def __init__(self, keep: int = CLOSED_KEPT):
        self._ids: dict[int, int] = {}
        self.keep = keep

    def add(self, sid: int, state: int) -> None:
        ids = self._ids
        ids[sid] = CLOSED if state & REMOTE else LOCAL
        if len(ids) > self.keep:
            del ids[next(iter(ids))]

    def get(self, sid: int) -> int | None:
        return self._ids.get(sid)

    def ended(self, sid: int) -> None:
        """The peer ended a stream we had closed (its END_STREAM, or its RST_STREAM)."""
        if sid in self._ids:
            self._ids[sid] = CLOSED

    def __contains__(self, sid: int) -> bool:
        return sid in self._ids


class Core(Framing):
    """A connection's streams (``by_id``: each with ``sid``, ``state``, ``window``, ``out``,
    ``inwin``, ``unacked``), their send queue and windows, its GOAWAY. Subclasses say what a
    stream's queue drained means (``sent``)."""

    SEND_CAP = SEND_CAP
    last_sid = 0  # the last stream id the peer opened
    queued = 0  # bytes of DATA waiting in the streams' ``out``
    _room: list | None = None  # futures of ``room``'s callers

    # -- sending -------------------------------------------------------------------------------------
    def queue(self, st, *pieces) -> None:
        """``pieces`` sent on ``st`` once what waits before them went: memoryviews as DATA within
        the windows, bytes as they are."""
        if st.out is None:
            st.out = collections.deque()
            self.pending.append(st)
        out = st.out
        for piece in pieces:
            out.append(piece)
            if type(piece) is not bytes:
                self.queued += len(piece)
        self._pump()

    def _pump(self) -> None:
        """What waits in the streams' queues, as far as the windows now allow, streams taking turns
        once one's window is spent; nothing while the transport's buffer is full (``resume_writing``
        pumps again)."""
        write = self.transport.write
        pending = self.pending
        while pending:
            if self._paused & 1:
                return
            st = pending[0]
            out = st.out
            while out:
                piece = out[0]
                if type(piece) is bytes:  # frames of their own (trailers): not flow-controlled
                    write(piece)
                    out.popleft()
                    continue
                if st.window <= 0 or self.send_window <= 0:
                    break
                if self._paused & 1:  # the last frame filled the transport's buffer
                    return
                n = min(len(piece), st.window, self.send_window, self.peer_frame)
                last = st.fin and n == len(piece) and len(out) == 1  # the stream's last DATA: END_STREAM on it
                write(FRAME.pack(n >> 8, n & 0xFF, DATA, END_STREAM if last else 0, st.sid))
                write(piece[:n])
                st.window -= n
                self.send_window -= n
                self._dequeue(n)
                if n == len(piece):
                    out.popleft()
                else:
                    out[0] = piece[n:]
            if out:
                if self.send_window <= 0:
                    return
                pending.rotate(-1)  # this stream's window is spent: the next one's turn
                if all(s.window <= 0 for s in pending):
                    return
                continue
            pending.popleft()
            st.out = None
            self.sent(st)

    def sent(self, st) -> None:
        """Everything ``st`` queued has gone."""

    def unqueue(self, st) -> None:
        """What ``st`` still had queued dropped (the stream reset, or ended)."""
        out = st.out
        if out is not None:
            self._dequeue(sum(len(p) for p in out if type(p) is not bytes))
            self._unqueue(st, st)

    def _dequeue(self, n: int) -> None:
        self.queued -= n
        if self._room is not None and self.queued <= self.SEND_CAP:
            self.let_go()

    def let_go(self) -> None:
        """``room``'s callers woken (the queue under SEND_CAP, or the connection gone)."""
        waiting, self._room = self._room, None
        for fut in waiting or ():
            if not fut.done():
                fut.set_result(None)

    async def room(self) -> None:
        """Waits while more than SEND_CAP bytes are queued for the peer (or until the connection is gone)."""
        while self.queued > self.SEND_CAP and not self.lost:
            fut = self.loop.create_future()
            if self._room is None:
                self._room = []
            self._room.append(fut)
            await fut

    # -- windows -------------------------------------------------------------------------------------
    def window_back(self, st) -> None:
        """What ``st``'s peer sent and we took (``st.unacked``) given back: WINDOW_UPDATE on the stream."""
        if not self.lost:
            self.transport.write(frame(WINDOW_UPDATE, 0, st.sid, U32.pack(st.unacked)))
            st.inwin += st.unacked
            st.unacked = 0

    # -- going away ----------------------------------------------------------------------------------
    def goaway(self, code: int, debug: bytes = b"") -> None:
        """GOAWAY with ``code`` and the last stream id the peer opened (streams above it were not
        processed: a client may send them again)."""
        if not self.lost and self.transport is not None:
            self.transport.write(frame(GOAWAY, 0, 0, U32.pack(self.last_sid) + U32.pack(code) + debug))
