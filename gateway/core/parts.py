"""The byte size of data written or sent in parts: ``bytes``, ``bytearray`` or byte memoryviews
(a memoryview's ``len`` counts its elements, its ``nbytes`` its bytes). One definition for the
HTTP answers written piece by piece (gateway/edge/httpbody.py, gateway/edge/fastlane.py) and the request
bytes placed on the wire or in the shared-memory region (gateway/upstream/wire.py, shm.py)."""

from __future__ import annotations


def nbytes(part) -> int:
    """The bytes of one part."""
    return part.nbytes if isinstance(part, memoryview) else len(part)


def part_size(parts) -> int:
    """The bytes of all ``parts`` together."""
    return sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
