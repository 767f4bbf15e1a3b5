"""The one shape rule between TF Serving's loose shapes and Triton's declared dims.

TF Serving feeds the shape the request implies; Triton enforces its configuration. The gateway
bridges only by adding or removing size-1 dimensions (the element order never changes):

1. same rank as the declared shape (Triton's metadata, batch dim included): sent as is;
2. more dims than declared: trailing size-1 dims are dropped ([2, 1] -> [2] for dims [-1]);
3. fewer dims: trailing 1s are appended where the declared dim is exactly 1 ([3] -> [3, 1] for
   [-1, 1]); otherwise, for a batching model (max_batch_size > 0) one leading batch dim of 1 is
   added ([4] -> [1, 4] for [-1, 4]) and removed again from every output when it was added to
   every input.

Anything else is sent unchanged and Triton's shape error comes back as INVALID_ARGUMENT.

A signature declared ``elementwise`` (a TF signature of unknown rank over an element-wise Triton
model) has its inputs flattened to one dim before the rule, and every output holding as many
elements as the first input is reshaped back to that input's shape (``restore``).
"""

from __future__ import annotations

import math

import numpy as np

from gateway.core.tensors import TensorSpec


def fit(shape: tuple[int, ...], spec: TensorSpec, max_batch_size: int) -> tuple[tuple[int, ...], bool]:
    """(the shape an input of ``shape`` is sent in by the rule above, whether a leading batch dim was added)."""
    want = len(spec.shape)
    dims = list(shape)
    if len(dims) == want or want == 0 and not dims:
        return tuple(shape), False
    if len(dims) > want:
        while len(dims) > want and dims[-1] == 1:
            dims.pop()
        return tuple(dims), False
    trailing = spec.shape[len(dims):]
    if all(d == 1 for d in trailing):
        return (*dims, *[1] * len(trailing)), False
    if max_batch_size > 0 and len(dims) == want - 1:
        return (1, *dims), True
    return tuple(shape), False


def bridge(arr: np.ndarray, spec: TensorSpec, max_batch_size: int) -> tuple[np.ndarray, bool]:
    """(array reshaped by the rule above, whether a leading batch dim was added)."""
    shape, added = fit(arr.shape, spec, max_batch_size)
    return (arr if shape == arr.shape else arr.reshape(shape)), added


def unbatch(arr: np.ndarray) -> np.ndarray:
    """Without the leading batch dim of 1; always an array (``[1]`` -> a 0-d array, not a scalar:
    a BYTES element would otherwise come out as a bare ``bytes`` the writers cannot take)."""
    return arr[0, ...] if arr.ndim and arr.shape[0] == 1 else arr


def restore(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An element-wise model's output in the shape of its input (unchanged when sizes differ)."""
    return arr.reshape(shape) if arr.size == math.prod(shape) else arr
