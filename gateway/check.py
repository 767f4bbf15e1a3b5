"""``gateway check``: how every exposed name maps onto Triton, and every mismatch that can be seen.

    gateway check --config gateway.yaml [--json]

It connects to the Triton in ``upstream.grpc`` (the gateway's own upstream client and its metadata
calls) and asks each dialect of the catalogue that declares ``check="module:function"``
(gateway/dialect.py) for its rows and findings:

    Row       one exposed name: the dialect, the name a client uses, the Triton model and version
              it reaches, its inputs and outputs (client alias -> Triton tensor, dtype, shape) and a
              free-text detail (signature, payload kinds, profile ...)
    Finding   an ``error`` (requests to that name fail: missing model or version, a tensor name the
              model does not have, a dtype or shape the mapping cannot satisfy, a text family over a
              non-decoupled model) or a ``warning`` (works, with a caveat)

Each dialect's check calls the mapping code its requests run (TF Serving's Servables, GRPS's
``mapping``, the LLM ServedModels and profiles), so what check says is what requests will do.
Dialects whose listeners are all disabled are skipped. Triton unreachable is one error and
nothing else is checked; a Triton release known to crash when a call is cancelled is a warning
(gateway/upstream/cancel.py, ``upstream.cancel``).

Exit status: 0 without errors (warnings allowed), 1 with errors (the CLI gives 2 for a settings
file it cannot read). ``--json`` prints ``Report.as_json()``: {"upstream", "triton": {"reachable",
"ready"}, "dialects": [{"name", "enabled", "listeners"}], "rows": [...], "findings": [...],
"errors", "warnings"}.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.access import scoped
from gateway.core.errors import GatewayError
from gateway.dialect import load
from gateway.dialects import CATALOGUE
from gateway.ops.findings import CheckContext, Finding, Row
from gateway.settings import Settings
from gateway.upstream import Upstream, cancel, from_settings


@dataclass(slots=True)
class Report:
    upstream: str
    reachable: bool = False
    ready: bool = False
    dialects: list[dict[str, Any]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(f.level == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.level == "warning" for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def as_json(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "triton": {"reachable": self.reachable, "ready": self.ready},
            "dialects": self.dialects,
            "rows": [asdict(r) for r in self.rows],
            "findings": [asdict(f) for f in self.findings],
            "errors": self.errors,
            "warnings": self.warnings,
        }


async def collect(settings: Settings, upstream: Upstream) -> Report:
    """Every dialect's rows and findings against ``upstream`` (connected by the caller)."""
    report = Report(settings.upstream.grpc)
    try:
        await upstream.repository_index()
    except GatewayError as e:
        report.findings.append(Finding("error", "triton", settings.upstream.grpc,
                                       f"Triton unreachable at {settings.upstream.grpc}: {e.message} "
                                       f"(is it running? upstream.grpc in the config names it)"))
        return report
    report.reachable = True
    report.ready = await upstream.server_ready()
    try:  # a Triton known to crash on a cancellation (gateway/upstream/cancel.py)
        version = (await upstream.server_metadata()).get("version", "")
    except GatewayError:
        version = ""
    if (warning := cancel.crash_warning(version, settings.upstream.cancel)) is not None:
        report.findings.append(Finding("warning", "triton", "upstream.cancel", warning))
    if not report.ready:
        report.findings.append(Finding("warning", "triton", settings.upstream.grpc,
                                       "Triton answers but is not ready (models still loading?)"))
    for d in CATALOGUE:
        if d.check is None:
            continue
        listeners = [lst for lst in settings.listeners.values() if lst.dialect == d.name]
        enabled = any(lst.enabled for lst in listeners)
        report.dialects.append({"name": d.name, "enabled": enabled,
                                "listeners": {lst.name: lst.port for lst in listeners if lst.enabled}})
        if not enabled:
            continue
        config = settings.dialect(d.name)
        # the dialect's view, as its requests will have it (dialects.<name>.triton_models)
        ctx = CheckContext(settings, d.name, config, scoped(upstream, getattr(config, "triton_models", ())))
        try:
            items = await load(d.check)(ctx)
        except GatewayError as e:
            items = [ctx.error("*", f"check could not complete: {e.message}")]
        except Exception as e:  # noqa: BLE001 - one dialect's bug must not hide the others' findings
            items = [ctx.error("*", f"check failed: {type(e).__name__}: {e}")]
        for item in items:
            (report.rows if isinstance(item, Row) else report.findings).append(item)
        legacy = getattr(config, "legacy", None)
        if legacy is not None:
            report.dialects[-1]["legacy"] = await _legacy(d.name, legacy, report)
    return report


