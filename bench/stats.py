"""Percentiles of one run, and the spread of a metric over repeated runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): the smallest value with at least q % at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Spread:
    """A metric over repeats: the median, the extremes, and how many repeats gave a value."""

    median: float
    min: float
    max: float
    n: int

    def as_dict(self) -> dict:
        return asdict(self)


def spread(values: Sequence[float | None]) -> Spread | None:
    """Median and min–max of the repeats that produced a value (None entries are skipped)."""
    got = [v for v in values if v is not None]
    if not got:
        return None
    return Spread(statistics.median(got), min(got), max(got), len(got))


def ratio(gateway: Spread | None, direct: Spread | None) -> float | None:
    """gateway / direct of the medians (None when either is missing or direct is 0)."""
    if gateway is None or direct is None or direct.median == 0:
        return None
    return gateway.median / direct.median
