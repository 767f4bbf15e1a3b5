"""Shared hypothesis strategies: JSON values of every shape, hostile sizes included."""

from __future__ import annotations

from hypothesis import strategies as st

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))

json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)

# Values far larger than any error text may echo (a long string, list or object).
BIG = 50_000
BIG_VALUES = {
    "string": "x" * BIG,
    "strings": ["y" * 100] * (BIG // 100),
    "ints": list(range(BIG)),
    "object": {f"k{i}": i for i in range(BIG // 10)},
    "nested": [[[[1.5] * 10] * 10] * 10] * 50,
}
