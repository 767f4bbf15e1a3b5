"""The one generation core: a GenerateRequest in, Token events then one Done event out.

Every request goes through ``Upstream.stream`` (ModelStreamInfer, ending on
``triton_final_response``). Closing the generator returned by ``generate`` (client gone) closes
the upstream stream, which cancels the Triton request. What Triton does not give is provided here:
a seed when none is given, stop strings enforced on the text, token counts (model outputs when
returned, else the model's tokenizer) and a derived finish reason.

A token-id prompt goes to the model's ``token_model`` when it has one (TensorRT-LLM's
``tensorrt_llm`` behind a text ``ensemble``): that model answers ids only, which are decoded here
with the model's tokenizer, incrementally, never cutting a character across two events.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from gateway.call import current
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.observe import metrics, tracing
from gateway.process import offload
from gateway.upstream import Upstream

from .profiles import returns_log_probs
from .served import Resolved
from .stops import StopMatcher
from .types import EOS, LENGTH, STOP_SEQUENCE, Chunk, Done, GenerateRequest, Token

Event = Token | Done
SEED_MAX = 2**63 - 1


def new_seed() -> int:
    return random.randint(0, SEED_MAX)


@dataclass(slots=True)
class Tally:
    raw: str = ""  # everything the model produced
    shown: str = ""  # what the client was given
    n_in: int | None = None
    n_out: int | None = None
    reason: str | None = None
    first_at: float = 0.0
    ids: list[int] | None = None  # the model's own token ids (output_ids), when it returns them
    start: float = 0.0  # perf_counter when the request was sent to Triton (P's, for a phased request)
    last_at: float = 0.0  # perf_counter of the last token event
    queue_us: int = 0  # the wait in the gateway before the request reached Triton
    events: int = 0  # token events so far
    logprobs: list[tuple[str, float]] | None = None  # every token's (text, log prob), when the model gives them
    unshown: list[tuple[str, float]] = field(default_factory=list)  # ... not yet on a Token event

    def add(self, chunk: Chunk) -> None:
        self.raw += chunk.text
        if chunk.token_ids is not None:
            self.ids = (self.ids or []) + list(chunk.token_ids)
        if chunk.logprobs is not None:
            pairs = token_pieces(chunk.text, chunk.logprobs)
            self.logprobs = (self.logprobs or []) + pairs
            self.unshown += pairs
        if chunk.num_input_tokens is not None:
            self.n_in = chunk.num_input_tokens
        if chunk.num_output_tokens is not None:
            self.n_out = (self.n_out or 0) + chunk.num_output_tokens
        if chunk.finish_reason:
            self.reason = chunk.finish_reason


_PIECE = re.compile(r"\s*\S+|\s+")


def token_pieces(text: str, logprobs: tuple[float, ...]) -> list[tuple[str, float]]:
    """One response's text shared out over its tokens' log probabilities: one token, its text; as
    many word pieces as tokens (a word-level model), one each; else the text on the first."""
    if len(logprobs) == 1:
        return [(text, logprobs[0])]
    pieces = _PIECE.findall(text)
    if len(pieces) != len(logprobs):
        pieces = [text] + [""] * (len(logprobs) - 1)
    return list(zip(pieces, logprobs, strict=True))


def finish_reason(model_reason: str | None, stopped: bool, produced: int, limit: int) -> tuple[str, bool]:
    """(reason, derived). The model's own reason wins; else stop string, else length, else EOS."""
    if model_reason:
        mapped = {"length": LENGTH, "stop": STOP_SEQUENCE if stopped else EOS}.get(model_reason)
        if mapped:
            return mapped, False
    if stopped:
        return STOP_SEQUENCE, True
    if produced >= limit:
        return LENGTH, True
    return EOS, True


