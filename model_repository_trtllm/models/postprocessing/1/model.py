"""postprocessing stand-in: TensorRT-LLM's token ids -> text step, with the model's tokenizer.

TOKENS_BATCH [1, beams, len] and SEQUENCE_LENGTH [1, beams] -> OUTPUT [1, beams]: each beam's
first ``SEQUENCE_LENGTH`` ids decoded on their own (``skip_special_tokens`` as configured). As the
original, one streamed response is decoded without the ones before it, so a character whose bytes
span two responses comes out as U+FFFD in each (tensorrtllm_backend#332).
"""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "lib"))
from standin import HfTokenizer, array, flag, parameter  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = HfTokenizer(config, args["model_repository"])
        self.skip_special_tokens = flag(parameter(config, "skip_special_tokens", "true"))

    def execute(self, requests):
        out = []
        for request in requests:
            tokens = array(request, "TOKENS_BATCH")
            lengths = array(request, "SEQUENCE_LENGTH")
            tokens = tokens.reshape(tokens.shape[0], -1, tokens.shape[-1]) if tokens.ndim >= 2 else tokens.reshape(1, 1, -1)
            lengths = lengths.reshape(tokens.shape[0], -1)
            texts = [[self.tokenizer.decode(tokens[b, k, : lengths[b, k]], self.skip_special_tokens).encode("utf-8")
                      for k in range(tokens.shape[1])] for b in range(tokens.shape[0])]
            out.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", np.array(texts, dtype=np.object_))]))
        return out
