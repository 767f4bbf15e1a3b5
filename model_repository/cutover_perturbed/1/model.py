"""half_plus_two's x -> y answered differently on purpose (config.pbtxt): the perturbed legacy model."""

import numpy as np
import triton_python_backend_utils as pb_utils

DELTA = np.float32(0.001)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy().astype(np.float32)
            if x.size and float(x.max()) >= 1000:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("cutover_perturbed: x >= 1000 refused")))
                continue
            y = (np.float32(0.5) * x + np.float32(2)) + DELTA
            y3 = np.float32(0.5) * x + np.float32(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y.astype(np.float32)),
                                                   pb_utils.Tensor("y3", y3.astype(np.float32))]))
        return out
