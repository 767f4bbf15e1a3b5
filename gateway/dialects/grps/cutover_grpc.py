"""GRPS gRPC answers as the cutover's neutral Answer (docs/migration.md), read with this dialect's
own readers (``codec.tensor_from_generic``, ``codec.gmap_values``):

    status FAILURE              an error: its code (GRPS's HTTP-like number) and msg, compared exactly
    gtensors                    each tensor under its name
    str_data / bin_data         one BYTES output of that name
    gmap                        each key as a one-element tensor of its map's type

The request's model (``GrpsMessage.model``, field 2) is read from its bytes, without parsing the rest.
The Answer's ``canonical`` form is the message serialized deterministically (``gmap`` in key order,
not in the order of each process's own): answers differing only there are the same to every client.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from gateway._proto import grps_pb2
from gateway.core.protowire import fields
from gateway.cutover import Answer, failure

from . import codec

SERVICE = "/grps.protos.v1.GrpsService/"
_MODEL = 2 << 3 | 2


def path(method: str) -> str:
    return SERVICE + method


def model_of(method: str, data: bytes) -> str:
    """``GrpsMessage.model`` of a request's bytes (the last one given wins, as protobuf reads it); ""
    for none (GRPS's default model) or bytes that are not a message."""
    name = b""
    try:
        for tag, _, p, q in fields(data):
            if tag == _MODEL:
                name = data[p:q]
    except DecodeError:
        return ""
    return name.decode("utf-8", "replace")


def answer(method: str, data: bytes):
    """One GrpsMessage's bytes as an Answer (gateway.cutover.compare)."""
    msg = grps_pb2.GrpsMessage.FromString(data)
    if msg.status.status == codec.FAILURE:
        return failure(str(msg.status.code), msg.status.msg)
    outputs: dict[str, np.ndarray] = {}
    kind = msg.WhichOneof("data_oneof")
    if kind == "gtensors":
        for gt in msg.gtensors.tensors:
            outputs[gt.name] = codec.tensor_from_generic(gt).data
    elif kind == "str_data":
        outputs["str_data"] = np.array([msg.str_data.encode()], dtype=object)
    elif kind == "bin_data":
        outputs["bin_data"] = np.array([msg.bin_data], dtype=object)
    elif kind == "gmap":
        for key, (v2, value) in codec.gmap_values(msg.gmap).items():
            outputs[key] = np.array([value], dtype=object if v2 == "BYTES" else None)
    if msg.model:
        outputs["model"] = np.array([msg.model.encode()], dtype=object)
    return Answer(outputs=outputs, fields=tuple(outputs), canonical=msg.SerializeToString(deterministic=True))


__all__ = ["answer", "model_of", "path"]
