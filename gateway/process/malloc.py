"""glibc's malloc told to keep large freed blocks, so large bodies do not page-fault on every request.

A 16 MiB binary body passes through several 16 MiB buffers per request (the body, the gRPC
request, gRPC's own copies, the answer). With glibc's defaults each freed block at the top of the
heap past twice the (dynamic) mmap threshold is given back to the kernel, and the next request
faults every page in again: thousands of minor faults per 16 MiB echo, a large share of the
gateway's CPU for it (docs/architecture.md, "Large bodies"). Fixing the mmap threshold at
32 MiB (glibc's own ceiling for the dynamic one) and the trim threshold at 128 MiB keeps up to
128 MiB of freed heap per arena for reuse: the faults go, at the cost of that much resident memory
after a burst. Called once per worker process; a no-op off glibc, and left to the operator when
the environment sets glibc's malloc tunables (``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``...).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_OPERATOR_SET = ("GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_large_buffers() -> bool:
    """Set the two thresholds; True when glibc took them."""
    if any(os.environ.get(name) for name in _OPERATOR_SET):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
