"""tiny_llm: a decoupled, deterministic toy text generator (python backend).

Contract (TensorRT-LLM ensemble style): ``text_input`` BYTES, ``max_tokens`` INT32, optional
``stream`` BOOL, sampling inputs, ``stop_words``/``bad_words`` BYTES lists; output ``text_output``.

Token contract (TensorRT-LLM's ``tensorrt_llm`` model): ``input_ids`` INT32 [1, N] (and
``input_lengths``), ``request_output_len`` INT32 in place of ``text_input``/``max_tokens``; each
response then also carries ``output_ids`` INT32 [1, 1, K] (beam 1) and ``sequence_length`` [1, 1].
A token's id is its word's index in VOCAB (the end token: ``len(VOCAB)``); a token-id prompt is
read as the text ``ids:<id>,<id>,...``, so equal ids give equal replies. ``exclude_input_in_output``
false puts the prompt ids before the generated ones in a non-stream answer, as TensorRT-LLM does.

``return_log_probs`` true (TensorRT-LLM's name) adds ``output_log_probs`` FP32 [1, 1, K] (each
token of the response) and ``cum_log_probs`` [1, 1] to every response. The toy's reported log
probability of a token is a fixed function of its id, ``-(id % 7) / 8``, so tests can predict it.

Generation: tokens are words from VOCAB. The sequence depends only on the prompt (and on ``seed``
when ``temperature`` > 0). After ``natural_length(prompt)`` tokens (8..24) the model emits its end
token and stops, so ``max_tokens`` below that ends by length and above it ends by the end token.

* stream=true: one response per token holding only that token's text (" word");
* stream=false: one response with the whole text, the prompt prepended unless
  ``exclude_input_in_output`` is true (as TensorRT-LLM does);
* every request ends with the FINAL flag; cancellation is checked before each token and logged
  as ``tiny_llm: request <id> cancelled after <n> tokens``.

Disaggregated serving, with TensorRT-LLM's ``tensorrt_llm`` contract (request parameter
``request_type``, UINT8 tensor ``context_phase_params``):

* ``context_only``: runs the context phase (the first token only) and answers one response with
  that token's ``text_output`` and ``context_phase_params`` ([1, N] bytes: the first generated
  tokens and what the generation phase needs to continue), then FINAL;
* ``generation_only`` (same inputs plus ``context_phase_params``): continues after the context
  phase's tokens; its responses carry only the tokens that follow them;
* absent, ``context_and_generation`` or unknown (as TensorRT-LLM, which logs it): both phases.
"""

import json
import threading
import time
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

VOCAB = (
    "the model answers every prompt with a short deterministic walk through this small vocabulary "
    "of plain words so that tests can predict each token and streams stay easy to read"
).split()
END_TOKEN = "</s>"


