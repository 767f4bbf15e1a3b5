"""`make bench`'s LLM rows at scale, on a stack of their own.

Triton serves a copy of model_repository_trtllm/ (the TensorRT-LLM-shaped stand-ins and their
byte-level BPE tokenizer; the tensorrt_llm step's ``token_delay_ms`` set to ``TRT_DELAY_MS``) and a
copy of tiny_llm, ``tiny_llm_slow``, whose tokens come ``SLOW_DELAY_MS`` apart. One gateway worker
has config/docker-llm.yaml's MindIE section (the model's own tokenizer and chat template through
``tokenizer_dir``; a streamed prompt tokenized in the gateway and sent to tensorrt_llm, its ids
decoded in the gateway). Three rows:

  llm_added    OpenAI chat stream (the real tokenizer and template) beside Triton's own HTTP
               generate_stream of the ensemble (its preprocessing and postprocessing), both
               generating the same ``ADDED_TOKENS`` tokens, at concurrency 1 and 64: TTFT and ITL
               p50/p99 of each and the gateway's added p50 (its minus Triton's)
  llm_streams  ``STREAMS`` chat streams of tiny_llm_slow sent at once to the worker: its RSS with
               them in flight over its RSS before, per stream; every stream's tokens (a stream that
               ends short, or waits longer than ``STALL_S`` between two tokens, stalled; the wait
               for the first token of a thousand sent at once is the TTFT column)
  llm_tokenize a prompt of ``LONG_TOKENS`` tokens (/v1/completions of the ensemble, one token out)
               while a probe asks the same worker GET /v1/models every ``PROBE_EVERY_S``: the
               probes' latency during the long request beside their latency before it (the event
               loop's lag for other requests)

The delays keep the load within what 2 shared cores carry (the load generator is one Python
process): at concurrency 64, ``TRT_DELAY_MS`` apart, the worker streams some 64 / delay tokens a
second; 1,000 slow streams, 1,000 / ``SLOW_DELAY_MS`` a second.
"""

from __future__ import annotations

import asyncio
import re
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import yaml

from bench import cases as cases_mod
from bench import llmload, procstat, stats

TRT_DELAY_MS = 80
ADDED_TOKENS = 8
ADDED_PROMPT = "How is the weather?"  # the stand-in's weather reply: longer than ADDED_TOKENS tokens
ADDED_CONCURRENCY = (1, 64)
SLOW_MODEL = "tiny_llm_slow"
SLOW_DELAY_MS = 2000
STREAMS = 1000
STREAM_TOKENS = 3
STALL_S = 2 * SLOW_DELAY_MS / 1000 + 2.0
LONG_TOKENS = 32768
PROBE_EVERY_S = 0.005
TOKENIZER = "model_repository_trtllm/tokenizer"


# -- the stack ------------------------------------------------------------------------------------
def repository(root: Path, dest: Path, trt_delay_ms: int = TRT_DELAY_MS, slow_delay_ms: int = SLOW_DELAY_MS) -> Path:
    """model_repository_trtllm/ copied to ``dest`` (its relative lib/ and tokenizer/ paths kept), with
    tensorrt_llm's token delay set and tiny_llm added as ``SLOW_MODEL``; returns its models folder."""
    shutil.copytree(root / "model_repository_trtllm", dest, ignore=shutil.ignore_patterns("__pycache__"))
    models = dest / "models"
    set_delay(models / "tensorrt_llm" / "config.pbtxt", trt_delay_ms)
    slow = models / SLOW_MODEL
    shutil.copytree(root / "model_repository" / "tiny_llm", slow, ignore=shutil.ignore_patterns("__pycache__"))
    config = slow / "config.pbtxt"
    config.write_text(re.sub(r'(?m)^name: "tiny_llm"', f'name: "{SLOW_MODEL}"', config.read_text()))
    set_delay(config, slow_delay_ms)
    return models


def set_delay(config: Path, delay_ms: int) -> None:
    text, n = re.subn(r'(key: "token_delay_ms",? value: \{ string_value: )"[^"]*"', rf'\g<1>"{delay_ms}"',
                      config.read_text())
    if n != 1:
        raise ValueError(f"{config}: no token_delay_ms parameter to set")
    config.write_text(text)


