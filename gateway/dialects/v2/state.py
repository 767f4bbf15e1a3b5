"""The V2 dialect's per-worker state, handed to its listeners by ``open``."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.context import DialectContext

from .config import V2Config
from .errors import Rendering


@dataclass
class State:
    ctx: DialectContext
    errors: Rendering
    config: V2Config


def open(ctx: DialectContext, config: V2Config) -> State:
    return State(ctx, Rendering(), config)
