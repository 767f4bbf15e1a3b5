"""Large input tensors handed to a Triton on the same host through POSIX shared memory.

Over gRPC a large tensor is copied by grpc (slices, HTTP/2 frames, the socket) and by Triton on
the way in, a large share of the worker's CPU for a 16 MiB tensor. Through Triton's
system shared-memory extension it is one memcpy into a region Triton has mapped; the request then
names the region, offset and size in the input's parameters (``shared_memory_region``,
``shared_memory_offset``, ``shared_memory_byte_size``) instead of carrying the bytes.

One region per worker: a file under /dev/shm (mode 0600) named for the host, the worker's pid
and a random token, ``pool_bytes`` long, registered with Triton when the worker connects. Each
input tensor of at least ``min_bytes`` takes a slice of it (first fit) for the length of its call.
A tensor that finds no room, or a request made while the region is not registered, goes over the
wire as before: shared memory never makes a request wait or fail. Answers still come back over
gRPC (an output's size is not known before the model runs).

Triton forgets the region when it restarts: the first request naming it is refused before any
model runs (its message names the region); ``lost`` says so, that request is sent again over the
wire, and the region is registered again in the background (at most every ``RETRY_S`` while
Triton is away). On stop the region is unregistered and its file removed; files a killed worker
of this host left behind are removed by the next worker that opens a region.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import mmap
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

import numpy as np

from gateway.core.errors import GatewayError
from gateway.core.parts import nbytes
from gateway.observe import metrics

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
PREFIX = "triton-gateway"
ALIGN = 64
CHUNK = 1 << 20  # /dev/shm memory is taken for the region this much at a time
HEAD = ALIGN  # bytes kept free in front of an HTTP body read into the region (a BYTES element's length)
RETRY_S = 2.0
_UNKNOWN_REGION = "unable to find"  # Triton: "Unable to find shared memory region: '<name>'"
_ALREADY = "already in manager"  # Triton: "shared memory region '<name>' already in manager"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def same_host(addresses: list[tuple[str, int]], target: str) -> bool:
    """Whether the upstream target can only be a Triton on this host: a unix socket, or one
    loopback address (several addresses may be several Tritons, each needing its own region)."""
    if target.startswith("unix:"):
        return True
    return len(addresses) == 1 and addresses[0][0] in LOOPBACK


async def send_placed(arena: Arena | None, write: Callable[[Arena | None, list], bytes],
                      send: Callable[[bytes], Awaitable]):
    """``send(write(arena, leases))``: a request whose large inputs ``write`` places in the region
    (``wire.serialize_request`` / ``serialize_message``), the slices they took given back once it
    is answered. Triton refusing it for a region it forgot (it restarted: the request never ran)
    sends it once more with every input on the wire, and the region is registered again."""
    leases: list = []
    try:
        try:
            return await send(write(arena, leases))
        except GatewayError as err:
            if not leases or not arena.lost(err.message):
                raise
            return await send(write(None, None))
    finally:
        if leases:
            arena.free(leases)


class Arena:
    """The worker's region and the slices of it in use.

    ``register`` and ``unregister`` are coroutines the upstream client passes in (its own gRPC
    calls to Triton: ``(name, key, size)`` and ``(name)``), so this module knows no gRPC."""

    async def send_placed(self, write: Callable[[Arena | None, list], bytes], send: Callable[[bytes], Awaitable]):
        """``send_placed(self, write, send)``: for a caller that holds the arena (``Upstream.shared_arena``)."""
        return await send_placed(self, write, send)

    def __init__(self, size: int, min_bytes: int,
                 register: Callable[[str, str, int], Awaitable[None]],
                 unregister: Callable[[str], Awaitable[None]],
                 transient: Callable[[BaseException], bool] = lambda _exc: False):
        self.size = size
        self.min_bytes = max(min_bytes, 1)
        self._register, self._unregister, self._transient = register, unregister, transient
        host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32]
        self.name = f"{PREFIX}-{host}-{os.getpid()}-{secrets.token_hex(4)}"
        self.key = "/" + self.name
        self._host = host
        self._map: mmap.mmap | None = None
        self._fd: int | None = None
        self._taken = bytearray(-(-size // CHUNK))  # per CHUNK of the file: its memory is taken (_backed)
        self._free: list[tuple[int, int]] = []  # (offset, size), sorted by offset, coalesced
        self.ready = False
        self._opening = False
        self._retry_at = 0.0
        self._pending: asyncio.Task | None = None
        self._base = 0  # the mapping's address: where a view of it starts, as an offset
        self._bodies: dict[int, int] = {}  # HTTP bodies read into the region: offset -> size

    # -- life ------------------------------------------------------------------------------
    async def open(self) -> bool:
        """Create the file and register it with Triton. False when Triton refuses it (another host,
        container or user: logged once, the wire from then on) or is not up yet (``transient``:
        registered later, when a large tensor asks for a slice)."""
        _sweep(self._host)
        path = os.path.join(SHM_DIR, self.name)
        try:
            self._fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.ftruncate(self._fd, self.size)  # sparse: memory is taken slice by slice (_take)
            self._map = mmap.mmap(self._fd, self.size)
        except OSError as exc:  # no /dev/shm (not Linux), or it refuses the file
            log.warning("upstream shared memory not used: cannot create %s (%s); tensors go over gRPC", path, exc)
            self._discard()
            return False
        self._base = _address(memoryview(self._map)[:1])
        self._free = [(0, self.size)]
        self._opening = True  # no re-registration meanwhile (place() while not ready asks for one)
        try:
            await self._register(self.name, self.key, self.size)
        except Exception as exc:  # noqa: BLE001 - any refusal means: use the wire
            if self._transient(exc):
                self._retry_at = time.monotonic() + RETRY_S
                return False
            log.warning("upstream shared memory not used: Triton could not register %s (%s); tensors go over gRPC",
                        self.key, exc)
            self._discard()
            return False
        finally:
            self._opening = False
        self.ready = True
        log.info("upstream shared memory: region %s, %d MiB, input tensors of %d bytes or more",
                 self.name, self.size >> 20, self.min_bytes)
        return True

    async def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        if self.ready:
            self.ready = False
            try:
                await self._unregister(self.name)
            except Exception as exc:  # noqa: BLE001 - Triton gone: it has forgotten the region anyway
                log.debug("unregistering %s: %s", self.name, exc)
        self._discard()

    def _discard(self) -> None:
        self.ready = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a slice still referenced: the mapping goes with its last user
                pass
            self._map = None
        try:
            os.unlink(os.path.join(SHM_DIR, self.name))
        except OSError:  # never made, or gone already
            pass

    # -- slices ----------------------------------------------------------------------------
    def _take(self, size: int) -> tuple[int, int] | None:
        """(offset, size) of a free slice of at least ``size`` bytes (first fit), or None."""
        need = -(-max(size, 1) // ALIGN) * ALIGN
        i = next((k for k, (_, room) in enumerate(self._free) if room >= need), None)
        if i is None:
            return None
        off, room = self._free[i]
        if not self._backed(off, need):  # no room in /dev/shm: the wire
            return None
        if room == need:
            del self._free[i]
        else:
            self._free[i] = (off + need, room - need)
        return off, need

    def _backed(self, off: int, size: int) -> bool:
        """Whether the slice's memory is taken (posix_fallocate), taking what is not yet: a write
        into a page /dev/shm cannot give (full: Docker's 64 MiB, the python backend's own regions)
        would kill the worker with SIGBUS. Pages once taken stay (nothing is given back while the
        worker runs), so each CHUNK is taken once; a slice whose chunks are all taken costs nothing."""
        first, last = off // CHUNK, (off + size - 1) // CHUNK
        if all(self._taken[first:last + 1]):
            return True
        try:
            os.posix_fallocate(self._fd, first * CHUNK, min((last + 1) * CHUNK, self.size) - first * CHUNK)
        except OSError:
            return False
        self._taken[first:last + 1] = b"\x01" * (last + 1 - first)
        return True

    def body(self, size: int):
        """A writable view of ``size`` bytes of the region for an HTTP body to be read into, and
        the function that gives it back (when its request ends); None when not registered or full.
        A tensor that is that body (GRPS's octet-stream) or a slice of it is then not copied again:
        ``place`` names it where it is, its BYTES length written in the ``HEAD`` bytes before it."""
        if not self.ready:
            return None
        got = self._take(HEAD + size)
        if got is None:
            return None
        start, need = got
        self._bodies[start + HEAD] = size
        view = memoryview(self._map)[start + HEAD:start + HEAD + size]

        def release() -> None:
            if self._bodies.pop(start + HEAD, None) is not None:
                self.free([(start, need)])

        return view, release

    def _body_of(self, at: int, n: int) -> int | None:
        """The offset of the body read into the region (``body``) that holds ``n`` bytes at ``at``."""
        for off, size in self._bodies.items():
            if off <= at and at + n <= off + size:
                return off
        return None

    def place(self, parts: list, size: int, leases: list) -> int | None:
        """Copy a tensor's raw parts into a free slice: its offset (the slice appended to
        ``leases``, which the caller gives back with ``free``), or None (no room, not registered:
        the wire). Parts that end with a view of an HTTP body in the region (``body``) are not
        copied: the few bytes before the view (a BYTES element's length) are written in front of
        it, and the body's own slice (given back when its request ends) is the tensor's (``leases``
        then gets an entry of size 0: the request used the region, and has nothing to give back)."""
        if not self.ready:
            self._maybe_reregister()
            return None
        last = parts[-1]
        if type(last) is memoryview and last.obj is self._map and last.nbytes:
            at = _address(last) - self._base
            head = size - last.nbytes  # what goes in front of it: nothing, or a BYTES element's length
            body = self._body_of(at, last.nbytes)
            if body is not None and (head == 0 or (at == body and head <= HEAD)):
                self._write(at - head, parts[:-1])
                leases.append((at - head, 0))  # in the region (the caller knows), nothing of its own to give back
                metrics.UPSTREAM_SHM_BYTES.inc(size)
                return at - head
        got = self._take(size)
        if got is None:
            return None
        off, need = got
        self._write(off, parts)
        leases.append((off, need))
        metrics.UPSTREAM_SHM_BYTES.inc(size)
        return off

    def _write(self, pos: int, parts: list) -> None:
        mm = self._map
        for p in parts:
            n = nbytes(p)
            mm[pos:pos + n] = p
            pos += n

    def free(self, leases: list) -> None:
        for off, size in leases:
            if not size:  # a body's slice (``body``): given back by its own release
                continue
            free = self._free
            i = bisect.bisect_left(free, (off, 0))
            if i < len(free) and off + size == free[i][0]:  # joins the next block
                size += free[i][1]
                del free[i]
            if i > 0 and free[i - 1][0] + free[i - 1][1] == off:  # and the previous
                off, size = free[i - 1][0], free[i - 1][1] + size
                free[i - 1] = (off, size)
            else:
                free.insert(i, (off, size))
        leases.clear()

    @property
    def discarded(self) -> bool:
        """Whether the region is gone for good (refused by Triton, no /dev/shm, closed)."""
        return self._map is None

    @property
    def free_bytes(self) -> int:
        return sum(size for _, size in self._free)

    # -- Triton restarted ------------------------------------------------------------------
    def lost(self, message: str) -> bool:
        """Whether Triton refused a request because it no longer knows the region (it restarted):
        then the region is registered again in the background, and the caller resends over the wire.
        Only Triton's words for an unknown region count: any other error naming it (a bad offset)
        leaves the registration alone."""
        if self.name not in message or _UNKNOWN_REGION not in message.lower():
            return False
        self.ready = False
        self._retry_at = 0.0
        self._maybe_reregister()
        return True

    def _maybe_reregister(self) -> None:
        now = time.monotonic()
        if self._map is None or self._opening or now < self._retry_at \
                or (self._pending is not None and not self._pending.done()):
            return
        self._retry_at = now + RETRY_S
        try:
            self._pending = asyncio.get_running_loop().create_task(self._reregister())
        except RuntimeError:  # no loop (a test's direct call): next time
            self._pending = None

    async def _reregister(self) -> None:
        """Register the region again. Never unregister first: Triton may be reading it for requests
        in flight. A registration that took effect before its answer was lost is "already in
        manager": registered."""
        try:
            await self._register(self.name, self.key, self.size)
        except Exception as exc:  # noqa: BLE001 - Triton still away: tried again later
            if _ALREADY not in str(getattr(exc, "message", exc)).lower():
                log.debug("re-registering %s: %s", self.name, exc)
                return
        self.ready = self._map is not None
        log.info("upstream shared memory: region %s registered again", self.name)


def _address(view: memoryview) -> int:
    """Where a view's first byte is in memory."""
    return np.frombuffer(view, dtype=np.uint8, count=1).ctypes.data


def _sweep(host: str) -> None:
    """Remove region files of this host whose worker is gone (killed before it could remove its own)."""
    mark = f"{PREFIX}-{host}-"
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        if not name.startswith(mark):
            continue
        pid = name[len(mark):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass


def _alive(pid: int) -> bool:
    """Whether a process of that id exists (another user's too: signal 0 refused, but it is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
