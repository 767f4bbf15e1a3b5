"""multi_tensor_text: the multi_tensor ensemble's BYTES and FP64 outputs (see ../config.pbtxt)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _outputs(tag, signal, count):
    tag_bytes = np.array([[bytes(t)[::-1] + b"\x00\xff" for t in row] for row in tag], dtype=object)
    total = (signal.astype(np.float64).sum(axis=1, keepdims=True) * count.astype(np.float64)).astype(np.float64)
    length = np.array([[len(bytes(t)) for t in row] for row in tag], dtype=np.int64)
    return [pb_utils.Tensor("tag_bytes", tag_bytes), pb_utils.Tensor("total", total), pb_utils.Tensor("length", length)]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tag = pb_utils.get_input_tensor_by_name(request, "tag").as_numpy()
            signal = pb_utils.get_input_tensor_by_name(request, "signal").as_numpy()
            count = pb_utils.get_input_tensor_by_name(request, "count").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=_outputs(tag, signal, count)))
        return responses
