"""TensorFlow Serving's test model half_plus_two (python backend, CPU), in FP32, FP16 and BF16.

numpy has no bfloat16 and the python backend cannot hand one to numpy (``as_numpy`` refuses
TYPE_BF16), so BF16 travels as its 16-bit patterns through DLPack: the input's DLPack capsule is
read with ctypes, and the output is built from a DLPack capsule of dtype bfloat16 made here.
"""

import ctypes

import numpy as np
import triton_python_backend_utils as pb_utils


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_KDLCPU, _KDLBFLOAT = 1, 4
_ALIVE = {}  # id(managed) -> what its memory belongs to, until the consumer calls the deleter


@_DELETER
def _release(managed):
    _ALIVE.pop(ctypes.addressof(managed.contents), None)


def _bf16_bits(tensor) -> np.ndarray:
    """A BF16 pb_utils.Tensor's 16-bit patterns (uint16, same shape), read through its DLPack capsule."""
    capsule = tensor.to_dlpack()
    managed = _Managed.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))
    dl = managed.dl_tensor
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    count = int(np.prod(shape, dtype=np.int64))
    raw = ctypes.string_at(dl.data + dl.byte_offset, 2 * count) if count else b""
    return np.frombuffer(raw, dtype=np.uint16).reshape(shape).copy()


def _bf16_tensor(name: str, bits: np.ndarray):
    """A BF16 pb_utils.Tensor from 16-bit patterns, through a DLPack capsule of dtype bfloat16."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    shape = (ctypes.c_int64 * max(bits.ndim, 1))(*bits.shape)
    managed = _Managed()
    managed.dl_tensor = _DLTensor(bits.ctypes.data, _Device(_KDLCPU, 0), bits.ndim, _DType(_KDLBFLOAT, 16, 1),
                                  shape, None, 0)
    managed.deleter = _release
    _ALIVE[ctypes.addressof(managed)] = (managed, bits, shape)
    capsule = _api.PyCapsule_New(ctypes.addressof(managed), b"dltensor", None)
    return pb_utils.Tensor.from_dlpack(name, capsule)


def _to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outs = []
            x = pb_utils.get_input_tensor_by_name(request, "x")
            if x is not None:
                v = x.as_numpy().astype(np.float32)
                outs.append(pb_utils.Tensor("y", np.float32(0.5) * v + np.float32(2.0)))
                outs.append(pb_utils.Tensor("y2", np.float32(0.5) * v + np.float32(3.0)))
            x2 = pb_utils.get_input_tensor_by_name(request, "x2")
            if x2 is not None:
                v = x2.as_numpy().astype(np.float32)
                outs.append(pb_utils.Tensor("y3", np.float32(0.5) * v + np.float32(3.0)))
            xh = pb_utils.get_input_tensor_by_name(request, "x_half")
            if xh is not None:
                v = xh.as_numpy().astype(np.float16)
                outs.append(pb_utils.Tensor("y_half", (np.float16(0.5) * v + np.float16(2.0)).astype(np.float16)))
            xb = pb_utils.get_input_tensor_by_name(request, "x_bf16")
            if xb is not None:
                bits = _bf16_bits(xb).astype(np.uint32) << 16
                v = bits.view(np.float32)
                outs.append(_bf16_tensor("y_bf16", _to_bf16_bits(np.float32(0.5) * v + np.float32(2.0))))
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
