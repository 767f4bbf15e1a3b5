"""The ModelInfer corpus the differential upstream tests send to the real Triton both ways
(tests/contract/test_h2call.py: HTTP/2 frames on the loop against grpc.aio): requests as wire bytes,
answers as (``"ok"``, bytes) or (error kind, message), and what counts as the same answer."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2

from gateway.core.errors import GatewayError


def _req(model: str, inputs, *, version: str = "", rid: str = "d1", outputs=(), raw_extra: bytes | None = None,
         params: dict | None = None) -> bytes:
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=rid)
    for name, datatype, shape, data in inputs:
        msg.inputs.add(name=name, datatype=datatype, shape=shape)
        msg.raw_input_contents.append(data)
    for name in outputs:
        msg.outputs.add(name=name)
    if raw_extra is not None:
        msg.raw_input_contents.append(raw_extra)
    for k, v in (params or {}).items():
        msg.parameters[k].string_param = v
    return msg.SerializeToString()


def _f32(*v) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _text(s: bytes) -> bytes:
    return len(s).to_bytes(4, "little") + s


HPT = "saved_model_half_plus_three"
CASES = {
    "small": _req(HPT, [("x", "FP32", [4], _f32(1, 2, 5, 7))]),
    "no id of Triton's own words": _req(HPT, [("x", "FP32", [4], _f32(1, 2))], rid="d2"),
    "version": _req("half_plus_two", [("x", "FP32", [3], _f32(1, 2, 3))], version="2"),
    "unknown version": _req("half_plus_two", [("x", "FP32", [1], _f32(1))], version="9"),
    "ensemble": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"abc")), ("signal", "FP32", [1, 4], _f32(1, 2, 3, 4)),
                                      ("count", "INT32", [1, 1], np.int32(3).tobytes())]),
    "requested output": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"x")), ("signal", "FP32", [1, 4], _f32(1, 2, 3, 4)),
                                              ("count", "INT32", [1, 1], np.int32(1).tobytes())], outputs=["total"]),
    "unknown output": _req(HPT, [("x", "FP32", [1], _f32(1))], outputs=["nope"]),
    "grps bytes": _req("grps_echo", [("text", "BYTES", [1], _text(b"hello"))]),
    "unknown model": _req("no_such_model", [("x", "FP32", [1], _f32(1))]),
    "wrong input name": _req(HPT, [("y", "FP32", [1], _f32(1))]),
    "wrong datatype": _req(HPT, [("x", "INT32", [1], np.int32(1).tobytes())]),
    "shape and data disagree": _req(HPT, [("x", "FP32", [4], _f32(1))]),
    "missing input": _req("multi_tensor", [("tag", "BYTES", [1, 1], _text(b"x"))]),
    "extra raw contents": _req(HPT, [("x", "FP32", [1], _f32(1))], raw_extra=b"\0\0\0\0"),
    "batch too large": _req("multi_tensor", [("tag", "BYTES", [99, 1], _text(b"x") * 99),
                                             ("signal", "FP32", [99, 4], _f32(*range(396))),
                                             ("count", "INT32", [99, 1], np.zeros(99, np.int32).tobytes())]),
    "bad parameter": _req(HPT, [("x", "FP32", [1], _f32(1))], params={"priority": "high"}),
}


async def _answer(fn):
    try:
        return "ok", await fn()
    except GatewayError as err:
        return err.kind, err.message


def _same(a: tuple, b: tuple) -> bool:
    """Equal answers: the same bytes, but for the order of the ``parameters`` map's entries, which
    protobuf leaves open (an ensemble's answer has several); the same error."""
    if a[0] != "ok" or b[0] != "ok":
        return a == b
    x, y = (service_pb2.ModelInferResponse.FromString(v[1]) for v in (a, b))
    if x.parameters:
        return x == y and len(a[1]) == len(b[1])
    return a[1] == b[1]

