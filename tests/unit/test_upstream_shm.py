"""The upstream's shared-memory region (gateway/upstream/shm.py): slices, the request written
around them, Triton forgetting the region, and the files a worker leaves."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferRequest, Tensor
from gateway.upstream import shm
from gateway.upstream import wire as v2wire

MiB = 1 << 20


class FakeTriton:
    """Register/unregister as Triton's extension does them (a name known or not)."""

    def __init__(self, refuse: BaseException | None = None):
        self.regions: dict[str, tuple[str, int]] = {}
        self.refuse = refuse
        self.calls: list[str] = []

    async def register(self, name: str, key: str, size: int) -> None:
        self.calls.append("register")
        if self.refuse is not None:
            raise self.refuse
        if name in self.regions:
            raise GatewayError(ErrorKind.INVALID_ARGUMENT, f"shared memory region '{name}' already in manager")
        self.regions[name] = (key, size)

    async def unregister(self, name: str) -> None:
        self.calls.append("unregister")
        self.regions.pop(name, None)


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "SHM_DIR", str(tmp_path))
    return tmp_path


def _arena(triton: FakeTriton, size: int = 4 * MiB, min_bytes: int = MiB) -> shm.Arena:
    return shm.Arena(size, min_bytes, triton.register, triton.unregister,
                     transient=lambda exc: isinstance(exc, GatewayError) and exc.kind is ErrorKind.UNAVAILABLE)


def _file(dirpath, arena) -> bytes:
    return (dirpath / arena.name).read_bytes()


async def test_slices_hold_the_bytes_and_come_back(shm_dir):
    triton = FakeTriton()
    arena = _arena(triton)
    assert await arena.open()
    assert triton.regions[arena.name] == (arena.key, 4 * MiB)
    assert oct(os.stat(shm_dir / arena.name).st_mode & 0o777) == "0o600"
    leases: list = []
    a = os.urandom(MiB + 1)
    b = os.urandom(100)
    off_a = arena.place([a[:10], memoryview(a)[10:]], len(a), leases)
    off_b = arena.place([b], len(b), leases)
    assert off_a == 0 and off_b % shm.ALIGN == 0 and off_b >= len(a)
    data = _file(shm_dir, arena)
    assert data[off_a:off_a + len(a)] == a and data[off_b:off_b + len(b)] == b
    assert arena.free_bytes == 4 * MiB - off_b - 2 * shm.ALIGN  # 100 bytes take two 64-byte units
    arena.free(leases)
    assert leases == [] and arena._free == [(0, 4 * MiB)]  # coalesced back into one block
    await arena.close()
    assert triton.regions == {} and not (shm_dir / arena.name).exists()


async def test_no_room_is_the_wire_and_freeing_out_of_order_coalesces(shm_dir):
    arena = _arena(FakeTriton())
    assert await arena.open()
    first, second, third = [], [], []
    assert arena.place([b"x" * (2 * MiB)], 2 * MiB, first) == 0
    assert arena.place([b"y" * MiB], MiB, second) == 2 * MiB
    assert arena.place([b"z" * (2 * MiB)], 2 * MiB, third) is None  # 1 MiB left: no room
    assert third == []
    arena.free(first)
    assert arena.place([b"z" * (2 * MiB)], 2 * MiB, third) == 0  # first fit: the freed block
    arena.free(second)
    arena.free(third)
    assert arena._free == [(0, 4 * MiB)]
    await arena.close()


async def test_request_names_the_region_for_large_inputs_only(shm_dir):
    arena = _arena(FakeTriton(), min_bytes=1024)
    assert await arena.open()
    big = np.arange(4096, dtype=np.float32)
    small = np.arange(4, dtype=np.int32)
    req = InferRequest(model="m", inputs=[Tensor("small", small, "INT32"), Tensor("big", big, "FP32"),
                                          Tensor("text", np.array([b"ab" * 1000], dtype=object), "BYTES")],
                       id="r1")
    leases: list = []
    msg = service_pb2.ModelInferRequest.FromString(v2wire.serialize_request(req, arena, leases))
    assert len(leases) == 2
    by_name = {t.name: t for t in msg.inputs}
    assert not by_name["small"].parameters
    assert list(msg.raw_input_contents) == [small.tobytes()]  # only the wire input, in order
    data = _file(shm_dir, arena)
    for name, raw in (("big", big.tobytes()), ("text", (2000).to_bytes(4, "little") + b"ab" * 1000)):
        p = by_name[name].parameters
        assert p["shared_memory_region"].string_param == arena.name
        off, size = p["shared_memory_offset"].int64_param, p["shared_memory_byte_size"].int64_param
        assert size == len(raw) and data[off:off + size] == raw
    # without the arena: the same request, every tensor on the wire
    wire = service_pb2.ModelInferRequest.FromString(v2wire.serialize_request(req))
    assert wire == v2wire.encode_request(req)
    arena.free(leases)
    await arena.close()


