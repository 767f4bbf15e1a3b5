"""multi_tensor_scale on CPU: scaled = signal * float32(count), as the TensorRT plan computes it."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            signal = pb_utils.get_input_tensor_by_name(request, "signal").as_numpy()
            count = pb_utils.get_input_tensor_by_name(request, "count").as_numpy()
            scaled = (signal.astype(np.float32) * count.astype(np.float32)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("scaled", scaled)]))
        return responses