def raise_fd_limit(want: int) -> int:
    """This process's soft limit of open files raised towards ``want`` (never above the hard limit);
    the limit now. 1,000 streams are 1,000 sockets in the load generator and in the worker."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def mindie_section(root: Path) -> dict:
    """config/docker-llm.yaml's MindIE section, the tokenizer where this checkout has it."""
    mindie = yaml.safe_load((root / "config" / "docker-llm.yaml").read_text())["dialects"]["mindie"]
    for options in mindie["models"].values():
        if "tokenizer_dir" in options:
            options["tokenizer_dir"] = str(root / TOKENIZER)
    return mindie


# -- llm_added --------------------------------------------------------------------------------------
def added_sides(triton_http: str, gateway_http: str) -> tuple[cases_mod.Side, cases_mod.Side]:
    """(Triton's generate_stream of the ensemble, the gateway's chat stream): the same tokens."""
    direct = cases_mod.Side(
        "Triton HTTP generate_stream (ensemble)", "llm", f"{triton_http}/v2/models/ensemble/generate_stream",
        orjson.dumps({"text_input": ADDED_PROMPT, "max_tokens": ADDED_TOKENS, "stream": True}),
        cases_mod.check_sse(cases_mod.triton_token, ADDED_TOKENS), is_token=cases_mod.triton_token)
    gateway = cases_mod.Side(
        "gateway :mindie_http POST /v1/chat/completions stream (ensemble)", "llm",
        f"{gateway_http}/v1/chat/completions",
        orjson.dumps({"model": "ensemble", "stream": True, "max_tokens": ADDED_TOKENS,
                      "messages": [{"role": "user", "content": ADDED_PROMPT}]}),
        cases_mod.check_sse(cases_mod.openai_token, ADDED_TOKENS), is_token=cases_mod.openai_token)
    return direct, gateway


def latency_summary(r: llmload.LlmResult) -> dict:
    pct = lambda xs, q: stats.percentile(xs, q) * 1e3 if xs else None  # noqa: E731
    return {"requests": r.requests, "tokens": r.tokens, "errors": r.errors, "first_error": r.first_error,
            "ttft_p50_ms": pct(r.ttft_s, 50), "ttft_p99_ms": pct(r.ttft_s, 99),
            "itl_p50_ms": pct(r.itl_s, 50), "itl_p99_ms": pct(r.itl_s, 99)}