async def test_a_message_and_its_raws_name_the_region_for_large_inputs_and_a_body_is_not_copied(shm_dir):
    """v2wire.serialize_message (V2 REST): the caller's message unchanged, each large raw placed (a view
    of a body read into the region stays where it is), the others appended in order; no arena: the
    message, then every raw, as calls.serialize writes it."""
    arena = _arena(FakeTriton(), min_bytes=1024)
    assert await arena.open()
    msg = service_pb2.ModelInferRequest(model_name="m", id="r2")
    for name, dtype, shape in (("small", "INT32", [4]), ("big", "FP32", [4096]), ("text", "BYTES", [1])):
        msg.inputs.add(name=name, datatype=dtype, shape=shape)
    small, big = np.arange(4, dtype=np.int32).tobytes(), np.arange(4096, dtype=np.float32).tobytes()
    element = (3000).to_bytes(4, "little") + b"abc" * 1000
    body_view, release = arena.body(len(element) + 16)  # an HTTP body read into the region
    body_view[16:] = element
    text = body_view[16:]
    leases: list = []
    wire = service_pb2.ModelInferRequest.FromString(v2wire.serialize_message(msg, [small, big, text], arena, leases))
    assert not msg.inputs[1].parameters and not msg.inputs[2].parameters  # the caller's message as it was
    assert list(wire.raw_input_contents) == [small] and not wire.inputs[0].parameters
    assert len(leases) == 2 and leases[1][1] == 0  # the body's slice: nothing of its own to give back
    data = _file(shm_dir, arena)
    for i, raw in ((1, big), (2, element)):
        p = wire.inputs[i].parameters
        assert p["shared_memory_region"].string_param == arena.name
        off, size = p["shared_memory_offset"].int64_param, p["shared_memory_byte_size"].int64_param
        assert size == len(raw) and data[off:off + size] == raw
    assert wire.inputs[2].parameters["shared_memory_offset"].int64_param == \
        _address_in(arena, text)  # where the body holds it: not copied
    plain = v2wire.serialize_message(msg, [small, big, text])
    assert service_pb2.ModelInferRequest.FromString(plain) == service_pb2.ModelInferRequest(
        model_name="m", id="r2", inputs=msg.inputs, raw_input_contents=[small, big, element])
    arena.free(leases)
    release()
    await arena.close()


def _address_in(arena, view: memoryview) -> int:
    return shm._address(view) - arena._base


async def test_triton_forgetting_the_region_is_noticed_and_mended(shm_dir):
    triton = FakeTriton()
    arena = _arena(triton)
    assert await arena.open()
    assert not arena.lost("some other failure")
    assert not arena.lost(f"invalid offset 8 for shared memory region: '{arena.name}'")  # still registered
    assert arena.ready and triton.calls == ["register"]
    triton.regions.clear()  # Triton restarted
    assert arena.lost(f"Unable to find shared memory region: '{arena.name}'")
    assert not arena.ready and arena.place([b"x" * MiB], MiB, []) is None  # the wire meanwhile
    for _ in range(20):
        await asyncio.sleep(0)
        if arena.ready:
            break
    assert arena.ready and arena.name in triton.regions
    await arena.close()


async def test_refused_region_is_dropped_and_unreachable_triton_is_tried_later(shm_dir, monkeypatch):
    refused = _arena(FakeTriton(refuse=GatewayError(ErrorKind.INTERNAL, "Unable to open shared memory region")))
    assert not await refused.open()
    assert not refused.ready and refused._map is None and list(shm_dir.iterdir()) == []

    triton = FakeTriton(refuse=GatewayError(ErrorKind.UNAVAILABLE, "connection refused"))
    later = _arena(triton)
    assert not await later.open()
    assert later._map is not None and not later.ready  # kept: Triton is not up yet
    triton.refuse = None
    monkeypatch.setattr(later, "_retry_at", 0.0)
    assert later.place([b"x" * MiB], MiB, []) is None  # this one goes over the wire, and asks again
    for _ in range(20):
        await asyncio.sleep(0)
    assert later.ready and later.place([b"x" * MiB], MiB, []) == 0
    await later.close()


def test_sweep_removes_only_dead_workers_files_of_this_host(shm_dir):
    host = "h"
    dead = shm_dir / f"{shm.PREFIX}-{host}-999999999-abcd"
    live = shm_dir / f"{shm.PREFIX}-{host}-{os.getpid()}-abcd"
    other_host = shm_dir / f"{shm.PREFIX}-elsewhere-999999999-abcd"
    foreign = shm_dir / "triton_python_backend_shm_region_x"
    for f in (dead, live, other_host, foreign):
        f.write_bytes(b"")
    shm._sweep(host)
    assert not dead.exists() and live.exists() and other_host.exists() and foreign.exists()


