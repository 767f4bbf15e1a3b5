"""Two answers to one request, compared output by output over neutral tensors.

A dialect decodes each side's answer with its own reader into an ``Answer``:

    Answer(status="ok", outputs={"y": np.ndarray, ...}, body=<wire bytes>, fields=("y",))
    Answer(status="400", error="<the error words>", body=<wire bytes>)
    Answer(status="ok", text="...", tokens=(prompt, completion), greedy=True)        (LLM routes)

and ``compare(legacy, triton, rtol, atol)`` gives a ``Comparison``:

    outcome   match | mismatch | legacy_error | triton_error | skipped
    outputs   {name: Diff(reason, max_abs, max_rel, count)} for every output that differs, and the
              float outputs that matched within tolerance with their (non-zero) error
    format    "" | "field_order" | "spelling" | "layout": the values agree, the bytes do not (JSON
              field order, or float spelling; a protobuf answer: a layout a client can see, e.g.
              ``float_val`` against ``tensor_content``), reported apart from value differences

Rules: statuses and error words exact; shapes and dtypes exact; integers, booleans, strings (bytes)
exact; floats within ``|t - l| <= atol + rtol * |l|`` (numpy.isclose, NaN equal to NaN); an output
on one side only is a mismatch (``missing in triton`` / ``missing in legacy``). An error on one side
only is that side's error (``legacy_error`` / ``triton_error``); the same error on both is a match.
A protobuf answer (``canonical`` set: its message serialized deterministically) has no field
order or spelling: bytes that differ only where no client can see it (the order of a map's
entries, which protobuf leaves to each process) are a plain match; canonical forms that differ
are ``layout``. LLM answers: the status always; token counts and text only where the request was greedy; a
sampled request that both answered is ``skipped``. An answer its dialect did not keep for comparing
(``Answer.skipped``: why, e.g. a stream longer than its bound) is ``skipped`` with that note, unless
a side failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

OUTCOMES = ("match", "mismatch", "legacy_error", "triton_error", "dropped", "skipped")


@dataclass(slots=True)
class Answer:
    status: str = "ok"  # "ok", or the dialect's status for an error (HTTP status, gRPC code name)
    error: str = ""  # the error words (the envelope's message)
    outputs: dict[str, np.ndarray] | None = None
    body: bytes = b""  # the answer's bytes as written (format check, recorded payloads)
    fields: tuple[str, ...] = ()  # the outputs' names in the order the wire holds them
    canonical: bytes | None = None  # protobuf: the message serialized deterministically (None: JSON)
    text: str | None = None  # LLM: the generated text
    tokens: tuple[int, ...] | None = None  # LLM: (prompt tokens, completion tokens)
    greedy: bool = True  # LLM: the request was greedy (temperature 0 / do_sample false)
    skipped: str = ""  # why this answer is not compared (e.g. a stream past its bound): counted skipped

    @property
    def failed(self) -> bool:
        return self.status != "ok"


@dataclass(slots=True)
class Wire:
    """An answer as it came, not yet decoded: its status, its bytes, and how to decode them. Two
    Wires with the same status and bytes are a match without decoding either (``resolve``)."""

    status: str
    body: bytes
    decode: Callable[[], Answer]


def resolve(side) -> Answer:
    """An Answer from what a dialect handed over: an Answer, a Wire, or a function giving one."""
    if isinstance(side, Wire):
        return side.decode()
    return side() if callable(side) else side


def same_bytes(a, b) -> bool:
    return isinstance(a, Wire) and isinstance(b, Wire) and a.status == b.status and a.body == b.body


def failure(status: str, error: str, body: bytes = b"") -> Answer:
    """An error answer (a status other than ok, its words)."""
    return Answer(status=str(status), error=error, body=body)


@dataclass(slots=True)
class Diff:
    reason: str  # "" (floats within tolerance), "values", "dtype", "shape", "missing in triton", ...
    max_abs: float = 0.0
    max_rel: float = 0.0
    count: int = 0  # elements that differ beyond tolerance

    def as_dict(self) -> dict:
        return {"reason": self.reason or "within tolerance", "max_abs": self.max_abs, "max_rel": self.max_rel,
                "count": self.count}


@dataclass(slots=True)
class Comparison:
    outcome: str
    outputs: dict[str, Diff] = field(default_factory=dict)
    format: str = ""
    note: str = ""  # what differs when no output does (status, error words, text, tokens)

    @property
    def differing(self) -> list[str]:
        return [name for name, d in self.outputs.items() if d.reason]


def compare(legacy: Answer, triton: Answer, rtol: float, atol: float) -> Comparison:
    if legacy.failed or triton.failed:
        if legacy.failed and triton.failed:
            if legacy.status == triton.status and legacy.error == triton.error:
                return Comparison("match")
            return Comparison("mismatch", note=f"status {legacy.status} vs {triton.status}: "
                                               f"{legacy.error!r} vs {triton.error!r}")
        if legacy.failed:
            return Comparison("legacy_error", note=f"legacy {legacy.status}: {legacy.error}")
        return Comparison("triton_error", note=f"triton {triton.status}: {triton.error}")
    if legacy.skipped or triton.skipped:
        return Comparison("skipped", note=legacy.skipped or triton.skipped)
    if legacy.text is not None or triton.text is not None or legacy.tokens is not None:
        return _compare_text(legacy, triton)
    outs: dict[str, Diff] = {}
    lo, to = legacy.outputs or {}, triton.outputs or {}
    for name in list(lo) + [n for n in to if n not in lo]:
        if name not in to:
            outs[name] = Diff("missing in triton")
        elif name not in lo:
            outs[name] = Diff("missing in legacy")
        else:
            d = compare_tensor(lo[name], to[name], rtol, atol)
            if d is not None:
                outs[name] = d
    outcome = "mismatch" if any(d.reason for d in outs.values()) else "match"
    fmt = ""
    if outcome == "match" and legacy.body != triton.body:
        if legacy.canonical is not None and triton.canonical is not None:  # protobuf: map order is no format
            fmt = "layout" if legacy.canonical != triton.canonical else ""
        else:
            fmt = "field_order" if legacy.fields != triton.fields else "spelling"
    return Comparison(outcome, outs, fmt)


def compare_tensor(legacy: np.ndarray, triton: np.ndarray, rtol: float, atol: float) -> Diff | None:
    """None when equal; a Diff with reason "" for floats equal within tolerance but not exactly."""
    if legacy.dtype != triton.dtype:
        return Diff(f"dtype {legacy.dtype} vs {triton.dtype}")
    if legacy.shape != triton.shape:
        return Diff(f"shape {list(legacy.shape)} vs {list(triton.shape)}")
    kind = legacy.dtype.kind
    if kind == "f" or kind == "c":
        lf, tf = legacy.astype(np.float64), triton.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.isclose(tf, lf, rtol=rtol, atol=atol, equal_nan=True)
            delta = np.abs(tf - lf)
            finite = np.isfinite(delta)
            max_abs = float(delta[finite].max()) if finite.any() else 0.0
            rel = delta / np.maximum(np.abs(lf), np.finfo(np.float64).tiny)
            rel_ok = np.isfinite(rel)
            max_rel = float(rel[rel_ok].max()) if rel_ok.any() else 0.0
        bad = int(close.size - int(close.sum()))
        if bad:
            return Diff("values", max_abs, max_rel, bad)
        return Diff("", max_abs, max_rel) if max_abs else None
    equal = legacy == triton
    if isinstance(equal, np.ndarray) and equal.all() or equal is True:
        return None
    bad = int(np.size(equal) - int(np.sum(equal)))
    max_abs = 0.0
    if kind in "iu":
        max_abs = float(np.abs(legacy.astype(np.float64) - triton.astype(np.float64)).max())
    elif kind == "b":
        max_abs = 1.0
    return Diff("values", max_abs, 0.0, bad)


def _compare_text(legacy: Answer, triton: Answer) -> Comparison:
    if not (legacy.greedy and triton.greedy):
        return Comparison("skipped", note="sampled: tokens and text not compared")
    if legacy.tokens != triton.tokens:
        return Comparison("mismatch", note=f"tokens {legacy.tokens} vs {triton.tokens}")
    if legacy.text != triton.text:
        return Comparison("mismatch", note="text differs")
    return Comparison("match")