def _scalar(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    v = t.as_numpy().reshape(-1)
    return v[0].item() if v.size else default


def _words(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return []
    out = []
    for v in t.as_numpy().reshape(-1):
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        out.extend(w for w in s.split(",") if w)  # TensorRT-LLM accepts "a,b" in one element too
    return out


def _request_type(request) -> str:
    try:
        params = json.loads(request.parameters() or "{}")
    except (AttributeError, ValueError):
        return "context_and_generation"
    value = params.get("request_type", "context_and_generation")
    return value if value in ("context_only", "generation_only") else "context_and_generation"


def _context_params(request, prompt: str) -> list:
    """The first generated tokens carried in ``context_phase_params`` (checked against the prompt)."""
    t = pb_utils.get_input_tensor_by_name(request, "context_phase_params")
    if t is None:
        raise ValueError("generation_only request needs the context_phase_params input")
    state = json.loads(t.as_numpy().astype(np.uint8).tobytes().decode("utf-8"))
    if state.get("prompt_crc") != zlib.crc32(prompt.encode("utf-8")):
        raise ValueError("context_phase_params do not belong to this request")
    return list(state["first_gen_tokens"])


def _prompt(request):
    """(prompt text, prompt ids or None): ``input_ids`` (token contract) or ``text_input``."""
    ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
    if ids is not None:
        values = [int(v) for v in ids.as_numpy().reshape(-1)]
        if not values:
            raise ValueError("input_ids must hold at least one token id")
        return "ids:" + ",".join(map(str, values)), values
    raw = pb_utils.get_input_tensor_by_name(request, "text_input")
    if raw is None:
        raise ValueError("the request needs text_input or input_ids")
    raw = raw.as_numpy().reshape(-1)
    return (raw[0].decode("utf-8", "replace") if raw.size else ""), None


def log_prob(token_id: int) -> float:
    return -(token_id % 7) / 8


def natural_length(prompt: str) -> int:
    return 8 + zlib.crc32(prompt.encode("utf-8")) % 17


def generate(prompt: str, seed: int, temperature: float):
    """Yield (token id, token text) of the reply, ending with the end token."""
    h = zlib.crc32(prompt.encode("utf-8"))
    if temperature > 0:
        h = zlib.crc32(f"{h}:{seed}".encode())
    for i in range(natural_length(prompt)):
        index = (h + 7 * i) % len(VOCAB)
        yield index, VOCAB[index] if i == 0 else " " + VOCAB[index]
    yield len(VOCAB), END_TOKEN


class TritonPythonModel:
    def initialize(self, args):
        import json

        params = json.loads(args["model_config"]).get("parameters", {})
        self.delay = float(params.get("token_delay_ms", {}).get("string_value", "15")) / 1000.0
        self.logger = pb_utils.Logger
        self.threads = set()
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            t = threading.Thread(target=self._run, args=(request,), daemon=True)
            with self.lock:
                self.threads.add(t)
            t.start()
        return None

    def _run(self, request):
        sender = request.get_response_sender()
        try:
            self._generate(request, sender)
        except Exception as e:  # report, never hang the stream
            err = pb_utils.TritonError(f"tiny_llm failed: {e}")
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=err))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.threads.discard(threading.current_thread())

    def _generate(self, request, sender):
        prompt, prompt_ids = _prompt(request)
        limit = "max_tokens" if prompt_ids is None else "request_output_len"
        max_tokens = int(_scalar(request, limit, _scalar(request, "max_tokens", 16)))
        stream = bool(_scalar(request, "stream", False))
        seed = int(_scalar(request, "seed", 0))
        temperature = float(_scalar(request, "temperature", 0.0))
        exclude_input = bool(_scalar(request, "exclude_input_in_output", False))
        lp = bool(_scalar(request, "return_log_probs", False))
        stops = _words(request, "stop_words")
        if max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        phase = _request_type(request)
        first = _context_params(request, prompt) if phase == "generation_only" else []
        tokens = generate(prompt, seed, temperature)
        first_ids = [next(tokens)[0] for _ in first]  # the context phase produced these already
        text, n, own, own_ids = "".join(first), len(first), "", []
        ids = prompt_ids is not None
        for token_id, token in tokens:
            if sender.is_cancelled():
                self.logger.log_info(f"tiny_llm: request {request.request_id()} cancelled after {n} tokens")
                break
            if token == END_TOKEN or n >= max_tokens or (phase == "context_only" and n >= 1):
                break
            time.sleep(self.delay)
            n += 1
            text += token
            own += token
            own_ids.append(token_id)
            if stream and phase != "context_only":
                sender.send(_response(token, token_ids=[token_id] if ids else None,
                                      log_probs=[token_id] if lp else None))
            if any(text.endswith(s) for s in stops):
                break
        if phase == "context_only":
            state = {"ctx_request_id": request.request_id(), "prompt_crc": zlib.crc32(prompt.encode("utf-8")),
                     "first_gen_tokens": [own] if own else []}
            out = own if stream or exclude_input or ids else prompt + own
            out_ids = own_ids if stream or exclude_input else (prompt_ids or []) + own_ids
            sender.send(_response(out, json.dumps(state).encode("utf-8"), out_ids if ids else None,
                                  own_ids if lp else None))
        elif not stream and not sender.is_cancelled():
            out_ids = own_ids if exclude_input else (prompt_ids or []) + first_ids + own_ids
            out = own if exclude_input or ids else prompt + text
            sender.send(_response(out, token_ids=out_ids if ids else None, log_probs=own_ids if lp else None))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for t in list(self.threads):
            t.join(timeout=2)


def _response(text: str, context_phase_params: bytes | None = None, token_ids: list | None = None,
              log_probs: list | None = None):
    """``log_probs``: the ids of the generated tokens in ``text``, whose log probabilities to report."""
    out = [pb_utils.Tensor("text_output", np.array([[text.encode("utf-8")]], dtype=np.object_))]
    if log_probs is not None:
        values = np.array([log_prob(i) for i in log_probs], dtype=np.float32).reshape(1, 1, -1)
        out.append(pb_utils.Tensor("output_log_probs", values))
        out.append(pb_utils.Tensor("cum_log_probs", np.array([[values.sum()]], dtype=np.float32)))
    if token_ids is not None:  # TensorRT-LLM's shapes: output_ids [batch, beam, len], sequence_length [batch, beam]
        out.append(pb_utils.Tensor("output_ids", np.array([[token_ids]], dtype=np.int32).reshape(1, 1, -1)))
        out.append(pb_utils.Tensor("sequence_length", np.array([[len(token_ids)]], dtype=np.int32)))
    if context_phase_params is not None:
        params = np.frombuffer(context_phase_params, dtype=np.uint8).reshape(1, -1)
        out.append(pb_utils.Tensor("context_phase_params", params))
    return pb_utils.InferenceResponse(output_tensors=out)