@pytest.mark.parametrize("target,same", [
    ("127.0.0.1:8001", True), ("localhost:8001", True), ("[::1]:8001", True), ("unix:/tmp/triton.sock", True),
    ("triton:8001", False), ("10.0.0.5:8001", False), ("ipv4:127.0.0.1:8001,127.0.0.1:8002", False),
    ("dns:///localhost:8001", True),
])
def test_same_host(target, same):
    from gateway.settings import upstream_addresses

    assert shm.same_host(upstream_addresses(target), target) is same


async def test_a_body_read_into_the_region_is_the_tensor_without_another_copy(shm_dir):
    arena = _arena(FakeTriton())
    assert await arena.open()
    payload = os.urandom(2 * MiB)
    view, release = arena.body(len(payload))
    view[:] = payload  # as the socket reads it (gateway/edge/httpbody.py)
    free_before = arena.free_bytes
    leases: list = []
    prefix = len(payload).to_bytes(4, "little")  # a BYTES element: its length, then the body
    off = arena.place([prefix, memoryview(view)], len(payload) + 4, leases)
    assert leases == [(off, 0)] and arena.free_bytes == free_before  # no slice of its own: the body's
    assert _file(shm_dir, arena)[off:off + 4 + len(payload)] == prefix + payload
    # a slice of the body, with nothing in front of it: named where it is
    assert arena.place([view[100:MiB + 100]], MiB, leases) == off + 4 + 100 and leases[-1] == (off + 4 + 100, 0)
    # a slice of the body that needs bytes in front of it: those bytes are the body's, so it is copied
    moved = arena.place([prefix, view[100:MiB + 100]], MiB + 4, leases)
    assert len(leases) == 3 and leases[-1][1] > 0 and moved != off + 100
    assert _file(shm_dir, arena)[moved:moved + MiB + 4] == prefix + payload[100:MiB + 100]
    arena.free(leases)
    release()
    release()  # a second call gives nothing back twice
    assert arena._free == [(0, 4 * MiB)]
    # a body that does not fit, or a region not registered: a buffer of the caller's own
    assert arena.body(8 * MiB) is None
    arena.ready = False
    assert arena.body(MiB) is None
    await arena.close()


async def test_a_registration_whose_answer_was_lost_counts_and_nothing_is_unregistered(shm_dir):
    """Triton took the registration but its answer never came (UNAVAILABLE): the next attempt is
    told "already in manager", which is registered. The region is never unregistered while the
    worker runs: Triton may be reading it for requests in flight."""
    triton = FakeTriton()
    arena = _arena(triton)

    async def register_then_drop(name, key, size):
        await FakeTriton.register(triton, name, key, size)
        raise GatewayError(ErrorKind.UNAVAILABLE, "Stream removed")

    arena._register = register_then_drop
    assert not await arena.open() and not arena.ready and arena.name in triton.regions
    arena._register = triton.register
    arena._retry_at = 0.0
    assert arena.place([b"x" * MiB], MiB, []) is None  # the wire, and a registration asked for
    for _ in range(20):
        await asyncio.sleep(0)
    assert arena.ready and "unregister" not in triton.calls
    await arena.close()
    assert triton.calls[-1] == "unregister" and triton.regions == {}


async def test_a_full_dev_shm_is_the_wire_not_a_dead_worker(shm_dir, monkeypatch):
    """/dev/shm full (Docker's 64 MiB, the python backend's own regions): a slice whose memory cannot
    be taken is refused before anything is written into it (a write would be SIGBUS), and the
    tensor or body goes over the wire; without /dev/shm at all, no region."""
    import errno

    arena = _arena(FakeTriton())
    assert await arena.open()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    leases: list = []
    assert arena.place([b"x" * MiB], MiB, leases) is None and leases == []
    assert arena.body(MiB) is None
    assert arena._free == [(0, 4 * MiB)]  # nothing taken
    monkeypatch.undo()
    assert arena.place([b"x" * MiB], MiB, leases) == 0
    arena.free(leases)
    calls = []
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, off, n: calls.append((off, n)))
    assert arena.place([b"x" * MiB], MiB, leases) == 0 and calls == []  # taken once: no call again
    assert arena.place([b"y" * 10], 10, leases) == MiB and calls == [(MiB, MiB)]  # the next chunk
    arena.free(leases)
    await arena.close()

    monkeypatch.setattr(shm, "SHM_DIR", str(shm_dir / "missing"))
    nowhere = _arena(FakeTriton())
    assert not await nowhere.open() and nowhere._map is None and nowhere._fd is None
