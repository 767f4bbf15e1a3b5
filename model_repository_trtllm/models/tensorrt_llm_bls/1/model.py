"""tensorrt_llm_bls stand-in: the ensemble's steps called from python, as the original BLS does.

Text inputs (the ensemble's names) -> ``preprocessing`` -> ``tensorrt_llm`` (streaming when the
request's ``stream`` is true, decoupled either way) -> ``postprocessing`` per response ->
``text_output`` (with ``cum_log_probs`` / ``output_log_probs`` and the indices passed on). Decoupled:
every response forwarded, then a flags-only FINAL response (the original's behaviour, so clients
need ``triton_enable_empty_final_response``). ``accumulate_tokens`` true decodes every token so far
in each streamed response (the whole text so far, as the original). Cancellation: when the client
cancels, the tensorrt_llm request is cancelled too.
"""

import json
import os
import sys
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "lib"))
from standin import array, flag, parameter  # noqa: E402

# ensemble name -> preprocessing input
PRE = {"text_input": "QUERY", "decoder_text_input": "DECODER_QUERY", "max_tokens": "REQUEST_OUTPUT_LEN",
       "bad_words": "BAD_WORDS_DICT", "stop_words": "STOP_WORDS_DICT", "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
       "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS", "end_id": "END_ID", "pad_id": "PAD_ID",
       "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID"}
# preprocessing output -> tensorrt_llm input
FROM_PRE = {"INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths", "REQUEST_OUTPUT_LEN": "request_output_len",
            "DECODER_INPUT_ID": "decoder_input_ids", "REQUEST_DECODER_INPUT_LEN": "decoder_input_lengths",
            "BAD_WORDS_IDS": "bad_words_list", "STOP_WORDS_IDS": "stop_words_list", "EMBEDDING_BIAS": "embedding_bias",
            "OUT_END_ID": "end_id", "OUT_PAD_ID": "pad_id", "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids"}
# ensemble name -> tensorrt_llm input, passed as they are
DIRECT = {"exclude_input_in_output": "exclude_input_in_output", "top_k": "runtime_top_k", "top_p": "runtime_top_p",
          "temperature": "temperature", "length_penalty": "len_penalty", "repetition_penalty": "repetition_penalty",
          "min_tokens": "min_tokens", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
          "seed": "seed", "return_log_probs": "return_log_probs", "return_context_logits": "return_context_logits",
          "return_generation_logits": "return_generation_logits", "return_perf_metrics": "return_perf_metrics",
          "num_return_sequences": "num_return_sequences", "beam_width": "beam_width",
          "prompt_embedding_table": "prompt_embedding_table", "prompt_vocab_size": "prompt_vocab_size",
          "lora_task_id": "lora_task_id", "lora_weights": "lora_weights", "lora_config": "lora_config",
          "guided_decoding_guide_type": "guided_decoding_guide_type", "guided_decoding_guide": "guided_decoding_guide"}
PASSED_OUT = ("cum_log_probs", "output_log_probs", "batch_index", "sequence_index")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.accumulate = flag(parameter(config, "accumulate_tokens", "false"))
        self.llm = parameter(config, "tensorrt_llm_model_name", "tensorrt_llm") or "tensorrt_llm"

    def execute(self, requests):
        if self.decoupled:  # each request on its own thread, so streams do not wait for each other
            for request in requests:
                threading.Thread(target=self._serve, args=(request, []), daemon=True).start()
            return None
        out = []
        for request in requests:
            self._serve(request, out)
        return out

    def _serve(self, request, out):
        sender = request.get_response_sender() if self.decoupled else None
        try:
            responses = list(self._run(request, sender))
            if self.decoupled:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                out.append(responses[-1])
        except Exception as e:
            error = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"tensorrt_llm_bls: {e}"))
            if self.decoupled:
                sender.send(error)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                out.append(error)

    def _run(self, request, sender):
        pre_inputs = [pb_utils.Tensor(PRE[k], _as2d(v)) for k in PRE if (v := array(request, k)) is not None]
        pre = pb_utils.InferenceRequest(model_name="preprocessing", inputs=pre_inputs,
                                        requested_output_names=list(FROM_PRE)).exec()
        if pre.has_error():
            raise RuntimeError(pre.error().message())
        inputs = [pb_utils.Tensor(FROM_PRE[t.name()], t.as_numpy()) for t in pre.output_tensors() if t.name() in FROM_PRE]
        inputs += [pb_utils.Tensor(DIRECT[k], _as2d(v)) for k in DIRECT if (v := array(request, k)) is not None]
        stream = bool(array(request, "stream").reshape(-1)[0]) if array(request, "stream") is not None else False
        inputs.append(pb_utils.Tensor("streaming", np.array([[stream]], dtype=np.bool_)))
        llm = pb_utils.InferenceRequest(model_name=self.llm, inputs=inputs, requested_output_names=[
            "output_ids", "sequence_length", *PASSED_OUT])
        results = llm.exec(decoupled=True)
        so_far = None
        for res in results:
            if sender is not None and sender.is_cancelled():
                if hasattr(results, "cancel"):
                    results.cancel()
                break
            if res.has_error():
                raise RuntimeError(res.error().message())
            if not res.output_tensors():
                continue  # the tensorrt_llm request's flags-only end
            ids = pb_utils.get_output_tensor_by_name(res, "output_ids").as_numpy()
            lengths = pb_utils.get_output_tensor_by_name(res, "sequence_length").as_numpy()
            if self.accumulate and stream:
                so_far = ids if so_far is None else np.concatenate([so_far, ids], axis=-1)
                ids, lengths = so_far, np.array([[so_far.shape[-1]]], dtype=np.int32)
            post = pb_utils.InferenceRequest(model_name="postprocessing", requested_output_names=["OUTPUT"], inputs=[
                pb_utils.Tensor("TOKENS_BATCH", ids), pb_utils.Tensor("SEQUENCE_LENGTH", lengths)]).exec()
            if post.has_error():
                raise RuntimeError(post.error().message())
            text = pb_utils.get_output_tensor_by_name(post, "OUTPUT").as_numpy()
            tensors = [pb_utils.Tensor("text_output", text.reshape(1, -1))]
            for name in PASSED_OUT:
                t = pb_utils.get_output_tensor_by_name(res, name)
                if t is not None:
                    tensors.append(pb_utils.Tensor(name, t.as_numpy()))
            response = pb_utils.InferenceResponse(output_tensors=tensors)
            if sender is not None:
                sender.send(response)
            yield response


def _as2d(v):
    return v.reshape(1, -1) if v.ndim < 2 else v
