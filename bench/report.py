"""bench/results/: results.json (every number), results.md (the tables), results.png (the chart);
plus what the numbers were taken on (machine, versions, commit, settings). Where a path has a
floor (bench/floor.py), its CPU per request and gateway ÷ floor join the tables and the chart."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bench.stats import Spread

PACKAGES = ("grpcio", "protobuf", "sanic", "uvloop", "orjson", "numpy", "tritonclient", "aiohttp")


# -- what the numbers were taken on -------------------------------------------------------------
def machine() -> dict:
    def first(path: str, key: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(":")
                if name.strip() == key:
                    return value.strip()
        except OSError:
            pass
        return "?"

    mem_kib = first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "cpu": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(mem_kib) / 1024 / 1024, 1) if mem_kib.isdigit() else None,
        "kernel": platform.release(),
    }


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def versions(triton: str, wrk_version: str) -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["triton"] = triton
    out["wrk"] = wrk_version
    return out


def wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    words = (out.stdout + out.stderr).split()
    return words[1] if len(words) > 1 else "?"


def git(root: Path) -> dict:
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {"commit": run("rev-parse", "HEAD") or "?", "branch": run("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(run("status", "--porcelain", "--untracked-files=no"))}


# -- formatting ---------------------------------------------------------------------------------
def num(v: float | None) -> str:
    """Three significant figures, no exponent for the sizes seen here."""
    if v is None:
        return "–"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}" if a >= 0.001 else f"{v:.2g}"


def cell(s: dict | Spread | None) -> str:
    """``median (min–max)`` over repeats; just the median when there was one value or no spread."""
    if s is None:
        return "–"
    if isinstance(s, Spread):
        s = s.as_dict()
    text = num(s["median"])
    if s["n"] > 1 and num(s["min"]) != num(s["max"]):
        text += f" ({num(s['min'])}–{num(s['max'])})"
    return text


def times(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}×"


def times_spread(s: dict | None, label: str = "") -> str:
    """A ratio over rounds, ``median× (min–max)`` (``label`` before the range); the median alone
    for one round."""
    if not s:
        return "–"
    text = f"{s['median']:.2f}×"
    return f"{text} ({label}{s['min']:.2f}–{s['max']:.2f})" if s["n"] > 1 else text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _get(side: dict, metric: str) -> dict | None:
    return side.get("summary", {}).get(metric)


def floor_cells(c: dict) -> list[str]:
    """The main table's floor columns: the floor's CPU per request and gateway ÷ floor of it."""
    if "floor" not in c:
        return ["–", "–"]
    return [cell(_get(c["floor"], "floor_cpu_us")), times(c.get("floor_ratio", {}).get("cpu_us"))]


def markdown(res: dict) -> str:
    meta = res["meta"]
    m, v, s, g = meta["machine"], meta["versions"], meta["settings"], meta["git"]
    lines = [
        f"# Benchmark: through the gateway vs directly to Triton and vs the floor{' (quick mode)' if s['quick'] else ''}",
        "",
        f"{meta['started']} · {meta['wall_s']:.0f} s · commit `{g['commit'][:12]}`{' (dirty)' if g['dirty'] else ''}"
        f" on `{g['branch']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}. Load average before/after: {meta['loadavg_before']} / {meta['loadavg_after']}. "
        "**The client, the gateway and Triton share these cores** (and anything else running): "
        "compare direct with gateway, not absolute numbers.",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        f"Settings: gateway workers {s['workers']}; each cell is the median over {s['repeats']} repeats "
        f"(min–max in brackets) of {s['duration_s']:g} s runs (LLM: {s['llm_duration_s']:g} s), "
        f"{'direct, gateway and floor' if s.get('floor', True) else 'direct and gateway'} interleaved, after "
        f"{s['warmup_s']:g} s of warm-up per side; concurrency = wrk connections or gRPC callers in a closed loop. "
        "CPU/req = utime+stime of the gateway's (the floor's, Triton's) processes over the run ÷ requests completed. "
        "×: gateway ÷ direct. The floor (bench/floor.py) is the same path done the least possible way on the same "
        "stack (Sanic or grpc.aio, one ModelInfer, nothing else), measured like the gateway; ÷ floor: gateway CPU "
        "per request ÷ the floor's" + ("." if s.get("floor", True) else " (not measured in this run: BENCH_FLOOR=0)."),
        "",
        "## Throughput and latency",
        "",
    ]
    rows = []
    for c in res["cases"]:
        if c["kind"] == "llm" or c.get("skipped"):
            continue
        d, gw, r = c["direct"], c["gateway"], c["ratio"]
        flag = " ⚠" if c.get("errors") else ""
        rows.append([
            c["title"] + flag, str(c["concurrency"]),
            cell(_get(d, "req_per_s")), cell(_get(gw, "req_per_s")), times(r.get("req_per_s")),
            cell(_get(d, "p50_ms")), cell(_get(gw, "p50_ms")), times(r.get("p50_ms")),
            cell(_get(d, "p99_ms")), cell(_get(gw, "p99_ms")), times(r.get("p99_ms")),
            cell(_get(gw, "gateway_cpu_us")),
            f"{cell(_get(d, 'triton_cpu_us'))} / {cell(_get(gw, 'triton_cpu_us'))}",
            *floor_cells(c),
        ])
    lines += _table(["path", "conc", "direct req/s", "gateway req/s", "×", "direct p50 ms", "gateway p50 ms", "×",
                     "direct p99 ms", "gateway p99 ms", "×", "gateway CPU µs/req", "Triton CPU µs/req direct / gw",
                     "floor CPU µs/req", "÷ floor"],
                    rows)
    lines += ["", "What each path sends (gateway · direct · floor):", ""]
    seen = set()
    for c in res["cases"]:
        if c["key"] not in seen and c["kind"] != "llm":
            seen.add(c["key"])
            floor = f" · {c['floor']['how']}" if "floor" in c else ""
            lines.append(f"- {c['title']}: {c['payload']} — {c['gateway']['how']} · {c['direct']['how']}{floor}")

    floors = [c for c in res["cases"] if "floor" in c and not c.get("skipped") and c["kind"] != "llm"]
    if floors:
        lines += ["", "## Against the floor", "",
                  "The same requests, answer checks, concurrency and run length as the gateway's, interleaved with "
                  "them; the floor serves every path from one process. ÷: gateway ÷ floor (CPU per request and "
                  "latency: above 1 is the gateway's own work; req/s: below 1). The LLM streams' floor is in their own "
                  "table below.", ""]
        rows = []
        for c in floors:
            f, gw, r = c["floor"], c["gateway"], c.get("floor_ratio", {})
            rows.append([
                c["title"], str(c["concurrency"]),
                cell(_get(f, "req_per_s")), cell(_get(gw, "req_per_s")), times(r.get("req_per_s")),
                cell(_get(f, "p50_ms")), cell(_get(gw, "p50_ms")), times(r.get("p50_ms")),
                cell(_get(f, "p99_ms")), cell(_get(gw, "p99_ms")), times(r.get("p99_ms")),
                cell(_get(f, "floor_cpu_us")), cell(_get(gw, "gateway_cpu_us")), times(r.get("cpu_us")),
            ])
        lines += _table(["path", "conc", "floor req/s", "gateway req/s", "÷", "floor p50 ms", "gateway p50 ms", "÷",
                         "floor p99 ms", "gateway p99 ms", "÷", "floor CPU µs/req", "gateway CPU µs/req", "÷"], rows)

    llms = [c for c in res["cases"] if c["kind"] == "llm" and not c.get("skipped")]
    if llms:
        lines += ["", "## LLM streaming", "",
                  f"{llms[0]['payload']}, directly: {llms[0]['direct']['how']}. TTFT = request sent → first token "
                  "event; ITL = gap between consecutive token events. p99 is taken over one repeat's samples "
                  "(requests for TTFT, gaps for ITL), so with few requests it is close to the maximum."
                  + (f" The floor ({llms[0]['floor']['how'].removeprefix('floor: ')}) is the same stream done the least "
                     "possible way on the gateway's stack: no plan, tokenizer, stop strings, timings or metrics."
                     if "floor" in llms[0] else ""), ""]
        rows = []
        keys = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tokens_per_s")
        for c in llms:
            rows.append([f"{c['title']}: direct", str(c["samples"]["direct"])]
                        + [cell(_get(c["direct"], k)) for k in keys] + ["", ""])
            if "floor" in c:
                rows.append([f"{c['title']}: floor", str(c["samples"]["floor"])]
                            + [cell(_get(c["floor"], k)) for k in keys]
                            + [cell(_get(c["floor"], "floor_cpu_us")), cell(_get(c["floor"], "floor_cpu_us_token"))])
            rows.append([f"{c['title']}: gateway", str(c["samples"]["gateway"])]
                        + [cell(_get(c["gateway"], k)) for k in keys]
                        + [cell(_get(c["gateway"], "gateway_cpu_us")), cell(_get(c["gateway"], "gateway_cpu_us_token"))])
            rows.append(["× direct", ""] + [times(c["ratio"].get(k)) for k in keys] + ["", ""])
            if "floor" in c:
                fr = c.get("floor_ratio", {})
                rows.append(["÷ floor", ""] + [times(fr.get(k)) for k in keys]
                            + [times(fr.get("cpu_us")), times(fr.get("cpu_us_token"))])
        lines += _table(["path", "requests/repeat", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
                         "tokens/s", "gateway CPU µs/req", "gateway CPU µs/token"], rows)

    for key in ("scaling", "scaling_grpc", "scaling_stream"):
        if res.get(key):
            lines += _scaling_section(res[key])

    if res.get("shadow"):
        from bench import shadow

        lines += shadow.markdown(res["shadow"])

    if res.get("shadow_grpc"):
        from bench import shadow_grpc

        lines += shadow_grpc.markdown(res["shadow_grpc"])

    if res.get("llm_scale"):
        from bench import llmscale

        lines += llmscale.markdown(res["llm_scale"])

    if res.get("memory"):
        lines += ["", "## Memory of gateway processes (RSS from /proc/<pid>/status)", "",
                  "idle = after start-up, before any request; loaded = after the load (VmRSS), peak = VmHWM; idle CPU "
                  "= CPU time spent while no request was sent (a few seconds after start-up), which every CPU/req "
                  "figure above includes.", ""]
        rows = [[str(p["workers"]), p["role"], num(p.get("idle_mib")), num(p.get("loaded_mib")), num(p.get("peak_mib")),
                 num(p.get("idle_cpu_pct"))] for p in res["memory"]]
        lines += _table(["workers", "process", "idle MiB", "loaded MiB", "peak MiB", "idle CPU %"], rows)

    problems = [f"- {c['title']} (conc {c['concurrency']}): {e}" for c in res["cases"] for e in c.get("errors", [])]
    problems += [f"- skipped {c['title']} (conc {c['concurrency']}): {c['skipped']}"
                 for c in res["cases"] if c.get("skipped")]
    if problems:
        lines += ["", "## Errors and skipped paths", ""] + problems
    return "\n".join(lines) + "\n"


def _scaling_section(sc: dict) -> list[str]:
    """One scaling run: req/s, latency and CPU by worker count, then Triton direct at the same load."""
    if "channels" in sc:
        callers = "streams" if sc.get("kind") == "grpc_stream" else "callers"
        load = (f"{sc['concurrency']} {callers} on {sc['channels']} connections from {sc['clients']} client "
                f"process{'es' if sc['clients'] != 1 else ''}")
    else:
        load = f"{sc['concurrency']} connections"
    lines = ["", f"## Scaling: {sc['title']}, {load}", ""]
    one = next((w["summary"].get("req_per_s") for w in sc["runs"] if w["workers"] == 1), None)
    speedup = lambda rps: times(rps["median"] / one["median"]) if rps and one and one["median"] else ""  # noqa: E731
    rows = [[str(w["workers"]), cell(w["summary"].get("req_per_s")), speedup(w["summary"].get("req_per_s")),
             cell(w["summary"].get("p50_ms")), cell(w["summary"].get("p99_ms")),
             cell(w["summary"].get("gateway_cpu_us")), cell(w["summary"].get("triton_cpu_us"))]
            for w in sc["runs"]]
    if sc.get("direct", {}).get("summary"):
        d = sc["direct"]["summary"]
        rows.append([f"Triton direct ({sc['direct']['how']})", cell(d.get("req_per_s")),
                     speedup(d.get("req_per_s")), cell(d.get("p50_ms")), cell(d.get("p99_ms")), "",
                     cell(d.get("triton_cpu_us"))])
    lines += _table(["workers", "req/s", "× 1 worker", "p50 ms", "p99 ms", "gateway CPU µs/req",
                     "Triton CPU µs/req"], rows)
    if sc.get("skipped"):
        lines += [""] + [f"- skipped: {why}" for why in sc["skipped"]]
    return lines


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in res["cases"] if not c.get("skipped") and c["kind"] != "llm"]
    labels = [f"{c['title']}\nc={c['concurrency']}" for c in cases]
    panels = [3, 3, 3] + ([1] if res.get("scaling") else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels) - 4, 7), gridspec_kw={"width_ratios": panels})
    colors = {"direct": "#4c72b0", "floor": "#55a868", "gateway": "#dd8452"}

    def bars(ax, sides: list[tuple[str, str]], title: str) -> None:
        """``sides``: (side, metric) pairs, one bar each per path (a path without that side: no bar)."""
        y = range(len(cases))
        height = 0.8 / len(sides)
        for k, (side, metric) in enumerate(sides):
            offset = (k - (len(sides) - 1) / 2) * height
            med, lo, hi = [], [], []
            for c in cases:
                sp = c.get(side, {}).get("summary", {}).get(metric)
                med.append(sp["median"] if sp else 0)
                lo.append(sp["median"] - sp["min"] if sp else 0)
                hi.append(sp["max"] - sp["median"] if sp else 0)
            ax.barh([i + offset for i in y], med, height=height, xerr=[lo, hi], color=colors[side], label=side,
                    capsize=2)
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(title)
        ax.grid(axis="x", which="both", alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)

    three = lambda metric: [("direct", metric), ("floor", metric), ("gateway", metric)]  # noqa: E731
    bars(axes[0], three("req_per_s"), "throughput, req/s (log; bars: min–max over repeats)")
    bars(axes[1], three("p50_ms"), "p50 latency, ms (log)")
    bars(axes[2], [("floor", "floor_cpu_us"), ("gateway", "gateway_cpu_us")], "CPU µs per request of the hop (log)")
    for ax in axes[1:3]:
        ax.set_yticklabels([])
    if res.get("scaling"):
        ax, sc = axes[3], res["scaling"]
        ws = [w["workers"] for w in sc["runs"]]
        meds = [w["summary"]["req_per_s"]["median"] if w["summary"].get("req_per_s") else 0 for w in sc["runs"]]
        ax.bar([str(w) for w in ws], meds, color=colors["gateway"])
        if sc.get("direct", {}).get("summary", {}).get("req_per_s"):
            ax.axhline(sc["direct"]["summary"]["req_per_s"]["median"], color=colors["direct"], ls="--",
                       label="Triton direct")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_xlabel("gateway workers")
        ax.set_title(f"{sc['title']}\nreq/s, c={sc['concurrency']}", fontsize=9)
    m, s = res["meta"]["machine"], res["meta"]["settings"]
    fig.suptitle(f"gateway vs direct to Triton and vs the floor · {m['cpu']} · {m['cores']} cores shared by client, gateway and "
                 f"Triton · {s['repeats']}×{s['duration_s']:g} s{' · quick mode' if s['quick'] else ''}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_text(res: dict, text: str, out_dir: Path) -> list[Path]:
    """``out_dir``/results.md (``text``) and results.json (``res``): a side-by-side bench's output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "results.md", out_dir / "results.json"
    md.write_text(text)
    js.write_text(json.dumps(res, indent=1, default=str) + "\n")
    return [md, js]


def write(res: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "results.md", out_dir / "results.png"]
    paths[0].write_text(json.dumps(res, indent=1, sort_keys=False) + "\n")
    paths[1].write_text(markdown(res))
    if not any(not c.get("skipped") and c["kind"] != "llm" for c in res["cases"]):
        paths.pop()  # nothing the chart shows (a run of the LLM streams or scaling alone)
        return paths
    try:
        chart(res, paths[2])
    except ImportError as e:  # matplotlib comes with `make bench` (requirements/bench.txt)
        print(f"warning: no chart ({e}); install requirements/bench.txt", file=sys.stderr)
        paths.pop()
    return paths