# a legacy server's side -> (what a finding calls the server, whose requests fail when it is not reachable)
_LEGACY_SIDES = {"http": ("legacy server", "requests"), "grpc": ("legacy gRPC server", "gRPC requests")}


async def _legacy(dialect: str, legacy, report: Report) -> dict[str, Any]:
    """The dialect's legacy server (docs/migration.md): its HTTP and gRPC sides probed, its routes summarised."""
    out: dict[str, Any] = {"http": legacy.http, "grpc": legacy.grpc, "route": legacy.route,
                           "models": {name: m.route or legacy.route for name, m in legacy.models.items()}}
    for side, (server, requests) in _LEGACY_SIDES.items():
        address = getattr(legacy, side)
        if not address:
            continue
        out[f"{side}_reachable"] = up = await _probe(side, dialect, legacy)
        if not up:
            report.findings.append(Finding("warning", dialect, f"legacy.{side}",
                                           f"{server} {address} not reachable: {requests} of models on the legacy, "
                                           "shadow and canary routes that it answers will fail"))
    return out


async def _probe(side: str, dialect: str, legacy) -> bool:
    """One side of the legacy server takes a connection (and, over HTTP, answers ``/``)."""
    if side == "http":
        from gateway.cutover.legacy_http import LegacyHttp

        client = LegacyHttp(dialect, legacy)
        probe = client.probe("/")
    else:
        from gateway.upstream.relay import GrpcRelay

        client = GrpcRelay(legacy)
        probe = client.probe()
    try:
        return await probe
    finally:
        await client.close()


async def run(settings: Settings) -> Report:
    """Connect to ``upstream.grpc`` with the gateway's own client, collect, close."""

    client = from_settings(settings, default_timeout=min(settings.upstream.timeout_s, 10.0), cache_ttl=300.0,
                           shared_memory=None)  # it runs no inference
    await client.connect()
    try:
        return await collect(settings, client)
    finally:
        await client.close()


# -- rendering -------------------------------------------------------------------------------------
def _version(v: str) -> str:
    return v or "latest"


def render_table(report: Report) -> str:
    """Per dialect, a table of NAME, TRITON MODEL, VERSION and DETAIL, each row followed by its
    inputs and outputs; then the findings, errors first, and the counts."""
    triton = ("unreachable" if not report.reachable else "reachable, ready" if report.ready
              else "reachable, NOT ready")
    lines = [f"Triton {report.upstream}: {triton}"]
    head = ("NAME", "TRITON MODEL", "VERSION", "DETAIL")
    for d in report.dialects:
        ports = ", ".join(f"{n} :{p}" for n, p in d["listeners"].items())
        lines += ["", f"{d['name']} ({ports})" if d["enabled"] else f"{d['name']} (all listeners disabled: skipped)"]
        rows = [r for r in report.rows if r.dialect == d["name"]]
        if not d["enabled"]:
            continue
        if d.get("legacy"):
            lg = d["legacy"]
            state = {True: "reachable", False: "NOT reachable"}.get(lg.get("http_reachable"), "not probed")
            routed = ", ".join(f"{n}: {r}" for n, r in lg["models"].items()) or "none listed"
            lines.append(f"  legacy {lg['http'] or ''} {lg['grpc'] or ''}".rstrip() + f": {state}; default route "
                         f"{lg['route']}; models: {routed}")
        if not rows:
            lines.append("  (nothing exposed)")
            continue
        cells = [head] + [(r.name, r.model, _version(r.version) if r.model else "", r.detail) for r in rows]
        widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
        lines.append(_line(head, widths))
        for r, c in zip(rows, cells[1:], strict=True):
            lines.append(_line(c, widths))
            for label, tensors in (("in: ", r.inputs), ("out:", r.outputs)):
                if tensors:
                    lines.append(f"      {label} {', '.join(map(str, tensors))}")
    if report.findings:
        lines += ["", "Findings:"]
        for f in sorted(report.findings, key=lambda f: f.level != "error"):
            lines.append(f"  {f.level.upper():<7} {f.dialect} {f.name}: {f.message}")
    lines += ["", f"{report.errors} error(s), {report.warnings} warning(s)"]
    return "\n".join(lines)


def _line(cells, widths) -> str:
    return "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def main(settings: Settings, as_json: bool = False) -> int:
    """``gateway check``: print the report; the exit status (0, or 1 with errors)."""
    report = asyncio.run(run(settings))
    if as_json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(render_table(report))
    return report.exit_code
