"""MindIE's Prometheus metric names (reference §1.10), label ``model_name``.

Registered in the default registry, so they appear on the admin listener's ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from gateway.llm.types import Done

_TIME = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60)
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

RECEIVED = Counter("request_received", "Requests received", ["model_name"])
SUCCESS = Counter("request_success", "Requests answered successfully", ["model_name"])
FAILED = Counter("request_failed", "Requests that failed", ["model_name"])
RUNNING = Gauge("num_requests_running", "Requests generating now", ["model_name"], multiprocess_mode="livesum")
TTFT = Histogram("time_to_first_token_seconds", "Time to first token", ["model_name"], buckets=_TIME)
TPOT = Histogram("time_per_output_token_seconds", "Time per output token after the first", ["model_name"],
                 buckets=_TIME)
E2E = Histogram("e2e_request_latency_seconds", "End-to-end request latency", ["model_name"], buckets=_TIME)
PROMPT_TOKENS = Histogram("request_prompt_tokens", "Prompt tokens per request", ["model_name"], buckets=_TOKENS)
GEN_TOKENS = Histogram("request_generation_tokens", "Generated tokens per request", ["model_name"],
                       buckets=_TOKENS)
PROMPT_TOTAL = Counter("prompt_tokens", "Prompt tokens processed", ["model_name"])
GEN_TOTAL = Counter("generation_tokens", "Generation tokens produced", ["model_name"])


_children: dict[str, tuple] = {}  # a served model's label children, looked up once (``labels`` locks and checks)


def observe(model: str, done: Done) -> None:
    kids = _children.get(model)
    if kids is None:
        if len(_children) > 1024:  # served models: a handful
            _children.clear()
        kids = _children[model] = tuple(m.labels(model) for m in (TTFT, TPOT, E2E, PROMPT_TOKENS, GEN_TOKENS,
                                                                  PROMPT_TOTAL, GEN_TOTAL))
    ttft, tpot, e2e, prompt, gen, prompt_total, gen_total = kids
    ttft.observe(done.ttft_s)
    if done.completion_tokens > 1:
        tpot.observe((done.e2e_s - done.ttft_s) / (done.completion_tokens - 1))
    e2e.observe(done.e2e_s)
    prompt.observe(done.prompt_tokens)
    gen.observe(done.completion_tokens)
    prompt_total.inc(done.prompt_tokens)
    gen_total.inc(done.completion_tokens)
    AVERAGES.add(done)


class Averages:
    """The recent TTFT and time between tokens, in milliseconds, of this worker (``/metrics-json``)."""

    WINDOW = 100  # observations kept, as a moving average

    def __init__(self) -> None:
        from collections import deque

        self.ttft: deque[float] = deque(maxlen=self.WINDOW)
        self.tbt: deque[float] = deque(maxlen=self.WINDOW)

    def add(self, done: Done) -> None:
        self.ttft.append(done.ttft_s * 1000.0)
        if done.completion_tokens > 1:
            self.tbt.append((done.e2e_s - done.ttft_s) * 1000.0 / (done.completion_tokens - 1))

    @staticmethod
    def mean(values) -> float:
        return sum(values) / len(values) if values else 0.0


AVERAGES = Averages()