class GenerationService:
    def __init__(self, upstream: Upstream):
        self.upstream = upstream

    def generate(self, req: GenerateRequest, model: Resolved) -> AsyncIterator[Event]:
        """Token events then one Done; with n / best_of > 1, one Done per returned sequence, every
        event carrying its sequence's index. The generator itself, not one around it: nothing
        more to do per event."""
        if req.n > 1 or req.best_of > 1:
            return self._fan_out(req, model)
        return self._one(req, model)

    async def _fan_out(self, req: GenerateRequest, model: Resolved) -> AsyncIterator[Event]:
        """best_of Triton requests (seeds seed + i), run together. Streamed (best_of == n): their
        events as they come, tagged with their index. Whole: the n with the highest cumulative log
        probability (the model's, asked for when best_of > n and the model reports them; else the
        first n), re-indexed 0..n-1."""
        seed = req.sampling.seed if req.sampling.seed is not None else new_seed()
        ids = await prompt_ids(req, model)  # once for all the sequences
        rank = req.best_of > req.n and returns_log_probs(target(req, model)[1])
        subs = [replace(req, n=1, best_of=1, sampling=replace(req.sampling, seed=(seed + i) % (SEED_MAX + 1)),
                        request_id=f"{req.request_id}-{i}" if req.request_id else "", logprobs=req.logprobs or rank)
                for i in range(req.best_of)]
        if req.stream:
            async with aclosing(merged([self._one(sub, model, ids) for sub in subs])) as events:
                async for i, ev in events:
                    yield replace(ev, index=i)
            return
        tasks = [asyncio.ensure_future(last_done(self._one(sub, model, ids))) for sub in subs]
        try:
            dones = await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
        order = sorted(range(len(dones)), key=lambda i: -sum(lp for _, lp in dones[i].logprobs)) if rank \
            else range(len(dones))
        for k, i in enumerate(list(order)[: req.n]):
            yield replace(dones[i], index=k)

    async def _one(self, req: GenerateRequest, model: Resolved, ids: tuple[int, ...] | None = None
                   ) -> AsyncIterator[Event]:
        ids = ids if ids is not None else await prompt_ids(req, model)
        req = fit(req, model, ids)
        seed = req.sampling.seed if req.sampling.seed is not None else new_seed()
        sent = via_token_model(req, model, ids)
        infer = model.profile.encode(sent, *target(sent, model), seed)
        stops, tally = StopMatcher(req.stop), started()
        start = tally.start
        async with aclosing(tokens(self.upstream, infer, req, model, stops, tally)) as toks:
            async for tok in toks:  # closing this generator closes the stream at once
                yield tok
        for ev in ending(req, model, tally, stops, seed, start):
            yield ev


async def last_done(events: AsyncIterator[Event]) -> Done:
    done = None
    async with aclosing(events) as evs:
        async for ev in evs:
            if isinstance(ev, Done):
                done = ev
    if done is None:
        raise GatewayError(ErrorKind.UPSTREAM_FAILED, "generation ended without a result")
    return done


async def merged(streams: list[AsyncIterator[Event]]) -> AsyncIterator[tuple[int, Event]]:
    """(index, event) of several generations as they come; closing it (or one failing) closes all."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, events: AsyncIterator[Event]) -> None:
        try:
            async with aclosing(events) as evs:
                async for ev in evs:
                    await queue.put((i, ev))
        except Exception as e:  # noqa: BLE001 - handed to the consumer, which raises it
            await queue.put((i, e))
        await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, ev = await queue.get()
            if ev is None:
                left -= 1
            elif isinstance(ev, Exception):
                raise ev
            else:
                yield i, ev
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def target(req: GenerateRequest, model: Resolved):
    """(Triton model, metadata) the request goes to: a token-id prompt to the token model."""
    return model.token_target if req.prompt_ids is not None else (model.spec.name, model.meta)


async def prompt_ids(req: GenerateRequest, model: Resolved) -> tuple[int, ...] | None:
    """A text prompt's ids with the model's own tokenizer (None without one): worked out once per
    request, off the event loop for a long prompt (gateway.process.offload), so tokenizing a long prompt
    does not hold up the worker's other requests."""
    encode = getattr(model.tokenizer, "prompt_ids", None)
    if encode is None or req.prompt_ids is not None:
        return None
    return await offload.run(len(req.prompt), encode, req.prompt)


