"""dtype_echo: every input it is given comes back unchanged on <name>_out (python backend).

BF16 has no numpy type and ``as_numpy`` refuses it: that input goes back through its own DLPack
capsule (the same memory, the same 16-bit patterns). Every other type through numpy.
"""

import triton_python_backend_utils as pb_utils

INPUTS = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "fp16", "bf16",
          "fp32", "fp64", "bytes", "grid")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outs = []
            for name in INPUTS:
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is None:
                    continue
                if name == "bf16":
                    outs.append(pb_utils.Tensor.from_dlpack(name + "_out", t.to_dlpack()))
                else:
                    outs.append(pb_utils.Tensor(name + "_out", t.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