def added(gateway: dict, direct: dict) -> dict:
    """The gateway's latency minus Triton's, metric by metric (None where either is missing)."""
    return {k: (gateway[k] - direct[k]) if gateway.get(k) is not None and direct.get(k) is not None else None
            for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")}


async def added_row(direct: cases_mod.Side, gateway: cases_mod.Side, concurrency: int, duration_s: float,
                    repeats: int) -> dict:
    """Both sides, repeats interleaved (order alternating); the samples of every repeat pooled per side."""
    pooled = {"direct": llmload.LlmResult(), "gateway": llmload.LlmResult()}
    sides = [("direct", direct), ("gateway", gateway)]
    await llmload.run(gateway.address, gateway.body, gateway.is_token, 0.5, min_requests=1, concurrency=concurrency)
    for rep in range(repeats):
        for label, side in sides if rep % 2 == 0 else sides[::-1]:
            r = await llmload.run(side.address, side.body, side.is_token, duration_s, min_requests=1,
                                  concurrency=concurrency)
            pool(pooled[label], r)
    out = {label: latency_summary(r) for label, r in pooled.items()}
    out["added"] = added(out["gateway"], out["direct"])
    out["concurrency"] = concurrency
    return out


def pool(into: llmload.LlmResult, r: llmload.LlmResult) -> None:
    into.requests += r.requests
    into.tokens += r.tokens
    into.errors += r.errors
    into.first_error = into.first_error or r.first_error
    into.duration_s += r.duration_s
    into.ttft_s += r.ttft_s
    into.itl_s += r.itl_s


# -- llm_streams ------------------------------------------------------------------------------------
@dataclass
class StreamsResult:
    streams: int
    tokens_each: int
    completed: int = 0  # streams that ended with every token
    errors: int = 0
    first_error: str = ""
    stalled: int = 0  # streams short of tokens, or with a wait over STALL_S between two tokens
    max_gap_s: float = 0.0  # the longest wait between two tokens, any stream
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    rss_before_kib: int | None = None
    rss_open_kib: int | None = None  # the worker's RSS with the streams in flight (the highest sampled)
    open_at_peak: int = 0  # the most streams in flight (sent, not ended) at once
    wall_s: float = 0.0

    def per_stream_kib(self) -> float | None:
        if self.rss_before_kib is None or self.rss_open_kib is None or not self.open_at_peak:
            return None
        return (self.rss_open_kib - self.rss_before_kib) / self.open_at_peak


def fold_stream(res: StreamsResult, stamps: list[float], stall_s: float = STALL_S) -> None:
    """One stream's token arrival times (seconds after it was sent) into ``res``."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    if stamps:
        res.ttft_s.append(stamps[0])
        res.itl_s.extend(gaps)
    res.max_gap_s = max([res.max_gap_s, *gaps])
    if len(stamps) == res.tokens_each:
        res.completed += 1
    if len(stamps) < res.tokens_each or any(g > stall_s for g in gaps):
        res.stalled += 1


async def many_streams(url: str, worker_pid: int, streams: int = STREAMS, tokens: int = STREAM_TOKENS,
                       model: str = SLOW_MODEL, timeout_s: float = 120.0) -> StreamsResult:
    """``streams`` chat streams at once, each of ``tokens`` tokens, on the worker ``worker_pid``."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"refusing to send anything but to 127.0.0.1: {url}")
    res = StreamsResult(streams, tokens)
    body = orjson.dumps({"model": model, "stream": True, "max_tokens": tokens,
                         "messages": [{"role": "user", "content": cases_mod.LLM_PROMPT}]})
    res.rss_before_kib = procstat.memory_kib(worker_pid)["rss_kib"]
    open_now = 0
    done = asyncio.Event()

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal open_now
        stamps: list[float] = []
        t0 = time.perf_counter()
        open_now += 1
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
                async for line in resp.content:
                    if cases_mod.openai_token(line):
                        stamps.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - counted and named; the other streams go on
            res.errors += 1
            res.first_error = res.first_error or f"{type(e).__name__}: {e}"
        finally:
            open_now -= 1
        fold_stream(res, stamps)

    async def sample() -> None:
        while not done.is_set():
            rss = procstat.memory_kib(worker_pid)["rss_kib"]
            res.open_at_peak = max(res.open_at_peak, open_now)
            if rss is not None and open_now and (res.rss_open_kib is None or rss > res.rss_open_kib):
                res.rss_open_kib = rss
            try:
                await asyncio.wait_for(done.wait(), 0.2)
            except TimeoutError:
                pass

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    start = time.perf_counter()
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        sampler = asyncio.ensure_future(sample())
        try:
            await asyncio.gather(*(one(session) for _ in range(streams)))
        finally:
            done.set()
            await sampler
    res.wall_s = time.perf_counter() - start
    return res


def streams_summary(r: StreamsResult) -> dict:
    pct = lambda xs, q: stats.percentile(xs, q) * 1e3 if xs else None  # noqa: E731
    kib = r.per_stream_kib()
    return {"streams": r.streams, "tokens_each": r.tokens_each, "completed": r.completed, "stalled": r.stalled,
            "errors": r.errors, "first_error": r.first_error, "max_gap_ms": r.max_gap_s * 1e3,
            "ttft_p50_ms": pct(r.ttft_s, 50), "ttft_p99_ms": pct(r.ttft_s, 99),
            "itl_p50_ms": pct(r.itl_s, 50), "itl_p99_ms": pct(r.itl_s, 99),
            "rss_before_mib": r.rss_before_kib / 1024 if r.rss_before_kib else None,
            "rss_open_mib": r.rss_open_kib / 1024 if r.rss_open_kib else None,
            "open_at_peak": r.open_at_peak, "kib_per_stream": kib, "wall_s": r.wall_s,
            "token_delay_ms": SLOW_DELAY_MS}


# -- llm_tokenize -----------------------------------------------------------------------------------
def long_prompt(tokens: int, tokenizer_dir: Path) -> tuple[str, int]:
    """A prompt of about ``tokens`` tokens with the model's tokenizer: (text, its count)."""
    from gateway.llm.hf import load

    tok = load(str(tokenizer_dir))
    unit = "The quick brown fox jumps over the lazy dog while the gateway tokenizes this sentence. "
    per = len(tok.prompt_ids(unit * 8)) / 8
    text = unit * max(1, int(tokens / per))
    return text, len(tok.prompt_ids(text))


async def probe_while(probe_url: str, work, every_s: float = PROBE_EVERY_S) -> tuple[list[float], float]:
    """Probe ``probe_url`` (GET) every ``every_s`` while ``work`` (a coroutine) runs: (each probe's
    latency, the work's seconds)."""
    lat: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        task = asyncio.ensure_future(work)
        t0 = time.perf_counter()
        while not task.done():
            s = time.perf_counter()
            async with session.get(probe_url) as r:
                await r.read()
            lat.append(time.perf_counter() - s)
            await asyncio.sleep(every_s)
        took = time.perf_counter() - t0
        await task
    return lat, took


async def tokenize_row(gateway_http: str, prompt: str, repeats: int = 3) -> dict:
    """The probes' latency before (a second of them alone) and while the long prompt is answered."""
    probe = f"{gateway_http}/v1/models"
    body = orjson.dumps({"model": "ensemble", "prompt": prompt, "max_tokens": 1})

    async def long_request() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session, \
                session.post(f"{gateway_http}/v1/completions", data=body,
                             headers={"Content-Type": "application/json"}) as r:
            text = await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {text[:200]!r}")

    alone, during, took = [], [], []
    for _ in range(repeats):
        lat, _ = await probe_while(probe, asyncio.sleep(1.0))
        alone += lat
        lat, t = await probe_while(probe, long_request())
        during += lat
        took.append(t)
    ms = lambda xs, q: stats.percentile(xs, q) * 1e3  # noqa: E731
    return {"probes_alone": len(alone), "probes_during": len(during),
            "alone_p50_ms": ms(alone, 50), "alone_p99_ms": ms(alone, 99), "alone_max_ms": max(alone) * 1e3,
            "during_p50_ms": ms(during, 50), "during_p99_ms": ms(during, 99), "during_max_ms": max(during) * 1e3,
            "lag_p99_ms": ms(during, 99) - ms(alone, 99), "lag_max_ms": (max(during) - max(alone)) * 1e3,
            "long_request_s": sorted(took)[len(took) // 2]}


# -- the rows, on their own stack -------------------------------------------------------------------
ROWS = ("llm_added", "llm_streams", "llm_tokenize")


def need_s(duration_s: float, repeats: int, rows: tuple[str, ...] = ROWS) -> float:
    """Seconds the wanted rows take, with their stack's start (Triton loads five python models)."""
    total = 60.0 if rows else 0.0
    if "llm_added" in rows:
        total += len(ADDED_CONCURRENCY) * (2 * repeats * (duration_s + 1.5) + 1)
    if "llm_streams" in rows:
        total += 5 + STREAM_TOKENS * SLOW_DELAY_MS / 1000 + 10
    if "llm_tokenize" in rows:
        total += 3 * (1 + 3) + 5
    return total


def run(root: Path, tmp: Path, rows: tuple[str, ...], duration_s: float, repeats: int,
        log_dir: Path | None = None) -> dict:
    """Start Triton (the repository copy) and one gateway worker, measure ``rows``, stop both."""
    from gateway.dialects import LISTENERS
    from gateway.local import localtriton
    from gateway.settings import LocalTriton
    from tests.support import free_port, gateway_config, start_gateway, stop_gateway

    out: dict = {"trt_delay_ms": TRT_DELAY_MS, "slow_delay_ms": SLOW_DELAY_MS}
    if "llm_streams" in rows:
        out["fd_limit"] = raise_fd_limit(4 * STREAMS)  # before the gateway starts: it inherits the limit
    models = repository(root, tmp / "trtllm")
    cfg = LocalTriton(venv=str(root / ".venv-triton"), model_repository=str(models), workdir=str(tmp / "triton-llm"),
                      http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), startup_timeout_s=240)
    triton = localtriton.start(cfg, root, log_path=tmp / "triton-llm.log")
    gw = None
    try:
        ports = {name: free_port() for name in LISTENERS}
        conf = gateway_config(triton.grpc_target, ports, {"workers": 1, "log_level": "WARNING",
                                                          "dialects": {"mindie": mindie_section(root)}})
        (tmp / "gw-llm").mkdir(exist_ok=True)
        gw = start_gateway(conf, tmp / "gw-llm")
        gw_http = gw.url("mindie_http")
        out["errors"] = []
        for row in rows:
            try:
                _row(row, out, triton.http_url, gw_http, gw.proc.pid, root, duration_s, repeats)
            except Exception as e:  # noqa: BLE001 - the row named with why; the next row runs
                out["errors"].append(f"{row}: {type(e).__name__}: {str(e)[:300]}")
                print(f"  {row} failed: {out['errors'][-1]}", flush=True)
    finally:
        if gw is not None:
            stop_gateway(gw)
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(gw.log_path, log_dir / "gateway-llm.log")
        triton.stop(timeout=3)
        if log_dir is not None and (tmp / "triton-llm.log").exists():
            shutil.copyfile(tmp / "triton-llm.log", log_dir / "triton-llm.log")
    return out


def _row(row: str, out: dict, triton_http: str, gw_http: str, worker_pid: int, root: Path, duration_s: float,
         repeats: int) -> None:
    if row == "llm_added":
        direct, gateway = added_sides(triton_http, gw_http)
        out["added_how"] = {"direct": direct.how, "gateway": gateway.how}
        for side in (direct, gateway):
            status, body = _post(side.address, side.body)
            cases_mod.expect(status == 200, f"{side.how}: HTTP {status}: {body[:200]!r}")
            side.check(body)
        out["llm_added"] = []
        for c in ADDED_CONCURRENCY:
            r = asyncio.run(added_row(direct, gateway, c, duration_s, repeats))
            print(f"  added, concurrency {c}: " + _added_line(r), flush=True)
            out["llm_added"].append(r)
    elif row == "llm_streams":
        limit = out.get("fd_limit", STREAMS * 4)
        if limit != resource.RLIM_INFINITY and limit < STREAMS + 256:
            raise RuntimeError(f"{STREAMS} streams need {STREAMS + 256} open files; the limit is {limit} (ulimit -n)")
        r = streams_summary(asyncio.run(many_streams(f"{gw_http}/v1/chat/completions", worker_pid)))
        print("  streams: " + "  ".join(f"{k}={_num(v)}" for k, v in r.items() if k != "first_error"), flush=True)
        out["llm_streams"] = r
    elif row == "llm_tokenize":
        prompt, n = long_prompt(LONG_TOKENS, root / TOKENIZER)
        r = asyncio.run(tokenize_row(gw_http, prompt))
        r["prompt_tokens"] = n
        print("  tokenize: " + "  ".join(f"{k}={_num(v)}" for k, v in r.items()), flush=True)
        out["llm_tokenize"] = r
    else:
        raise ValueError(row)


def _post(url: str, body: bytes) -> tuple[int, bytes]:
    from bench.stack import http

    status, _, data = http("POST", url, body, {"Content-Type": "application/json"})
    return status, data


def _num(v) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _added_line(row: dict) -> str:
    parts = []
    for label in ("direct", "gateway"):
        s = row[label]
        parts.append(f"{label} ttft p50 {_num(s['ttft_p50_ms'])} ms itl p50 {_num(s['itl_p50_ms'])} ms "
                     f"({s['requests']} req, {s['errors']} errors)")
    a = row["added"]
    parts.append(f"added ttft {_num(a['ttft_p50_ms'])} ms itl {_num(a['itl_p50_ms'])} ms")
    return "; ".join(parts)


# -- results.md -------------------------------------------------------------------------------------
def markdown(sc: dict) -> list[str]:
    """The rows' section of results.md (``sc``: what ``run`` returned, or {"skipped": why})."""
    from bench.report import num

    lines = ["", "## LLM at scale (model_repository_trtllm/, its BPE tokenizer; one gateway worker)", ""]
    if sc.get("skipped"):
        return lines + [f"skipped: {sc['skipped']}"]
    if sc.get("llm_added"):
        how = sc.get("added_how", {})
        lines += [f"Added latency: {how.get('gateway', 'gateway')} beside {how.get('direct', 'Triton')}, "
                  f"{ADDED_TOKENS} tokens each, tensorrt_llm {sc['trt_delay_ms']} ms per token; each caller one "
                  "request at a time, repeats interleaved, samples pooled. added = gateway − direct.", ""]
        rows = []
        for r in sc["llm_added"]:
            for label in ("direct", "gateway"):
                s = r[label]
                rows.append([str(r["concurrency"]), label, str(s["requests"]), num(s["ttft_p50_ms"]),
                             num(s["ttft_p99_ms"]), num(s["itl_p50_ms"]), num(s["itl_p99_ms"]), str(s["errors"])])
            a = r["added"]
            rows.append([str(r["concurrency"]), "**added**", "", num(a["ttft_p50_ms"]), num(a["ttft_p99_ms"]),
                         num(a["itl_p50_ms"]), num(a["itl_p99_ms"]), ""])
        lines += _table(["conc", "side", "requests", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
                         "errors"], rows)
    if sc.get("llm_streams"):
        s = sc["llm_streams"]
        lines += ["", f"{s['streams']} concurrent chat streams of {SLOW_MODEL} ({s['token_delay_ms']} ms per token, "
                  f"{s['tokens_each']} tokens each), sent at once to one worker: its RSS with them in flight "
                  f"(highest sampled) over RSS before, per stream ({s['open_at_peak']} in flight at most); stalled = a stream "
                  f"short of tokens or waiting over {STALL_S:g} s between two. TTFT: the wait of a thousand "
                  "requests sent at once.", ""]
        lines += _table(["streams", "completed", "stalled", "errors", "RSS before MiB", "RSS open MiB",
                         "KiB per stream", "TTFT p50 ms", "TTFT p99 ms", "ITL p99 ms", "longest gap ms", "wall s"],
                        [[str(s["streams"]), str(s["completed"]), str(s["stalled"]), str(s["errors"]),
                          num(s["rss_before_mib"]), num(s["rss_open_mib"]), num(s["kib_per_stream"]),
                          num(s["ttft_p50_ms"]), num(s["ttft_p99_ms"]), num(s["itl_p99_ms"]), num(s["max_gap_ms"]),
                          num(s["wall_s"])]])
    if sc.get("llm_tokenize"):
        t = sc["llm_tokenize"]
        lines += ["", f"A {t['prompt_tokens']}-token prompt (/v1/completions, 1 token out) while GET /v1/models probes "
                  f"the same worker every {PROBE_EVERY_S * 1e3:g} ms: the probes alone and during the long request "
                  "(lag = during − alone, at p99 and at the longest probe; Triton's own preprocessing of the "
                  "prompt shares the cores).", ""]
        lines += _table(["probes alone", "alone p99 ms", "alone max ms", "probes during", "during p50 ms",
                         "during p99 ms", "during max ms", "lag p99 ms", "lag max ms", "long request s"],
                        [[str(t["probes_alone"]), num(t.get("alone_p99_ms")), num(t["alone_max_ms"]),
                          str(t["probes_during"]), num(t["during_p50_ms"]), num(t["during_p99_ms"]),
                          num(t["during_max_ms"]), num(t.get("lag_p99_ms")), num(t["lag_max_ms"]),
                          num(t["long_request_s"])]])
    for key in sc.get("errors", []):
        lines.append(f"- {key}")
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    from bench.report import _table as table

    return table(header, rows)
