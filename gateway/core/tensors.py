"""The neutral form every dialect translates to and from: named numpy tensors plus parameters.

    dialect wire  ⇄  InferRequest / InferResponse (this module)  ⇄  KServe V2 (gateway.upstream)

A BYTES tensor holds a numpy object array of ``bytes``. ``datatype`` is the KServe V2 name and is
kept explicitly because numpy cannot tell BYTES from other object arrays, nor carry every V2 type.
Model metadata has a neutral form here too (``ModelMetadata``), so dialects never see protobufs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import datatypes
from .bounded import LIMITS, clip, dims_text
from .errors import invalid

Params = dict[str, Any]  # values: bool, int, float or str (KServe InferParameter)

# The most elements one tensor may declare. Shapes come from clients: without a bound, a shape
# like [100000, 100000] with one broadcast value would make the gateway allocate 40 GB.
MAX_ELEMENTS = 1 << 28


def element_count(shape, name: str, dtype: datatypes.DType | None = None) -> int:
    """Elements in ``shape`` (exact, no overflow); a clear client error for absurd shapes and, given
    the dtype, for shapes whose decoded bytes would pass limits.max_tensor_bytes."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise invalid(f"tensor '{clip(name)}': negative dimension in shape {dims_text(dims)}")
    n = math.prod(dims)
    if n > MAX_ELEMENTS:
        raise invalid(f"tensor '{clip(name)}': shape {dims_text(dims)} has {n} elements, more than the {MAX_ELEMENTS} "
                      "allowed")
    if dtype is not None:
        check_bytes(n, dtype, name, dims)
    return n


def too_large(count: int, dtype: datatypes.DType, dims) -> str | None:
    """Why ``count`` elements of ``dtype`` (shape ``dims``) may not be decoded (None: they may)."""
    size, most = dtype.nbytes(count), LIMITS.max_tensor_bytes
    if size <= most:
        return None
    return f"shape {dims_text(dims)} of {dtype.v2} takes {size} bytes, more than the {most} allowed (limits.max_tensor_bytes)"


def check_bytes(count: int, dtype: datatypes.DType, name: str, dims=None) -> None:
    why = too_large(count, dtype, dims if dims is not None else [count])
    if why is not None:
        raise invalid(f"tensor '{clip(name)}': {why}")


@dataclass(slots=True)
class Tensor:
    name: str
    data: np.ndarray
    datatype: str = ""  # V2 name; derived from data.dtype when empty
    parameters: Params = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.datatype:
            self.datatype = datatypes.by_numpy(self.data.dtype).v2
        elif self.datatype == "BYTES" and self.data.dtype.kind != "O":
            self.data = datatypes.to_bytes_array(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @classmethod
    def from_flat(cls, name: str, datatype: str, shape, values, parameters: Params | None = None) -> Tensor:
        """Build from a flat list/array and a shape, with a clear error when they disagree."""
        row = datatypes.by_v2(datatype)
        shape = tuple(int(d) for d in shape)
        expected = element_count(shape, name, row)
        arr = datatypes.to_bytes_array(values) if row.is_bytes else np.asarray(values, dtype=row.numpy)
        arr = arr.reshape(-1)
        if arr.size != expected:
            raise invalid(
                f"tensor '{clip(name)}': {arr.size} values do not fill shape {dims_text(shape)} ({expected} expected)"
            )
        return cls(name, arr.reshape(shape), datatype, parameters or {})


@dataclass(slots=True)
class InferRequest:
    model: str
    inputs: list[Tensor]
    version: str = ""  # "" = Triton's version policy picks
    outputs: list[str] | None = None  # requested outputs; None = all
    parameters: Params = field(default_factory=dict)
    id: str = ""


@dataclass(slots=True)
class InferResponse:
    model: str
    version: str
    outputs: list[Tensor]
    parameters: Params = field(default_factory=dict)
    id: str = ""
    final: bool = True  # False for non-final responses of a decoupled stream

    def output(self, name: str) -> Tensor:
        for t in self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.name: t.data for t in self.outputs}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model input or output as Triton's metadata describes it (shape may hold -1)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 0  # from the model config; > 0 means the first dim is the batch
    decoupled: bool = False  # from the model config's transaction policy

    def input(self, name: str) -> TensorSpec:
        for s in self.inputs:
            if s.name == name:
                return s
        raise KeyError(name)

    def output(self, name: str) -> TensorSpec:
        for s in self.outputs:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class ModelIndexEntry:
    """One row of Triton's repository index."""

    name: str
    version: str
    state: str  # "READY", "UNAVAILABLE", "LOADING", "UNLOADING", ""
    reason: str = ""
