"""What a dialect's ``gateway check`` function builds (gateway/check.py runs them all and reports).

    CheckContext  what a dialect's check gets: the settings, its section, its view of Triton
    Row           one exposed name: the Triton model and version it reaches, inputs and outputs
    Finding       an ``error`` (requests to that name fail) or a ``warning`` (works, with a caveat)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from gateway.core.tensors import TensorSpec
from gateway.settings import Settings
from gateway.upstream import Upstream

Level = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Io:
    """One input or output as a client sees it: its alias, and the Triton tensor behind it."""

    alias: str
    name: str
    datatype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        head = self.name if self.alias == self.name else f"{self.alias}={self.name}"
        return f"{head} {self.datatype}{list(self.shape)}"


def ios(pairs: Iterable[tuple[str, TensorSpec]] | Iterable[TensorSpec], datatype=None) -> tuple[Io, ...]:
    """Io rows from (alias, TensorSpec) pairs or bare TensorSpecs (alias = Triton name);
    ``datatype(spec)`` overrides the dtype shown (TF's half_as_float)."""
    out = []
    for item in pairs:
        alias, spec = (item.name, item) if isinstance(item, TensorSpec) else item
        out.append(Io(alias, spec.name, datatype(spec) if datatype else spec.datatype, tuple(spec.shape)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Row:
    dialect: str
    name: str  # the name a client uses
    model: str  # the Triton model ("" when the row is not a model, e.g. a PD peer)
    version: str = ""  # "" = Triton's version policy (latest)
    inputs: tuple[Io, ...] = ()
    outputs: tuple[Io, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    dialect: str
    name: str  # the exposed name (or setting) it is about
    message: str


@dataclass(slots=True)
class CheckContext:
    """What a dialect's check function gets."""

    settings: Settings
    dialect: str
    config: BaseModel  # the validated ``dialects.<name>`` section
    upstream: Upstream

    def row(self, name: str, model: str, version: str = "", inputs=(), outputs=(), detail: str = "") -> Row:
        return Row(self.dialect, name, model, version, tuple(inputs), tuple(outputs), detail)

    def error(self, name: str, message: str) -> Finding:
        return Finding("error", self.dialect, name, message)

    def warning(self, name: str, message: str) -> Finding:
        return Finding("warning", self.dialect, name, message)
