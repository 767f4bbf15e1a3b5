"""rapidjson's ``internal::dtoa`` (Grisu2 + ``Prettify``) in plain Python: the test oracle of the
compiled writer (gateway/core/_floattext.c, ``rapidjson``).

Written from rapidjson's ``include/rapidjson/internal/{diyfp,dtoa}.h`` (Tencent/rapidjson, v1.1.0,
the version Ubuntu 22.04 packages and Triton 2.51 is built with) step by step, with Python's
integers standing in for ``uint64_t`` (every operation masked to 64 bits where C wraps). The cached
powers of ten are computed here from exact integers (``10^k`` as a 64-bit significand rounded to
nearest), not copied: ``test_cached_powers`` checks that the compiled table equals them.

``fractional_rounding_limit``: rapidjson after 1.1.0 rounds the last digit of a number whose digits
run 9 or more places past the cached power's binary point (``index < 20``), 1.1.0 does not
(``index < 9``). Triton's answers decide which one it is (tests/contract/test_v2_floats.py).
"""

from __future__ import annotations

import math
import struct

M64 = (1 << 64) - 1
SIGNIFICAND_SIZE = 52
EXPONENT_BIAS = 0x3FF + SIGNIFICAND_SIZE  # 1075
MIN_EXPONENT = -EXPONENT_BIAS
HIDDEN_BIT = 1 << SIGNIFICAND_SIZE
SIGNIFICAND_MASK = HIDDEN_BIT - 1
RAPIDJSON_1_1_0 = 9


def cached_power(index: int) -> tuple[int, int]:
    """(f, e) with f * 2^e ~ 10^(-348 + 8 * index), f a 64-bit significand with its top bit set,
    rounded to nearest."""
    k = -348 + 8 * index
    if k >= 0:
        n, d = 10**k, 1
    else:
        n, d = 1, 10**-k
    # choose e so that 2^63 <= n / d / 2^e < 2^64
    e = n.bit_length() - d.bit_length() - 64
    while True:
        num, den = (n, d << e) if e >= 0 else (n << -e, d)
        if num >= den << 64:
            e += 1
        elif num < den << 63:
            e -= 1
        else:
            break
    f, r = divmod(num, den)
    if 2 * r >= den:
        f += 1
    if f >> 64:  # rounding carried past 64 bits
        f >>= 1
        e += 1
    return f, e


CACHED = [cached_power(i) for i in range(87)]


def _diyfp(value: float) -> tuple[int, int]:
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    biased = (bits >> SIGNIFICAND_SIZE) & 0x7FF
    significand = bits & SIGNIFICAND_MASK
    if biased:
        return significand + HIDDEN_BIT, biased - EXPONENT_BIAS
    return significand, MIN_EXPONENT + 1


def _mul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    p = a[0] * b[0]
    h, low = p >> 64, p & M64
    if low & (1 << 63):
        h += 1
    return h & M64, a[1] + b[1] + 64


def _normalize(x: tuple[int, int]) -> tuple[int, int]:
    s = 64 - x[0].bit_length()
    return (x[0] << s) & M64, x[1] - s


def _normalize_boundary(x: tuple[int, int]) -> tuple[int, int]:
    f, e = x
    while not f & (HIDDEN_BIT << 1):
        f <<= 1
        e -= 1
    shift = 64 - SIGNIFICAND_SIZE - 2
    return f << shift, e - shift


def _boundaries(v: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    f, e = v
    plus = _normalize_boundary(((f << 1) + 1, e - 1))
    minus = ((f << 2) - 1, e - 2) if f == HIDDEN_BIT else ((f << 1) - 1, e - 1)
    return ((minus[0] << (minus[1] - plus[1])) & M64, plus[1]), plus


def _cached_power_for(e: int) -> tuple[tuple[int, int], int]:
    dk = (-61 - e) * 0.30102999566398114 + 347
    k = int(dk)
    if dk - k > 0.0:
        k += 1
    index = (k >> 3) + 1
    return CACHED[index], -(-348 + (index << 3))


def _round(digits: list[int], delta: int, rest: int, ten_kappa: int, wp_w: int) -> None:
    while (rest < wp_w and delta - rest >= ten_kappa
           and (rest + ten_kappa < wp_w or wp_w - rest > rest + ten_kappa - wp_w)):
        digits[-1] -= 1
        rest += ten_kappa


def _digit_gen(w, mp, delta: int, k: int, limit: int) -> tuple[list[int], int]:
    one_e = mp[1]
    one_f = 1 << -one_e
    wp_w = (mp[0] - w[0]) & M64
    p1 = mp[0] >> -one_e
    p2 = mp[0] & (one_f - 1)
    kappa = len(str(p1)) if p1 >= 10 else 1
    kappa = min(kappa, 9)
    digits: list[int] = []
    while kappa > 0:
        div = 10 ** (kappa - 1)
        d, p1 = divmod(p1, div) if kappa > 1 else (p1, 0)
        if d or digits:
            digits.append(d)
        kappa -= 1
        tmp = (p1 << -one_e) + p2
        if tmp <= delta:
            _round(digits, delta, tmp, (10**kappa) << -one_e, wp_w)
            return digits, k + kappa
    while True:
        p2 = (p2 * 10) & M64
        delta = (delta * 10) & M64
        d = p2 >> -one_e
        if d or digits:
            digits.append(d)
        p2 &= one_f - 1
        kappa -= 1
        if p2 < delta:
            index = -kappa
            _round(digits, delta, p2, one_f, (wp_w * (10**index if index < limit else 0)) & M64)
            return digits, k + kappa


def grisu2(value: float, limit: int = RAPIDJSON_1_1_0) -> tuple[str, int]:
    """(digits, K): value ~ int(digits) * 10^K, for a positive finite double."""
    v = _diyfp(value)
    w_m, w_p = _boundaries(v)
    c_mk, k = _cached_power_for(w_p[1])
    w = _mul(_normalize(v), c_mk)
    wp = _mul(w_p, c_mk)
    wm = _mul(w_m, c_mk)
    wm = (wm[0] + 1, wm[1])
    wp = ((wp[0] - 1) & M64, wp[1])
    digits, k = _digit_gen(w, wp, (wp[0] - wm[0]) & M64, k, limit)
    return "".join(map(str, digits)), k


def _exponent(k: int) -> str:
    return str(k)  # rapidjson's WriteExponent: '-' and the digits, no '+'


def prettify(digits: str, k: int, max_decimal_places: int = 324) -> str:
    length = len(digits)
    kk = length + k  # 10^(kk-1) <= v < 10^kk
    if 0 <= k and kk <= 21:
        return digits + "0" * (kk - length) + ".0"
    if 0 < kk <= 21:
        text = digits[:kk] + "." + digits[kk:]
        if 0 > k + max_decimal_places:
            frac = text[kk + 1:kk + 1 + max_decimal_places].rstrip("0") or "0"
            return text[:kk + 1] + frac
        return text
    if -6 < kk <= 0:
        text = "0." + "0" * -kk + digits
        if length - kk > max_decimal_places:
            frac = text[2:2 + max_decimal_places].rstrip("0") or "0"
            return "0." + frac
        return text
    if kk < -max_decimal_places:
        return "0.0"
    if length == 1:
        return digits + "e" + _exponent(kk - 1)
    return digits[0] + "." + digits[1:] + "e" + _exponent(kk - 1)


def dtoa(value: float, limit: int = RAPIDJSON_1_1_0) -> str:
    """rapidjson's ``Writer::Double`` text of ``value`` with ``kWriteNanAndInfFlag``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, k = grisu2(abs(value), limit)
    return sign + prettify(digits, k)
