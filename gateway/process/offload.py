"""Parsing and rendering off the event loop, above a size threshold.

Every listener of a worker shares one event loop: a body that takes 100 ms to parse there holds
up every other request of the worker for 100 ms. ``run(size, fn, *args)`` calls ``fn`` inline when
``size`` (the body's or the answer's bytes) is at most ``limits.offload_bytes``, else in a small
per-process thread pool (``limits.offload_threads``) and awaits it; in-flight requests (and so the
pool's queue) are bounded by the edge's admission. Inline is cheaper for small inputs, whose
parse costs less than the thread hop (docs/architecture.md, "Bounded resources").
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gateway.core.bounded import LIMITS

T = TypeVar("T")
_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(LIMITS.offload_threads, thread_name_prefix="gateway-parse")
    return _pool


def inline(size: int) -> bool:
    """Whether ``run(size, ...)`` calls inline: a hot path calls ``fn`` itself then, without a coroutine."""
    return size <= LIMITS.offload_bytes


async def run(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``: inline when ``size`` is small, else in the pool (the request's context goes along)."""
    if size <= LIMITS.offload_bytes:
        return fn(*args)
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(pool(), call)
