"""The neutral generation request and the events a generation yields.

    dialect request  ->  GenerateRequest  ->  profile.encode  ->  InferRequest (Triton tensors)
    InferResponse    ->  profile.decode   ->  Chunk  ->  service  ->  Token ... Done

Families (OpenAI, TGI, vLLM, Triton generate, MindIE native) only ever see these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Neutral finish reasons (MindIE's strings for TGI/native/Triton; OpenAI maps eos/stop -> "stop").
EOS = "eos_token"
LENGTH = "length"
STOP_SEQUENCE = "stop_sequence"


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None  # the service fills a random one when absent
    do_sample: bool | None = None


@dataclass(slots=True)
class GenerateRequest:
    model: str  # the name the client used (alias or Triton name); the catalog resolves it
    prompt: str
    max_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    stop: tuple[str, ...] = ()
    stream: bool = False
    timeout: float | None = None  # seconds, end to end
    request_id: str = ""
    prompt_ids: tuple[int, ...] | None = None  # token-id prompt (the model's input_ids); then prompt is ""
    response_format: dict | None = None  # OpenAI json_object / json_schema: the backend's guided decoding
    logprobs: bool = False  # ask the model for each generated token's log probability (return_log_probs)
    n: int = 1  # sequences returned (OpenAI/vLLM n): one Triton request each, seeds seed, seed + 1, ...
    best_of: int = 1  # sequences generated, the n best returned (by cumulative log probability)
    prompt_count: int | None = None  # the prompt's tokens with the model's own tokenizer, once counted
    token_ids: bool = True  # Token events carry their ids (False: a family that never sends them, OpenAI's)


# Chunk and Token, made once per streamed token, are not frozen: a frozen dataclass's __init__ sets
# each field through object.__setattr__, several times the cost of a plain one; neither is changed
# once made (``replace`` makes another).
@dataclass(slots=True)
class Chunk:
    """What one Triton response says, whatever the profile."""

    text: str
    num_input_tokens: int | None = None
    num_output_tokens: int | None = None
    finish_reason: str | None = None  # the model's own, when it returns one
    context_phase_params: bytes | None = None  # a context-only response's hand-off state (PD)
    token_ids: tuple[int, ...] | None = None  # the model's own ids of this response's tokens (output_ids)
    logprobs: tuple[float, ...] | None = None  # the model's log probability of each token (output_log_probs)
    has_text: bool = True  # False: the response had no text_output (a token model's: ids only)


@dataclass(slots=True)
class Token:
    """Text the client may see now (one Triton response, less any held-back stop prefix)."""

    text: str
    ids: tuple[int, ...]
    # MindIE's per-event engine timings, measured by the gateway: the first token's time to first
    # token (prefill_ms) or the time since the previous token (decode_ms), in milliseconds; the
    # first token's wait in the gateway before the request reached Triton (queue_us, microseconds)
    prefill_ms: int | None = None
    decode_ms: int | None = None
    queue_us: int = 0
    logprobs: tuple[tuple[str, float], ...] = ()  # (token text, log probability), when asked for
    index: int = 0  # the sequence it belongs to (n > 1)


@dataclass(frozen=True, slots=True)
class Done:
    finish_reason: str  # EOS | LENGTH | STOP_SEQUENCE
    finish_derived: bool  # True when the gateway derived it (the model returned none)
    text: str  # the whole generated text (stop string removed)
    prompt_tokens: int
    completion_tokens: int
    token_ids: tuple[int, ...]
    seed: int
    ttft_s: float  # request sent -> first chunk from Triton
    e2e_s: float
    queue_us: int = 0  # the wait in the gateway before the request reached Triton, microseconds
    logprobs: tuple[tuple[str, float], ...] = ()  # every generated token's (text, log probability), when asked for
    events: int = 0  # token events the generation produced (MindIE's per-iteration arrays)
    index: int = 0  # the sequence it ends (n > 1: one Done per sequence)

    @property
    def openai_reason(self) -> str:
        return "length" if self.finish_reason == LENGTH else "stop"
