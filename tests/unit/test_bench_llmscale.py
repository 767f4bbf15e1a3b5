"""bench/llmscale.py (the LLM rows at scale) and the LLM parts of bench/cases.py and bench/llmload.py."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from bench import cases, llmload, llmscale
from bench.run import Budget, Settings, llm_scale, llm_scale_need, plan_seconds, skipped_rows
from tests.support import ROOT


# -- the repository copy ----------------------------------------------------------------------------
def test_the_repository_copy_sets_the_delays_and_adds_the_slow_model(tmp_path):
    models = llmscale.repository(ROOT, tmp_path / "trt", trt_delay_ms=70, slow_delay_ms=1500)
    trt = (models / "tensorrt_llm" / "config.pbtxt").read_text()
    original = (ROOT / "model_repository_trtllm" / "models" / "tensorrt_llm" / "config.pbtxt").read_text()
    assert trt == original.replace('value: { string_value: "2" } }', 'value: { string_value: "70" } }')
    slow = (models / llmscale.SLOW_MODEL / "config.pbtxt").read_text()
    assert f'name: "{llmscale.SLOW_MODEL}"' in slow and 'name: "tiny_llm"' not in slow
    assert 'key: "token_delay_ms", value: { string_value: "1500" }' in slow
    assert (models / llmscale.SLOW_MODEL / "1" / "model.py").exists()
    # relative paths of the stand-ins (lib/, tokenizer/) still lead somewhere
    assert (tmp_path / "trt" / "lib" / "standin.py").exists() and (tmp_path / "trt" / "tokenizer").is_dir()


def test_a_config_without_a_delay_is_refused(tmp_path):
    config = tmp_path / "config.pbtxt"
    config.write_text('name: "m"\n')
    with pytest.raises(ValueError, match="token_delay_ms"):
        llmscale.set_delay(config, 5)


def test_the_mindie_section_points_at_this_checkouts_tokenizer():
    mindie = llmscale.mindie_section(ROOT)
    dirs = {o.get("tokenizer_dir") for o in mindie["models"].values()}
    assert dirs == {str(ROOT / llmscale.TOKENIZER)}


# -- llm_added --------------------------------------------------------------------------------------
def test_added_is_gateway_minus_direct_and_pooling_adds_up():
    a = llmscale.added({"ttft_p50_ms": 12.5, "ttft_p99_ms": None, "itl_p50_ms": 10.0, "itl_p99_ms": 11.0},
                       {"ttft_p50_ms": 10.0, "ttft_p99_ms": 15.0, "itl_p50_ms": 10.5, "itl_p99_ms": 11.0})
    assert a == {"ttft_p50_ms": 2.5, "ttft_p99_ms": None, "itl_p50_ms": -0.5, "itl_p99_ms": 0.0}
    into = llmload.LlmResult()
    for _ in range(2):
        llmscale.pool(into, llmload.LlmResult(requests=2, tokens=6, duration_s=1.0, ttft_s=[0.1, 0.2],
                                              itl_s=[0.01] * 4, errors=1, first_error="HTTP 500"))
    assert (into.requests, into.tokens, into.errors, into.duration_s) == (4, 12, 2, 2.0)
    assert len(into.ttft_s) == 4 and len(into.itl_s) == 8 and into.first_error == "HTTP 500"


def test_both_sides_of_the_added_row_ask_the_same_tokens():
    direct, gateway = llmscale.added_sides("http://127.0.0.1:1", "http://127.0.0.1:2")
    assert b'"max_tokens":%d' % llmscale.ADDED_TOKENS in direct.body
    assert b'"max_tokens":%d' % llmscale.ADDED_TOKENS in gateway.body
    short = b"data: " + b'{"choices":[{"delta":{"content":"x"}}]}\n'
    with pytest.raises(cases.BadAnswer, match="token events"):
        gateway.check(short * (llmscale.ADDED_TOKENS - 1))
    gateway.check(short * llmscale.ADDED_TOKENS)


# -- llm_streams ------------------------------------------------------------------------------------
def test_a_stream_is_stalled_when_short_or_when_it_waits_too_long_between_tokens():
    res = llmscale.StreamsResult(streams=3, tokens_each=3)
    llmscale.fold_stream(res, [6.0, 8.0, 10.0], stall_s=5.0)  # a late first token is TTFT, not a stall
    llmscale.fold_stream(res, [1.0, 2.0], stall_s=5.0)  # short
    llmscale.fold_stream(res, [1.0, 7.5, 8.0], stall_s=5.0)  # a 6.5 s gap
    assert res.completed == 2 and res.stalled == 2
    assert res.max_gap_s == pytest.approx(6.5)
    assert res.ttft_s == [6.0, 1.0, 1.0] and len(res.itl_s) == 5


def test_memory_per_stream_is_the_growth_over_the_streams_in_flight():
    res = llmscale.StreamsResult(streams=1000, tokens_each=3, rss_before_kib=100_000, rss_open_kib=150_000,
                                 open_at_peak=1000)
    assert res.per_stream_kib() == 50
    assert llmscale.StreamsResult(streams=1, tokens_each=1).per_stream_kib() is None
    assert llmscale.streams_summary(res)["kib_per_stream"] == 50


def test_many_streams_refuses_anything_but_loopback():
    with pytest.raises(ValueError, match="127.0.0.1"):
        asyncio.run(llmscale.many_streams("http://example.com/v1/chat/completions", 1, streams=1))


# -- the run's plan and report ----------------------------------------------------------------------
def test_the_plan_counts_the_rows_at_scale_only_when_wanted():
    full = Settings.from_env({})
    only_cases = Settings.from_env({"BENCH_ONLY": "llm_openai"})
    streams = Settings.from_env({"BENCH_ONLY": "llm_streams"})
    assert llm_scale_need(only_cases) == 0 and llm_scale_need(streams) > 0
    assert llm_scale_need(full) > llm_scale_need(streams)
    assert plan_seconds(streams, []) == pytest.approx(llm_scale_need(streams))
    assert llmscale.need_s(4, 2, ()) == 0


def test_rows_that_do_not_fit_are_skipped_with_why_and_listed(tmp_path):
    s = Settings.from_env({"BENCH_ONLY": "llm_added,llm_tokenize"})
    out = llm_scale(s, Budget(5), tmp_path, tmp_path / "logs")
    assert out["rows"] == ["llm_added", "llm_tokenize"] and "needed about" in out["skipped"]
    listed = skipped_rows({"cases": [], "llm_scale": out})
    assert len(listed) == 1 and listed[0].startswith("llm_added, llm_tokenize: needed about")
    assert "skipped: needed about" in "\n".join(llmscale.markdown(out))


def test_the_section_shows_every_row():
    side = {"requests": 10, "tokens": 80, "errors": 0, "first_error": "", "ttft_p50_ms": 10.0, "ttft_p99_ms": 12.0,
            "itl_p50_ms": 8.0, "itl_p99_ms": 9.0}
    added = {"concurrency": 64, "direct": side, "gateway": side, "added": llmscale.added(side, side)}
    streams = llmscale.streams_summary(llmscale.StreamsResult(1000, 3, completed=1000, rss_before_kib=1024,
                                                              rss_open_kib=2048, open_at_peak=1000))
    tokenize = {"probes_alone": 100, "probes_during": 50, "alone_p50_ms": 1.0, "alone_max_ms": 2.0,
                "during_p50_ms": 1.0, "during_p99_ms": 3.0, "during_max_ms": 4.0, "lag_max_ms": 2.0,
                "long_request_s": 0.5, "prompt_tokens": 32768}
    text = "\n".join(llmscale.markdown({"trt_delay_ms": 80, "slow_delay_ms": 2000, "llm_added": [added],
                                        "llm_streams": streams, "llm_tokenize": tokenize,
                                        "errors": ["llm_x: RuntimeError: boom"]}))
    assert "| 64 | **added** |" in text and "KiB per stream" in text and "32768-token prompt" in text
    assert "| 1000 | 1000 | 0 | 0 |" in text and "llm_x: RuntimeError: boom" in text


# -- cases and load -----------------------------------------------------------------------------------
def test_mindie_final_event_carries_the_last_token():
    final = b'data: {"decode_time":15,"prefill_time":null,"generated_text":"a b","details":null,' \
            b'"token":{"id":[7],"text":null}}'
    assert cases._mindie_token(final)
    assert not cases._mindie_token(b'data: {"generated_text":"","token":{"id":[],"text":null}}')
    check = cases.check_sse(cases._mindie_token, 2)
    check(b'data: {"token":{"id":[1],"text":"a"}}\n\n' + final + b"\n\n")
    with pytest.raises(cases.BadAnswer):
        check(final)


def test_concurrent_callers_each_send_one_request_at_a_time():
    in_flight, most = 0, 0

    async def sse(_request):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(_request)
        for i in range(3):
            await asyncio.sleep(0.005)
            await resp.write(b"data: {\"t\": %d}\n\n" % i)
        in_flight -= 1
        await resp.write_eof()
        return resp

    async def main():
        app = web.Application()
        app.router.add_post("/s", sse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            return await llmload.run(f"http://127.0.0.1:{port}/s", b"{}", lambda line: line.startswith(b"data:"),
                                     0.0, min_requests=2, concurrency=4)
        finally:
            await runner.cleanup()

    r = asyncio.run(main())
    assert r.requests == 8 and r.tokens == 24 and r.errors == 0  # 4 callers x 2 requests x 3 tokens
    assert len(r.ttft_s) == 8 and len(r.itl_s) == 16
    assert most == 4


def test_the_open_files_limit_is_raised_within_the_hard_limit():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert llmscale.raise_fd_limit(min(soft, 64)) == soft  # enough already: left as it is
        if hard != resource.RLIM_INFINITY and hard > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
            assert llmscale.raise_fd_limit(hard + 1) == hard
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
