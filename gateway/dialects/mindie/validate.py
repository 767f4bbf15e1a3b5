"""MindIE's parameter checks and messages (reference §1.4), shared by every family.

Each check returns the value (or None when absent) or raises INVALID_ARGUMENT with MindIE's text,
e.g. ``Parameter top_p must be in (0.0,1.0], got 1.5.``, rendered as 422 Input Validation Error.
A value quoted back is cut to a bounded prefix (``clip_repr``); text inputs (prompts) are at most
limits.max_prompt_chars characters (MindIE: maxRequestLength x 1 Mi).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.bounded import LIMITS, clip_repr
from gateway.core.errors import invalid
from gateway.llm.profiles import takes_token_ids

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLT_MAX = 3.4028234663852886e38


def _fmt(v: float, integer: bool) -> str:
    return str(int(v)) if integer else (repr(float(v)) if v != FLT_MAX else "FLT_MAX")


def _range(lo, hi, lo_open: bool, hi_open: bool, integer: bool) -> str:
    return f"{'(' if lo_open else '['}{_fmt(lo, integer)},{_fmt(hi, integer)}{')' if hi_open else ']'}"


def number(body: Mapping[str, Any], key: str, lo, hi, *, lo_open=False, hi_open=False, integer=False):
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise invalid(f"Parameter {key} must be {'an integer' if integer else 'a number'}, got {clip_repr(value)}.")
    bad = value <= lo if lo_open else value < lo
    bad = bad or (value >= hi if hi_open else value > hi)
    if bad:
        raise invalid(f"Parameter {key} must be in {_range(lo, hi, lo_open, hi_open, integer)}, got {value}.")
    return int(value) if integer else float(value)


def boolean(body: Mapping[str, Any], key: str, default: bool | None = None) -> bool | None:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"Parameter {key} must be a bool, got {clip_repr(value)}.")
    return value


def positive_int(body, key: str):
    return number(body, key, 0, INT32_MAX, lo_open=True, integer=True)


def seed(body) -> int | None:
    return number(body, "seed", 0, INT64_MAX, integer=True)


def stop(body) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid("Parameter stop must be a string or a list of strings.")
    if len(items) > 1024:
        raise invalid(f"Parameter stop must have at most 1024 items, got {len(items)}.")
    for s in items:
        if not 1 <= len(s) <= 1024:
            raise invalid(f"Each stop string must be 1 to 1024 characters, got {len(s)}.")
    if sum(len(s) for s in items) > 32768:
        raise invalid("The total length of stop strings must not exceed 32768.")
    return tuple(items)


def text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        raise invalid(f"Parameter {key} is required.")
    if not isinstance(value, str):
        raise invalid(f"Parameter {key} must be a string.")
    if not value:
        raise invalid(f"Parameter {key} must not be empty.")
    prompt_length(key, len(value))
    return value


def prompt_length(key: str, chars: int) -> None:
    """limits.max_prompt_chars (MindIE: maxRequestLength x 1 Mi characters)."""
    if chars > LIMITS.max_prompt_chars:
        raise invalid(f"Parameter {key} must be at most {LIMITS.max_prompt_chars} characters, got {chars}.")


def obj(body: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(f"Parameter {key} must be a JSON object.")
    return value


def timeout_s(params) -> float | None:
    value = number(params, "timeout", 0, 65535, lo_open=True, integer=True)
    return float(value) if value is not None else None


def stop_token_ids(body) -> tuple[int, ...]:
    """OpenAI/vLLM ``stop_token_ids``: a list of ints; values outside [0, 2^31-1] dropped (as MindIE)."""
    value = body.get("stop_token_ids")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise invalid("Parameter stop_token_ids must be a list of integers.")
    return tuple(t for t in value if 0 <= t <= INT32_MAX)


MAX_TOKENS_NUM = 1024 * 1024  # MindIE's bound on token ids per prompt, and on each id (native input_id)


def token_ids(values: list) -> list[int]:
    """A token-id prompt's length and ids, with MindIE's texts (native ``CheckTokenInput``)."""
    if not values or len(values) > MAX_TOKENS_NUM:
        raise invalid(f"Inputs token length must be in (0, {MAX_TOKENS_NUM}]")
    for t in values:
        if not 0 <= t <= MAX_TOKENS_NUM:
            raise invalid(f"Data element must be in range [0, {MAX_TOKENS_NUM}], but got {t}.")
    return values


def token_model(model) -> None:
    """A token-id prompt needs a model with TensorRT-LLM's token contract (``input_ids`` -> ``output_ids``):
    the model itself or its ``token_model`` (an ensemble's ``tensorrt_llm`` step)."""
    if model.profile.name != "trtllm" or not takes_token_ids(model.token_target[1]):
        raise invalid(f"Model {model.name[:256]} does not take token ids: it has no input_ids input and "
                      "output_ids output.")
