"""Model profiles: the only code that turns a GenerateRequest into Triton tensors and back.

``trtllm``  TensorRT-LLM ensemble / BLS names, ``[1, 1]`` shapes (max_batch_size > 0), sampling
            values as typed tensors; optional tensors are sent only when the model declares them.
``vllm``    Triton's vLLM backend: ``text_input``/``stream``/``exclude_input_in_output`` of shape
            ``[1]`` and every sampling value in the ``sampling_parameters`` JSON string.
Both ask for ``exclude_input_in_output`` (so non-stream text never echoes the prompt) and for
``return_num_input_tokens`` / ``return_num_output_tokens`` / ``return_finish_reason`` when declared.

Prefill/decode split (MindIE PD roles, docs/mindie.md): ``trtllm`` maps the two phases onto
TensorRT-LLM's disaggregated requests when the model declares the ``context_phase_params`` input
and output (as the backend's ``tensorrt_llm`` model does): request parameter ``request_type`` =
``context_only`` / ``generation_only``, and the UINT8 ``context_phase_params`` tensor returned by
the context-only response sent back, as ``[1, N]``, with the generation-only request. ``vllm`` has
no split: a P instance runs the whole generation there.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import orjson

from gateway.core.errors import invalid
from gateway.core.tensors import InferRequest, InferResponse, ModelMetadata, Tensor

from .tokenizers import named
from .types import Chunk, GenerateRequest

_OPTIONAL_FLAGS = ("return_num_input_tokens", "return_num_output_tokens", "return_finish_reason")


CONTEXT_ONLY = "context_only"
GENERATION_ONLY = "generation_only"
CONTEXT_PHASE_PARAMS = "context_phase_params"
# TensorRT-LLM's token-level contract (its ``tensorrt_llm`` model): token ids in, token ids out
INPUT_IDS = "input_ids"
OUTPUT_IDS = "output_ids"
# TensorRT-LLM's guided decoding inputs (ensemble/BLS), used for OpenAI's response_format
GUIDE_TYPE = "guided_decoding_guide_type"
GUIDE = "guided_decoding_guide"
# TensorRT-LLM's log probabilities: asked for with return_log_probs, one per generated token
RETURN_LOG_PROBS = "return_log_probs"
OUTPUT_LOG_PROBS = "output_log_probs"


def returns_log_probs(meta: ModelMetadata) -> bool:
    """The model can report each generated token's log probability (TensorRT-LLM's contract)."""
    return any(s.name == RETURN_LOG_PROBS for s in meta.inputs) and any(
        s.name == OUTPUT_LOG_PROBS for s in meta.outputs)


def takes_token_ids(meta: ModelMetadata) -> bool:
    """The model takes ``input_ids`` and answers ``output_ids`` (TensorRT-LLM's token contract)."""
    return any(s.name == INPUT_IDS for s in meta.inputs) and any(s.name == OUTPUT_IDS for s in meta.outputs)


def guided_decoding(meta: ModelMetadata) -> bool:
    """The model declares TensorRT-LLM's guided decoding inputs (JSON output on request)."""
    names = {s.name for s in meta.inputs}
    return GUIDE_TYPE in names and GUIDE in names


class Profile(Protocol):
    name: str

    def encode(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int) -> InferRequest: ...

    def decode(self, resp: InferResponse) -> Chunk: ...

    def can_split(self, meta: ModelMetadata) -> bool: ...

    def encode_phase(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int, request_type: str,
                     context_phase_params: bytes | None = None) -> InferRequest: ...


def _first(resp: InferResponse, name: str):
    for t in resp.outputs:
        if t.name == name:
            return _first_of(t)
    return None


def _first_of(t):
    data = t.data
    return data.flat[0] if data.size else None


def _text(v) -> str:
    if v is None:
        return ""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def decode_outputs(resp: InferResponse) -> Chunk:
    """text_output (+ num_input_tokens, num_output_tokens, finish_reason when present). Once per
    streamed token: the outputs are looked at once each, and a text-only response (the common
    one) makes a Chunk of its text alone."""
    outputs = resp.outputs
    if len(outputs) == 1 and outputs[0].name == "text_output":
        return Chunk(_text(_first_of(outputs[0])))
    by_name = {t.name: t for t in outputs}
    text_t = by_name.get("text_output")
    n_in, n_out, reason = (_first_of(t) if (t := by_name.get(k)) is not None else None
                           for k in ("num_input_tokens", "num_output_tokens", "finish_reason"))
    reason_text = _text(reason) if reason is not None else None
    ctx = by_name.get(CONTEXT_PHASE_PARAMS)
    ids = by_name.get(OUTPUT_IDS)
    lps = by_name.get(OUTPUT_LOG_PROBS)
    return Chunk(
        text=_text(_first_of(text_t)) if text_t is not None else "",
        num_input_tokens=int(n_in) if n_in is not None else None,
        num_output_tokens=int(n_out) if n_out is not None else None,
        finish_reason=None if reason_text in (None, "", "None") else reason_text,
        context_phase_params=ctx.data.astype(np.uint8).tobytes() if ctx is not None else None,
        token_ids=tuple(int(i) for i in ids.data.reshape(-1)) if ids is not None else None,
        logprobs=tuple(float(x) for x in lps.data.reshape(-1)) if lps is not None else None,
        has_text=text_t is not None,
    )


class TrtllmProfile:
    name = "trtllm"

    # the token-level model's names (TensorRT-LLM's tensorrt_llm) for the ensemble's
    TOKEN_LEVEL = {"stream": "streaming", "top_k": "runtime_top_k", "top_p": "runtime_top_p"}
    # neutral sampling field -> (tensor name, numpy dtype)
    SAMPLING = {
        "temperature": ("temperature", np.float32),
        "top_p": ("top_p", np.float32),
        "top_k": ("top_k", np.int32),
        "repetition_penalty": ("repetition_penalty", np.float32),
        "presence_penalty": ("presence_penalty", np.float32),
        "frequency_penalty": ("frequency_penalty", np.float32),
    }

    def encode(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int) -> InferRequest:
        declared = {s.name for s in meta.inputs}
        inputs = self._prompt(req, model, meta, declared)

        def scalar(name: str, value, dtype) -> None:
            if name not in declared:
                name = self.TOKEN_LEVEL.get(name, name)
            if value is not None and name in declared:
                inputs.append(Tensor(name, np.array([[value]], dtype=dtype)))

        scalar("stream", req.stream, np.bool_)
        scalar("exclude_input_in_output", True, np.bool_)
        scalar("seed", seed, np.uint64)
        for field_name, (tensor, dtype) in self.SAMPLING.items():
            scalar(tensor, getattr(req.sampling, field_name), dtype)
        for flag in _OPTIONAL_FLAGS:
            scalar(flag, True, np.bool_)
        if req.stop and "stop_words" in declared:
            words = np.array([[s.encode() for s in req.stop]], dtype=object)
            inputs.append(Tensor("stop_words", words, "BYTES"))
        if req.response_format is not None:
            inputs.extend(self._guide(req.response_format, model, meta))
        if req.logprobs:
            if not returns_log_probs(meta):
                raise invalid(f"model {model} has no '{RETURN_LOG_PROBS}' input; it reports no log probabilities")
            scalar(RETURN_LOG_PROBS, True, np.bool_)
        return InferRequest(model=model, inputs=inputs, id=req.request_id)

    @staticmethod
    def _prompt(req: GenerateRequest, model: str, meta: ModelMetadata, declared: set[str]) -> list[Tensor]:
        """The prompt and the output limit: text (``text_input``, ``max_tokens``) or, for a token-id
        prompt, TensorRT-LLM's ``input_ids`` [1, N] INT32, ``input_lengths`` and ``request_output_len``
        (``max_tokens`` where the model has no ``request_output_len``)."""
        if req.prompt_ids is None:
            for required in ("text_input", "max_tokens"):
                if required not in declared:
                    raise invalid(f"model {model} has no '{required}' input; it does not fit profile trtllm")
            return [Tensor("text_input", np.array([[req.prompt.encode()]], dtype=object), "BYTES"),
                    Tensor("max_tokens", np.array([[req.max_tokens]], dtype=np.int32))]
        if not takes_token_ids(meta):
            raise invalid(f"Model {model} does not take token ids (no '{INPUT_IDS}' input and '{OUTPUT_IDS}' output).")
        limit = "request_output_len" if "request_output_len" in declared else "max_tokens"
        if limit not in declared:
            raise invalid(f"model {model} has no 'request_output_len' input; it does not fit profile trtllm")
        out = [Tensor(INPUT_IDS, np.array([req.prompt_ids], dtype=np.int32)),
               Tensor(limit, np.array([[req.max_tokens]], dtype=np.int32))]
        if "input_lengths" in declared:
            out.append(Tensor("input_lengths", np.array([[len(req.prompt_ids)]], dtype=np.int32)))
        return out

    @staticmethod
    def _guide(fmt: dict, model: str, meta: ModelMetadata) -> list[Tensor]:
        """OpenAI ``response_format`` as TensorRT-LLM guided decoding: ``json`` (json_object) or
        ``json_schema`` with the schema as the guide."""
        if not guided_decoding(meta):
            raise invalid(f"model {model} has no '{GUIDE_TYPE}' input; it cannot constrain its output")
        if fmt.get("type") == "json_schema":
            kind, guide = b"json_schema", orjson.dumps(fmt["json_schema"]["schema"])
        else:
            kind, guide = b"json", b""
        return [Tensor(GUIDE_TYPE, np.array([[kind]], dtype=object), "BYTES"),
                Tensor(GUIDE, np.array([[guide]], dtype=object), "BYTES")]

    def decode(self, resp: InferResponse) -> Chunk:
        return decode_outputs(resp)

    def can_split(self, meta: ModelMetadata) -> bool:
        """TensorRT-LLM's disaggregated requests need ``context_phase_params`` both ways."""
        return any(s.name == CONTEXT_PHASE_PARAMS for s in meta.inputs) and any(
            s.name == CONTEXT_PHASE_PARAMS for s in meta.outputs)

    def encode_phase(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int, request_type: str,
                     context_phase_params: bytes | None = None) -> InferRequest:
        if request_type not in (CONTEXT_ONLY, GENERATION_ONLY):
            raise invalid(f"unknown request_type {request_type!r}")
        if not self.can_split(meta):
            raise invalid(f"model {model} has no '{CONTEXT_PHASE_PARAMS}' input and output; it cannot split phases")
        infer = self.encode(req, model, meta, seed)
        infer.parameters["request_type"] = request_type
        if request_type == GENERATION_ONLY:
            if not context_phase_params:
                raise invalid("a generation_only request needs the context phase's context_phase_params")
            data = np.frombuffer(context_phase_params, dtype=np.uint8).reshape(1, -1)
            infer.inputs.append(Tensor(CONTEXT_PHASE_PARAMS, data))
        return infer


class VllmProfile:
    name = "vllm"

    def sampling_json(self, req: GenerateRequest, seed: int) -> bytes:
        s = req.sampling
        params = {"max_tokens": req.max_tokens, "seed": seed}
        for key in ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "frequency_penalty"):
            value = getattr(s, key)
            if value is not None:
                params[key] = value
        if s.do_sample is False:
            params["temperature"] = 0.0
        if req.stop:
            params["stop"] = list(req.stop)
        return orjson.dumps(params)

    def encode(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int) -> InferRequest:
        declared = {s.name for s in meta.inputs}
        if "text_input" not in declared:
            raise invalid(f"model {model} has no 'text_input' input; it does not fit profile vllm")
        if req.prompt_ids is not None or req.response_format is not None or req.logprobs:
            raise invalid(f"Model {model} (profile vllm): no token ids, response_format or logprobs here.")
        inputs = [
            Tensor("text_input", np.array([req.prompt.encode()], dtype=object), "BYTES"),
            Tensor("stream", np.array([req.stream], dtype=np.bool_)),
            Tensor("sampling_parameters", np.array([self.sampling_json(req, seed)], dtype=object), "BYTES"),
        ]
        for flag in ("exclude_input_in_output", *_OPTIONAL_FLAGS):
            if flag in declared:
                inputs.append(Tensor(flag, np.array([True], dtype=np.bool_)))
        return InferRequest(model=model, inputs=inputs, id=req.request_id)

    def decode(self, resp: InferResponse) -> Chunk:
        return decode_outputs(resp)

    def can_split(self, meta: ModelMetadata) -> bool:
        return False  # Triton's vLLM backend has no context-only / generation-only requests

    def encode_phase(self, req: GenerateRequest, model: str, meta: ModelMetadata, seed: int, request_type: str,
                     context_phase_params: bytes | None = None) -> InferRequest:
        raise invalid(f"profile vllm cannot split phases (model {model})")


PROFILES: dict[str, Profile] = {p.name: p for p in (TrtllmProfile(), VllmProfile())}


def profile(name: str) -> Profile:
    return named(PROFILES, name, "model profile")


def guess_profile(meta: ModelMetadata) -> str:
    return "vllm" if any(s.name == "sampling_parameters" for s in meta.inputs) else "trtllm"


def is_text_llm(meta: ModelMetadata) -> bool:
    """A decoupled model with a text contract (text_input in, text_output out)."""
    ins = {s.name for s in meta.inputs}
    outs = {s.name for s in meta.outputs}
    return meta.decoupled and "text_input" in ins and "text_output" in outs
