"""The two phases of one generation, for MindIE's prefill/decode roles (docs/mindie.md, "PD").

``context`` runs the context (prefill) phase as a TensorRT-LLM ``context_only`` request and ends
with either ``Done`` (the request already finished: length 1, stop string, end token) or
``Handoff``, whose ``Resume`` is everything the generation phase needs on another instance: the
``context_phase_params`` bytes, the seed, the text produced and shown so far, the stop matcher's
held-back text and the timings. ``generation`` runs the ``generation_only`` request from a Resume
and yields the remaining Token events and the Done of the whole request, exactly as
``GenerationService.generate`` would have for the unsplit request.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import asdict, dataclass

from gateway.core.errors import ErrorKind, GatewayError
from gateway.upstream import Upstream

from .profiles import CONTEXT_ONLY, GENERATION_ONLY
from .served import Resolved
from .service import Tally, ending, for_phases, new_seed, started, target, tokens
from .stops import StopMatcher
from .types import Done, GenerateRequest, Token


@dataclass(slots=True)
class Resume:
    seed: int
    context_phase_params: bytes
    raw: str  # what the model produced in the context phase
    shown: str  # what the client was given
    pending: str  # held back by the stop matcher (may start a stop string)
    n_in: int | None
    n_out: int | None
    elapsed_s: float  # since the request reached Triton on P
    ttft_s: float  # 0.0 when the context phase produced no text
    ids: list[int] | None = None  # the model's own token ids so far (output_ids), when it returns them
    events: int = 0  # token events P produced (D's first is then a decode step)
    queue_us: int = 0  # the request's wait in P's gateway before Triton
    logprobs: list | None = None  # every token's [text, log prob] so far, when asked for

    def to_json(self) -> dict:
        out = asdict(self)
        out["context_phase_params"] = base64.b64encode(self.context_phase_params).decode()
        return out

    @classmethod
    def from_json(cls, obj: dict) -> Resume:
        obj = dict(obj)
        obj["context_phase_params"] = base64.b64decode(obj["context_phase_params"])
        return cls(**obj)


@dataclass(frozen=True, slots=True)
class Handoff:
    resume: Resume


class PhasedGeneration:
    def __init__(self, upstream: Upstream):
        self.upstream = upstream

    async def context(self, req: GenerateRequest, model: Resolved) -> AsyncIterator[Token | Done | Handoff]:
        seed = req.sampling.seed if req.sampling.seed is not None else new_seed()
        sent = for_phases(req, model)
        infer = model.profile.encode_phase(sent, *target(sent, model), seed, CONTEXT_ONLY)
        stops, tally = StopMatcher(req.stop), started()
        start = tally.start
        params: list[bytes] = []
        async with aclosing(tokens(self.upstream, infer, req, model, stops, tally, params)) as toks:
            async for tok in toks:  # closing this generator closes the stream at once
                yield tok
        if not params:
            raise GatewayError(ErrorKind.UPSTREAM_FAILED, "context-only response without context_phase_params")
        produced = tally.n_out if tally.n_out is not None else model.tokenizer.count(tally.raw)
        if stops.hit or produced >= req.max_tokens or not tally.raw or tally.reason:
            for ev in ending(req, model, tally, stops, seed, start):
                yield ev
            return
        now = time.perf_counter()
        yield Handoff(Resume(seed=seed, context_phase_params=params[-1], raw=tally.raw, shown=tally.shown,
                             pending=stops.pending, n_in=tally.n_in, n_out=tally.n_out, elapsed_s=now - start,
                             ttft_s=(tally.first_at - start) if tally.first_at else 0.0, ids=tally.ids,
                             events=tally.events, queue_us=tally.queue_us, logprobs=tally.logprobs))

    async def generation(self, req: GenerateRequest, model: Resolved, resume: Resume) -> AsyncIterator[Token | Done]:
        sent = for_phases(req, model)
        infer = model.profile.encode_phase(sent, *target(sent, model), resume.seed, GENERATION_ONLY,
                                           resume.context_phase_params)
        stops = StopMatcher(req.stop)
        stops.pending = resume.pending
        start = time.perf_counter() - resume.elapsed_s
        tally = Tally(raw=resume.raw, shown=resume.shown, n_in=resume.n_in, n_out=resume.n_out,
                      ids=list(resume.ids) if resume.ids is not None else None, start=start,
                      last_at=time.perf_counter(), queue_us=resume.queue_us, events=resume.events,
                      logprobs=[tuple(p) for p in resume.logprobs] if resume.logprobs is not None else None)
        if resume.ttft_s:
            tally.first_at = start + resume.ttft_s
        async with aclosing(tokens(self.upstream, infer, req, model, stops, tally)) as toks:
            async for tok in toks:  # closing this generator closes the stream at once
                yield tok
        for ev in ending(req, model, tally, stops, resume.seed, start):
            yield ev
