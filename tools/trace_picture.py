"""Draw one trace as a waterfall PNG from the spans tests/contract/test_tracing.py received.

    python tools/trace_picture.py .run/trace-tfserving-rest.json docs/trace-tfserving-rest.png

The JSON is what the contract test writes for its TF REST predict (real spans: the gateway's and
Triton's, as their OTLP exporters sent them to the test's receiver): a list of
``{service, name, kind, span_id, parent_span_id, start_ns, end_ns}``. One bar per span, indented
under its parent, in start order; times relative to the first span's start.
"""

from __future__ import annotations

import json
import sys

KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT"}
COLOURS = {"triton-inference-server": "#76b900"}  # Triton green; the gateway's spans in blue


def order(spans: list[dict]) -> list[tuple[int, dict]]:
    """(depth, span) depth-first from the roots, children by start time."""
    ids = {s["span_id"] for s in spans}
    children: dict[str, list[dict]] = {}
    for s in spans:
        children.setdefault(s["parent_span_id"] if s["parent_span_id"] in ids else "", []).append(s)
    out: list[tuple[int, dict]] = []

    def walk(parent: str, depth: int) -> None:
        for s in sorted(children.get(parent, ()), key=lambda x: x["start_ns"]):
            out.append((depth, s))
            walk(s["span_id"], depth + 1)

    walk("", 0)
    return out


def draw(spans: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = order(spans)
    t0 = min(s["start_ns"] for s in spans)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.2))
    for i, (_depth, s) in enumerate(rows):
        start, width = (s["start_ns"] - t0) / 1e6, max((s["end_ns"] - s["start_ns"]) / 1e6, 0.01)
        ax.barh(i, width, left=start, color=COLOURS.get(s["service"], "#3b7dd8"), height=0.6)
        ax.text(start + width, i, f" {width:.2f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{s['name']}  [{s['service']}, {KINDS.get(s['kind'], s['kind'])}] {'<' * d:<4}"
                        for d, s in rows], fontsize=8, family="monospace")  # '<' per level under the root
    ax.invert_yaxis()
    ax.set_xlabel("ms since the gateway's server span started")
    ax.set_title(f"trace {spans[0]['trace_id']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    src, dst = sys.argv[1:3]
    with open(src) as f:
        draw(json.load(f), dst)
