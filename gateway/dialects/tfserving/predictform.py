"""TF Serving gRPC Predict requests read by their learned form instead of being parsed.

A client sends the same request again and again with new values: the same model spec, one input
under the same alias, dtype and shape, the same output filter. The first one is parsed and checked
like any other (``grpc.PredictionServicer.Predict``). When its bytes hold every value of its one
input in one place, as the payload of a single packed ``float_val`` (DT_FLOAT) or ``double_val``
(DT_DOUBLE) field or of ``tensor_content``, with as many values as the shape has (nothing filled
in), its form is kept: the bytes before the values, the bytes after them, and what parsing and
checking them gave (the spec, the alias, the dtype, the shape, the output filter). A later request
of the same length whose bytes before and after the values are the same is the same message but
for the values, which are fixed-width: it is answered from the form, its values an array over its
bytes, with no message built, no names checked and no layout looked up again. Anything else
is parsed.

Sound because the form's field is the only one of its number in the only tensor of the only entry
of ``inputs`` (so no later field replaces or extends it), and every other byte is compared.
Bounded: at most ``PER_SIZE`` forms per request length, and ``MAX_SIZES`` lengths (then all are
forgotten and learned again).

One difference from parsing: a ``float_val`` signalling NaN keeps its bits here, as TF Serving's
own copy of the repeated field keeps them, where the parsed path reads it through a Python float
(which quiets it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from gateway._proto.tensorflow.core.framework import tensor_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2
from gateway.core.bounded import Plans
from gateway.core.protowire import fields

from .mapping import ServableRef
from .protocodec import PACKED

PER_SIZE = 4
MAX_SIZES = 256
_INPUTS = predict_pb2.PredictRequest.DESCRIPTOR.fields_by_name["inputs"]
INPUTS, ENTRY_VALUE = _INPUTS.number, _INPUTS.message_type.fields_by_name["value"].number  # a map: its entries' value
TENSOR_CONTENT = tensor_pb2.TensorProto.DESCRIPTOR.fields_by_name["tensor_content"].number


@dataclass(frozen=True, slots=True)
class Form:
    prefix: bytes  # the request's bytes before the values
    suffix: bytes  # and after them
    count: int  # values
    dtype: np.dtype
    shape: tuple[int, ...]
    spec: ServableRef
    alias: str
    v2: str  # the input's V2 datatype
    output_filter: tuple[str, ...]

    def values(self, data: bytes) -> np.ndarray:
        """The request's values: an array over its bytes (read-only)."""
        return np.frombuffer(data, self.dtype, self.count, len(self.prefix)).reshape(self.shape)


class Forms:
    """The learned forms of one listener."""

    def __init__(self):
        self._by_size = Plans(MAX_SIZES)  # request length -> its forms, the latest first

    def match(self, data: bytes) -> Form | None:
        for form in self._by_size.get(len(data), ()):
            if data.startswith(form.prefix) and data.endswith(form.suffix):
                return form
        return None

    def learn(self, data: bytes, tensor, spec: ServableRef, alias: str, arr: np.ndarray, v2: str,
              output_filter: tuple[str, ...]) -> Form | None:
        """Keep the form of ``data``, a request parsed and checked: ``tensor`` its one input's
        TensorProto, read as ``arr`` (``v2``) under ``alias``. None when its values are not in one
        place of its bytes."""
        if tensor.tensor_content:
            field, dtype = TENSOR_CONTENT, arr.dtype
        elif v2 in PACKED:  # float_val, double_val
            field, dtype = PACKED[v2]
        else:
            return None
        size = arr.size * dtype.itemsize
        if not size or arr.dtype != dtype.newbyteorder("="):
            return None
        start = _locate(data, field, size)
        if start is None:
            return None
        form = Form(data[:start], data[start + size:], arr.size, dtype, arr.shape, spec, alias, v2,
                    tuple(output_filter))
        kept = self._by_size.get(len(data), ())
        self._by_size.keep(len(data), (form, *kept[:PER_SIZE - 1]))
        return form


def _locate(data: bytes, field: int, size: int) -> int | None:
    """Where the payload of ``field`` (``size`` bytes) starts in ``data``: the only such field of
    the only tensor of the only ``inputs`` entry; None otherwise, or for anything malformed."""
    try:
        entry = _only(data, 0, len(data), INPUTS)
        tensor = entry and _only(data, *entry, ENTRY_VALUE)
        values = tensor and _only(data, *tensor, field)
    except DecodeError:
        return None
    if not values or values[1] - values[0] != size:
        return None
    return values[0]


def _only(data: bytes, start: int, end: int, number: int) -> tuple[int, int] | None:
    """(start, end) of the payload of the one length-delimited field ``number`` in data[start:end];
    None when there is none, more than one, or one of another wire type (DecodeError: not a message)."""
    found = [f for f in fields(data, start, end) if f[0] >> 3 == number]
    if len(found) != 1 or found[0][0] & 7 != 2:
        return None
    return found[0][2], found[0][3]
