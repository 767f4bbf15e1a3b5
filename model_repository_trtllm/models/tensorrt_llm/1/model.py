"""tensorrt_llm stand-in: the engine's token-level contract, generating deterministically on CPU.

Inputs as the TensorRT-LLM backend reads them: ``input_ids`` [1, N], ``input_lengths``,
``request_output_len``, ``end_id`` (generation stops at it; default the tokenizer's eos),
``streaming``, ``exclude_input_in_output`` (default the model parameter), ``stop_words_list``,
``return_log_probs``, ``seed``, ``temperature``, ``stop`` (true: end at once). Outputs:
``output_ids`` [1, 1, K] and ``sequence_length`` [1, 1]; with ``return_log_probs``
``output_log_probs`` [1, 1, K] and ``cum_log_probs`` [1, 1] (a token's log probability is
``-(id % 7) / 8``); ``batch_index`` and ``sequence_index``; with ``return_perf_metrics`` the
kv-cache and timing outputs.

What it says (the prompt is decoded with the model's tokenizer, so a chat template's markers
decide):
* tools in the prompt (``<tools>`` ... ``</tools>``) and no ``<tool_response>`` after the last
  user turn: a Hermes tool call of the first tool, ``<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>``, each required argument given a fixed value by type;
* a ``<tool_response>`` last: ``The tool says: <its first line>``;
* else the first of REPLIES whose key word the prompt holds; else one picked by the prompt's ids
  (and ``seed`` when ``temperature`` > 0).
Then the end id. Streaming: one response per token; else one response with every token (the
prompt's ids first unless excluded). Cancellation is checked before each token.

Disaggregated serving as the backend: request parameter ``request_type`` ``context_only`` (one
response with the first token and ``context_phase_params``), ``generation_only`` (with those
params: the tokens after it), else both phases.
"""

import json
import os
import re
import sys
import threading
import time
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "lib"))
from standin import HfTokenizer, array, flag, parameter, request_parameters, scalar, words_from_list  # noqa: E402

REPLIES = (  # (key word, reply)
    ("learning", "Machine learning is the study of programs that improve with experience."),
    ("weather", "The weather in Paris is mild today: café au lait, 東京 is far away 🙂."),
    ("token", "A token is a piece of text, a word or part of one; naïve résumé."),
    ("test", "Deterministic replies make tests easy to read and easy to predict."),
)
ARGUMENT_VALUES = {"string": "Paris", "integer": 1, "number": 1.5, "boolean": True}