def fit(req: GenerateRequest, model: Resolved, ids: tuple[int, ...] | None = None) -> GenerateRequest:
    """A model's ``max_seq_len``, counted with its tokenizer: a prompt of that many tokens or more is
    refused; the output is cut to what is left (MindIE: min(requested, maxSeqLen - inputLen)).
    Records the prompt's count when ``ids`` (its ids with the model's tokenizer) are given."""
    if ids is not None:
        req = replace(req, prompt_count=len(ids))
    limit = model.spec.max_seq_len
    if not limit:
        return req
    n = len(req.prompt_ids) if req.prompt_ids is not None else (
        req.prompt_count if req.prompt_count is not None else model.tokenizer.prompt_count(req.prompt))
    if n >= limit:
        raise invalid(f"The input is {n} tokens; model {model.name[:256]} takes at most {limit - 1} "
                      f"(max_seq_len {limit}).")
    return replace(req, max_tokens=limit - n) if req.max_tokens > limit - n else req


def via_token_model(req: GenerateRequest, model: Resolved, ids: tuple[int, ...] | None = None) -> GenerateRequest:
    """A streamed text prompt of a model with a token model and its own tokenizer: tokenized here
    (as its preprocessing would) and sent to the token model, whose ids are then decoded here
    incrementally. A model's postprocessing decodes each streamed response on its own, which cuts
    a character whose bytes span two responses (tensorrtllm_backend#332)."""
    if (req.stream and req.prompt_ids is None and model.spec.token_model and model.token_meta is not None
            and hasattr(model.tokenizer, "detokenizer")):
        return replace(req, prompt_ids=ids if ids is not None else model.tokenizer.prompt_ids(req.prompt))
    return req


def for_phases(req: GenerateRequest, model: Resolved) -> GenerateRequest:
    """A prefill/decode request (MindIE PD) of a model that cannot split its phases but whose token
    model can (a stock TensorRT-LLM ensemble: its tensorrt_llm step takes context_phase_params):
    its prompt tokenized here and sent to the token model, as a stream is (``via_token_model``)."""
    if (req.prompt_ids is None and model.spec.token_model and model.token_meta is not None
            and hasattr(model.tokenizer, "detokenizer") and not model.profile.can_split(model.meta)
            and model.profile.can_split(model.token_meta)):
        return replace(req, prompt_ids=model.tokenizer.prompt_ids(req.prompt))
    return req


def started() -> Tally:
    """A Tally for a request about to be sent to Triton: its start, and how long it waited in the
    gateway since the edge received it (admission, planning), for MindIE's ``queue_wait_time``."""
    now, call = time.perf_counter(), current()
    waited = time.monotonic() - call.start if call is not None else 0.0
    return Tally(start=now, last_at=now, queue_us=max(0, int(waited * 1_000_000)))


def timed(tally: Tally, text: str, ids: tuple[int, ...]) -> Token:
    """A Token event with MindIE's per-event timings: prefill_ms for the first, decode_ms after."""
    now = time.perf_counter()
    first = tally.events == 0
    gap_ms = int(round((now - tally.last_at) * 1000))
    tally.last_at = now
    tally.events += 1
    logprobs, tally.unshown = tuple(tally.unshown), []
    if first:
        # MindIE's firstTokenCost runs from the request's arrival: the gateway wait plus Triton's first token
        prefill_ms = int(round((now - tally.start) * 1000 + tally.queue_us / 1000))
        return Token(text, ids, prefill_ms=prefill_ms, queue_us=tally.queue_us, logprobs=logprobs)
    return Token(text, ids, decode_ms=gap_ms, logprobs=logprobs)


