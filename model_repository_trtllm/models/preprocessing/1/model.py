"""preprocessing stand-in: TensorRT-LLM's text -> token ids step, with the model's tokenizer.

QUERY [1, 1] -> INPUT_ID [1, N] (``add_special_tokens`` as configured), REQUEST_INPUT_LEN,
REQUEST_OUTPUT_LEN, STOP_WORDS_IDS / BAD_WORDS_IDS ([1, 2, N] word lists), OUT_END_ID and
OUT_PAD_ID (the request's END_ID / PAD_ID, else the tokenizer's eos and pad tokens),
DECODER_INPUT_ID / REQUEST_DECODER_INPUT_LEN (the pad id, length 1, for decoder-only models),
EMBEDDING_BIAS (empty unless bias words and their weights are given).
"""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "lib"))
from standin import HfTokenizer, array, flag, parameter, scalar, word_list  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = HfTokenizer(config, os.path.join(args["model_repository"]))
        self.add_special_tokens = flag(parameter(config, "add_special_tokens", "true"))

    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        try:
            query = array(request, "QUERY").reshape(-1)[0]
            text = query.decode("utf-8") if isinstance(query, bytes) else str(query)
            ids = self.tokenizer.encode(text, self.add_special_tokens)
            if not ids:
                raise ValueError("the prompt has no tokens")
            end_id = scalar(request, "END_ID", self.tokenizer.end_id)
            pad_id = scalar(request, "PAD_ID", self.tokenizer.pad_id)
            out_len = array(request, "REQUEST_OUTPUT_LEN").reshape(1, -1).astype(np.int32)
            bias_words = array(request, "EMBEDDING_BIAS_WORDS")
            bias_weights = array(request, "EMBEDDING_BIAS_WEIGHTS")
            bias = np.zeros((1, 0), dtype=np.float32)
            if bias_words is not None and bias_weights is not None:  # as the original: both, or no bias
                words, weights = bias_words.reshape(-1), bias_weights.reshape(-1)
                if len(words) != len(weights):
                    raise ValueError("Embedding bias words must have same dimension as embedding bias weights")
                bias = np.zeros((1, self.tokenizer.tok.get_vocab_size()), dtype=np.float32)
                for w, weight in zip(words, weights, strict=True):
                    for token in self.tokenizer.encode(w.decode("utf-8") if isinstance(w, bytes) else str(w)):
                        bias[0, token] += weight  # every token of the word, as the original adds it
            tensors = [
                pb_utils.Tensor("INPUT_ID", np.array([ids], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(ids)]], dtype=np.int32)),
                pb_utils.Tensor("DECODER_INPUT_ID", np.array([[pad_id]], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", np.array([[1]], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", out_len),
                pb_utils.Tensor("BAD_WORDS_IDS", word_list(self.tokenizer, _flat(array(request, "BAD_WORDS_DICT")))),
                pb_utils.Tensor("STOP_WORDS_IDS", word_list(self.tokenizer, _flat(array(request, "STOP_WORDS_DICT")))),
                pb_utils.Tensor("EMBEDDING_BIAS", bias),
                pb_utils.Tensor("OUT_END_ID", np.array([[end_id]], dtype=np.int32)),
                pb_utils.Tensor("OUT_PAD_ID", np.array([[pad_id]], dtype=np.int32)),
            ]
            extra = array(request, "PROMPT_TABLE_EXTRA_ID")
            if extra is not None:
                ids_extra = np.full((1, len(ids)), extra.reshape(-1)[0], dtype=np.uint64)
                tensors.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", ids_extra))
            return pb_utils.InferenceResponse(output_tensors=tensors)
        except Exception as e:  # the request's own error, never the whole batch's
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"preprocessing: {e}"))


def _flat(words):
    return None if words is None else words.reshape(-1)
