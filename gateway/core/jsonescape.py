"""How the C++ JSON writers the dialects imitate escape strings; one table each.

``RAPIDJSON``: rapidjson's ``Writer::WriteString`` (TF Serving's REST answers, Triton's HTTP, GRPS's
pretty predict text): controls as ``\\uXXXX`` (upper-case hex) or JSON's short escapes, ``"`` and
``\\``; every other character as it is.

``escape``: protobuf C++'s JSON string escaping (util/internal/json_escaping.cc; writer.cc MustEscape
in 3.x), as both its JSON printers that dialects imitate write strings: GRPS's
``MessageToJsonString`` answers and TF Serving's status and metadata documents.

Control characters, ``"``, ``\\``, ``<``, ``>``, DEL, C1 controls and a few invisible/format
characters become ``\\uXXXX`` (lower-case hex; a surrogate pair above the BMP); JSON's own short
escapes where it has one; everything else, non-ASCII included, stays as it is (UTF-8 on the wire).
"""

from __future__ import annotations

import re

_NAMED = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}  # JSON's own
RAPIDJSON = {cp: f"\\u{cp:04X}" for cp in range(0x20)} | _NAMED
_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0x600, 0x603), (0x200B, 0x200F), (0x2028, 0x202E),
           (0x2060, 0x2064), (0x206A, 0x206F), (0xFFF9, 0xFFFB), (0x1D173, 0x1D17A), (0xE0020, 0xE007F))
_SINGLES = (0x3C, 0x3E, 0xAD, 0x6DD, 0x70F, 0x17B4, 0x17B5, 0xFEFF, 0xE0001)


def _u(cp: int) -> str:
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    cp -= 0x10000
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


ESCAPES = {cp: _u(cp) for lo, hi in _RANGES for cp in range(lo, hi + 1)}
ESCAPES.update({cp: _u(cp) for cp in _SINGLES})
ESCAPES.update(_NAMED)
_NEEDS_ESCAPE = re.compile("[" + "".join(re.escape(chr(cp)) for cp in sorted(ESCAPES)) + "]")


def escape(text: str) -> str:
    """``text`` as protobuf's printers write it inside quotes."""
    return text.translate(ESCAPES) if _NEEDS_ESCAPE.search(text) else text
