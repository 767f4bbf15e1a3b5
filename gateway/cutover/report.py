"""``gateway migration report``: per model, what the comparison has seen and whether to cut over.

It reads the gateway's own figures from its admin listener (``/metrics``: every worker's sums),
``gateway_migration_total`` and ``gateway_migration_max_error``, and the mismatch files
(``mismatches.path``) for the outputs that differed. Per model:

    compared     match + mismatch + legacy_error + triton_error
    agreement    match / compared
    worst error  the largest abs (and rel) error over its outputs, and which output
    verdict      "ready to cut over" when there was no mismatch and no error on either side in at
                 least ``ready_after`` compared requests (``--min-compared`` overrides); else why not

Exit status: 0 when every model in the report is ready, 1 otherwise, 2 when the gateway cannot be read.
"""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from . import record

COMPARED = ("match", "mismatch", "legacy_error", "triton_error")


@dataclass
class ModelReport:
    dialect: str
    model: str
    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    routes: set[str] = field(default_factory=set)
    errors: dict[str, dict[str, float]] = field(default_factory=dict)  # output -> {abs, rel}
    formats: dict[str, float] = field(default_factory=dict)
    differing: dict[str, str] = field(default_factory=dict)  # output -> the first recorded reason

    @property
    def compared(self) -> int:
        return int(sum(self.counts.get(k, 0) for k in COMPARED))

    @property
    def agreement(self) -> float | None:
        return self.counts.get("match", 0) / self.compared if self.compared else None

    def worst(self) -> tuple[str, float, float] | None:
        if not self.errors:
            return None
        name = max(self.errors, key=lambda n: (self.errors[n].get("abs", 0.0), self.errors[n].get("rel", 0.0)))
        return name, self.errors[name].get("abs", 0.0), self.errors[name].get("rel", 0.0)

    def verdict(self, min_compared: int) -> str:
        bad = int(sum(self.counts.get(k, 0) for k in COMPARED[1:]))
        if bad:
            parts = [f"{int(self.counts[k])} {k}" for k in COMPARED[1:] if self.counts.get(k)]
            return "not ready: " + ", ".join(parts)
        if self.compared < min_compared:
            return f"not ready: {self.compared} compared, {min_compared} needed"
        return "ready to cut over"


def parse(text: str) -> dict[tuple[str, str], ModelReport]:
    models: dict[tuple[str, str], ModelReport] = {}

    def get(dialect: str, model: str) -> ModelReport:
        key = (dialect, model)
        if key not in models:
            models[key] = ModelReport(dialect, model)
        return models[key]

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            if s.name == "gateway_migration_total":
                m = get(labels["dialect"], labels["model"])
                m.counts[labels["outcome"]] += s.value
                m.routes.add(labels["route"])
            elif s.name == "gateway_migration_format_total":
                get(labels["dialect"], labels["model"]).formats[labels["kind"]] = s.value
            elif s.name == "gateway_migration_max_error":
                m = get(labels["dialect"], labels["model"])
                m.errors.setdefault(labels["output"], {})[labels["kind"]] = s.value
    return models


def collect(url: str, mismatches: list[str] | None = None, timeout: float = 10.0) -> list[ModelReport]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    models = parse(text)
    for path in mismatches or ():
        for line in record.read(path):
            m = models.get((line.get("dialect", ""), line.get("model", "")))
            if m is None:
                continue
            for name, d in (line.get("outputs") or {}).items():
                m.differing.setdefault(name, d.get("reason", ""))
    return sorted(models.values(), key=lambda m: (m.dialect, m.model))


def render(models: list[ModelReport], min_compared: dict[str, int] | int) -> str:
    rows = [("dialect", "model", "routes", "compared", "agreement", "dropped", "skipped", "worst error", "verdict")]
    notes = []
    for m in models:
        need = min_compared if isinstance(min_compared, int) else min_compared.get(m.dialect, 1000)
        agreement = "-" if m.agreement is None else f"{100 * m.agreement:.2f} %"
        worst = m.worst()
        worst_text = "-" if worst is None else f"{worst[0]}: abs {worst[1]:.3g}, rel {worst[2]:.3g}"
        rows.append((m.dialect, m.model, ",".join(sorted(m.routes)), str(m.compared), agreement,
                     str(int(m.counts.get("dropped", 0))), str(int(m.counts.get("skipped", 0))), worst_text,
                     m.verdict(need)))
        for name, reason in sorted(m.differing.items()):
            err = m.errors.get(name, {})
            extra = f" (max abs {err['abs']:.3g}, rel {err.get('rel', 0.0):.3g})" if "abs" in err else ""
            notes.append(f"  {m.dialect}/{m.model}: output {name}: {reason}{extra}")
        for kind, n in sorted(m.formats.items()):
            notes.append(f"  {m.dialect}/{m.model}: {int(n)} answers equal in value, differing in {kind.replace('_', ' ')}")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if notes:
        lines += ["", "differences:"] + notes
    return "\n".join(lines) + "\n"


def as_json(models: list[ModelReport], min_compared: dict[str, int] | int) -> str:
    out = []
    for m in models:
        need = min_compared if isinstance(min_compared, int) else min_compared.get(m.dialect, 1000)
        worst = m.worst()
        out.append({"dialect": m.dialect, "model": m.model, "routes": sorted(m.routes), "compared": m.compared,
                    "agreement": m.agreement, "counts": dict(m.counts), "errors": m.errors, "formats": m.formats,
                    "differing": m.differing, "worst": None if worst is None else
                    {"output": worst[0], "abs": worst[1], "rel": worst[2]}, "verdict": m.verdict(need)})
    return json.dumps(out, indent=2) + "\n"