def log_prob(token_id: int) -> float:
    return -(token_id % 7) / 8


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = HfTokenizer(config, args["model_repository"])
        self.exclude_input = flag(parameter(config, "exclude_input_in_output", "false"))
        self.delay = float(parameter(config, "token_delay_ms", "2")) / 1000.0
        self.threads = set()
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            t = threading.Thread(target=self._run, args=(request,), daemon=True)
            with self.lock:
                self.threads.add(t)
            t.start()
        return None

    def finalize(self):
        for t in list(self.threads):
            t.join(timeout=2)

    def _run(self, request):
        sender = request.get_response_sender()
        try:
            self._generate(request, sender)
        except Exception as e:  # report, never hang the stream
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"tensorrt_llm: {e}")))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.threads.discard(threading.current_thread())

    def reply(self, prompt_ids, seed: int, temperature: float) -> list:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        tail = text[text.rfind("<|im_start|>user"):] if "<|im_start|>user" in text else text
        if "<tool_response>" in tail:
            said = tail.split("<tool_response>", 1)[1].strip().splitlines()
            return self.tokenizer.encode("The tool says: " + (said[0] if said else ""))
        tools = [t for t in re.findall(r"<tools>\s*(.*?)\s*</tools>", text, re.S) if t]  # not the prose's "<tools></tools>"
        if tools:
            first = json.loads(tools[-1].splitlines()[0])
            fn = first.get("function", first)
            props = fn.get("parameters", {}).get("properties", {})
            args = {k: ARGUMENT_VALUES.get(props.get(k, {}).get("type"), "x")
                    for k in fn.get("parameters", {}).get("required", [])}
            call = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
            return self.tokenizer.encode(f"<tool_call>\n{call}\n</tool_call>")
        keyed = [reply for key, reply in REPLIES if key in tail.lower()]
        h = zlib.crc32(np.asarray(prompt_ids, dtype=np.int32).tobytes())
        if temperature > 0:
            h = zlib.crc32(f"{h}:{seed}".encode())
        return self.tokenizer.encode(keyed[0] if keyed else REPLIES[h % len(REPLIES)][1])

    def _generate(self, request, sender):
        ids = array(request, "input_ids")
        if ids is None or ids.size == 0:
            raise ValueError("input_ids is required")
        prompt = [int(i) for i in ids.reshape(-1)]
        n_in = int(scalar(request, "input_lengths", len(prompt)))
        prompt = prompt[:n_in]
        limit = int(scalar(request, "request_output_len", 16))
        end_id = int(scalar(request, "end_id", self.tokenizer.end_id))
        stream = bool(scalar(request, "streaming", False))
        exclude = bool(scalar(request, "exclude_input_in_output", self.exclude_input))
        lp = bool(scalar(request, "return_log_probs", False))
        perf = bool(scalar(request, "return_perf_metrics", False))
        stops = words_from_list(array(request, "stop_words_list"))
        seed = int(scalar(request, "seed", 0))
        temperature = float(scalar(request, "temperature", 0.0))
        if limit < 0:
            raise ValueError("request_output_len must be >= 0")
        phase = request_parameters(request).get("request_type", "context_and_generation")
        planned = self.reply(prompt, seed, temperature) + [self.tokenizer.end_id]
        skip = 0
        if phase == "generation_only":
            state = array(request, "context_phase_params")
            if state is None:
                raise ValueError("a generation_only request needs context_phase_params")
            state = json.loads(state.astype(np.uint8).tobytes().decode("utf-8"))
            if state.get("prompt_crc") != zlib.crc32(np.asarray(prompt, dtype=np.int32).tobytes()):
                raise ValueError("context_phase_params do not belong to this request")
            skip = len(state["first_gen_tokens"])
        arrival = time.time_ns()
        made, first_at, cum = [], 0, 0.0
        stopped = bool(scalar(request, "stop", False))
        for token in planned[skip:]:
            if stopped or sender.is_cancelled() or token == end_id or len(made) + skip >= limit:
                break
            if phase == "context_only" and made:
                break
            time.sleep(self.delay)
            made.append(token)
            first_at = first_at or time.time_ns()
            cum += log_prob(token)
            if stream and phase != "context_only":
                sender.send(self._response([token], [token] if lp else None, cum, perf, arrival, first_at))
            if any(made[-len(w):] == w for w in stops):
                break
        if sender.is_cancelled():
            pb_utils.Logger.log_info(f"tensorrt_llm: request {request.request_id()} cancelled after {len(made)} tokens")
        elif phase == "context_only":
            state = {"prompt_crc": zlib.crc32(np.asarray(prompt, dtype=np.int32).tobytes()), "first_gen_tokens": made}
            out = made if stream or exclude else prompt + made
            sender.send(self._response(out, made if lp else None, cum, perf, arrival, first_at,
                                       json.dumps(state).encode("utf-8")))
        elif not stream:
            out = made if exclude else prompt + made
            sender.send(self._response(out, made if lp else None, cum, perf, arrival, first_at))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _response(ids, lp_ids, cum, perf, arrival, first_at, context_phase_params=None):
        out = [
            pb_utils.Tensor("output_ids", np.array(ids, dtype=np.int32).reshape(1, 1, -1)),
            pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32)),
            pb_utils.Tensor("batch_index", np.array([[0]], dtype=np.int32)),
            pb_utils.Tensor("sequence_index", np.array([[0]], dtype=np.int32)),
        ]
        if lp_ids is not None:
            values = np.array([log_prob(i) for i in lp_ids], dtype=np.float32).reshape(1, 1, -1)
            out.append(pb_utils.Tensor("output_log_probs", values))
            out.append(pb_utils.Tensor("cum_log_probs", np.array([[cum]], dtype=np.float32)))
        if perf:
            now = time.time_ns()
            for name, value in (("kv_cache_alloc_new_blocks", 1), ("kv_cache_reused_blocks", 0),
                                ("kv_cache_alloc_total_blocks", 1)):
                out.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int32)))
            for name, value in (("arrival_time_ns", arrival), ("first_scheduled_time_ns", arrival),
                                ("first_token_time_ns", first_at or now), ("last_token_time_ns", now)):
                out.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int64)))
        if context_phase_params is not None:
            out.append(pb_utils.Tensor("context_phase_params",
                                       np.frombuffer(context_phase_params, dtype=np.uint8).reshape(1, -1)))
        return pb_utils.InferenceResponse(output_tensors=out)