async def tokens(upstream: Upstream, infer, req: GenerateRequest, model: Resolved, stops: StopMatcher,
                 tally: Tally, params: list[bytes] | None = None) -> AsyncIterator[Token]:
    """One ModelStreamInfer call as Token events: decoded by the profile, counted in ``tally``, held
    back and cut by the stop strings. ``params`` collects context_phase_params (PD's context phase).
    Closing early (stop string, client gone) closes the upstream stream, which cancels the Triton request.
    """
    stream = upstream.stream(infer)  # its deadline: the request's (gateway.call; MindIE's `timeout` shortens it)
    detok = None
    try:
        async for resp in stream:
            chunk = model.profile.decode(resp)
            if not chunk.has_text and chunk.token_ids is not None:  # a token model: ids only
                detok = detok or detokenizer(model)
                chunk = replace(chunk, text=detok.feed(chunk.token_ids), has_text=True)
            if params is not None and chunk.context_phase_params is not None:
                params.append(chunk.context_phase_params)
            if not tally.first_at and chunk.text:
                tally.first_at = time.perf_counter()
            tally.add(chunk)
            shown = stops.feed(chunk.text)
            if shown:
                tally.shown += shown
                yield timed(tally, shown, event_ids(req, model, chunk.token_ids, shown))
            if stops.hit:
                break
        rest = detok.flush() if detok is not None and not stops.hit else ""
        if rest:
            tally.raw += rest
            shown = stops.feed(rest)
            if shown:
                tally.shown += shown
                yield timed(tally, shown, ())
    finally:
        await stream.aclose()


def event_ids(req: GenerateRequest, model: Resolved, ids: tuple[int, ...] | None, text: str) -> tuple[int, ...]:
    """A Token event's ids: the model's own when it returned them, else the text's with the model's
    tokenizer; none when the family never sends them (``req.token_ids`` False: OpenAI's)."""
    if ids is not None:
        return ids
    return model.tokenizer.ids(text) if req.token_ids else ()


def detokenizer(model: Resolved):
    make = getattr(model.tokenizer, "detokenizer", None)
    if make is None:
        raise GatewayError(ErrorKind.INTERNAL, f"model {model.name[:256]} answers token ids and its tokenizer "
                           f"{model.tokenizer.name} cannot decode them: set tokenizer_dir")
    return make()


def ending(req: GenerateRequest, model: Resolved, tally: Tally, stops: StopMatcher, seed: int,
           start: float) -> list[Event]:
    """The events that end a generation: the held-back tail (unless a stop string ended it), then Done.

    Every successful generation (standard or phased) ends here once: its GenAI metrics are observed here.
    """
    out: list[Event] = []
    tail = "" if stops.hit else stops.flush()
    if tail:
        tally.shown += tail
        out.append(timed(tally, tail, event_ids(req, model, () if tally.ids is not None else None, tail)))
    done = done_event(req, model, tally, stops.hit, seed, start)
    out.append(done)
    call = current()
    operation = operation_name(call.route if call is not None else "")
    metrics.observe_generation(operation, model.spec.name, done.e2e_s, done.ttft_s, done.prompt_tokens,
                               done.completion_tokens)
    tracing.generation(operation, model.spec.name, req.max_tokens, done.finish_reason, done.prompt_tokens,
                       done.completion_tokens)
    return out


def operation_name(route: str) -> str:
    """OpenTelemetry's ``gen_ai.operation.name``: ``chat`` for chat routes, else ``text_completion``."""
    return "chat" if "chat" in route else "text_completion"


def done_event(req: GenerateRequest, model: Resolved, tally: Tally, stopped: bool, seed: int, start: float) -> Done:
    produced = tally.n_out if tally.n_out is not None else (
        len(tally.ids) if tally.ids is not None else model.tokenizer.count(tally.raw))
    prompt_tokens = tally.n_in if tally.n_in is not None else (
        len(req.prompt_ids) if req.prompt_ids is not None else
        req.prompt_count if req.prompt_count is not None else model.tokenizer.prompt_count(req.prompt))
    reason, derived = finish_reason(tally.reason, stopped, produced, req.max_tokens)
    now = time.perf_counter()
    return Done(
        finish_reason=reason,
        finish_derived=derived,
        text=tally.shown,
        prompt_tokens=prompt_tokens,
        completion_tokens=produced,
        token_ids=tuple(tally.ids) if tally.ids is not None else model.tokenizer.ids(tally.shown),
        seed=seed,
        ttft_s=(tally.first_at or now) - start,
        e2e_s=now - start,
        queue_us=tally.queue_us,
        events=tally.events,
        logprobs=tuple(tally.logprobs or ()),
    )
