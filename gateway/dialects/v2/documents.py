"""Triton's JSON documents (server and model metadata, model config, statistics, repository index)
written from the KServe V2 gRPC answers, in the layout Triton's core serializes them for HTTP
(``TRITONSERVER_MessageSerializeToJson``): compact, keys in protobuf declaration order, 64-bit
integers as numbers, maps in Triton's order, unset messages left out, every scalar written but those
Triton 2.51's model_config.proto does not have yet (``_NEWER``, at their defaults).
"""

from __future__ import annotations

import numpy as np
from google.protobuf.descriptor import FieldDescriptor as F

from . import rjson

_INTS = {F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_SINT32, F.TYPE_SINT64,
         F.TYPE_FIXED32, F.TYPE_FIXED64, F.TYPE_SFIXED32, F.TYPE_SFIXED64}
# statistics list response_stats before batch_stats (the core's own order)
_ORDER = {"inference.ModelStatistics": ("name", "version", "last_inference", "inference_count", "execution_count",
                                        "inference_stats", "response_stats", "batch_stats", "memory_usage")}


# scalars of tritonclient's newer model_config.proto that Triton 2.51 does not write
_NEWER = frozenset({"max_inflight_requests"})


def _scalar(field, value) -> bytes:
    t = field.type
    if t in _INTS:
        return str(value).encode()
    if t == F.TYPE_BOOL:
        return b"true" if value else b"false"
    if t in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        # a float field: its shortest float32 text, read back as a double (as the core does)
        return rjson.double(float(str(np.float32(value))) if t == F.TYPE_FLOAT else value).encode()
    if t == F.TYPE_ENUM:
        desc = field.enum_type.values_by_number.get(value)
        return rjson.string(desc.name if desc is not None else str(value))
    if t == F.TYPE_BYTES:
        return rjson.string(value)
    return rjson.string(value)


def _value(field, value) -> bytes:
    return message(value) if field.type == F.TYPE_MESSAGE else _scalar(field, value)


def message(msg) -> bytes:
    desc = msg.DESCRIPTOR
    names = _ORDER.get(desc.full_name)
    fields = [desc.fields_by_name[n] for n in names] if names else desc.fields
    parts = []
    for f in fields:
        value = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            kf, vf = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            items = b",".join(rjson.string(str(k) if kf.type != F.TYPE_BOOL else str(k).lower()) + b":" +
                              _value(vf, value[k]) for k in value)
            text = b"{" + items + b"}"
        elif f.is_repeated:
            text = b"[" + b",".join(_value(f, v) for v in value) + b"]"
        elif f.type == F.TYPE_MESSAGE or f.containing_oneof is not None:
            if not msg.HasField(f.name):
                continue
            text = _value(f, value)
        else:
            if f.name in _NEWER and not value:
                continue
            text = _scalar(f, value)
        parts.append(rjson.string(f.name) + b":" + text)
    return b"{" + b",".join(parts) + b"}"


def server_metadata(resp) -> bytes:
    return (b'{"name":' + rjson.string(resp.name) + b',"version":' + rjson.string(resp.version) +
            b',"extensions":' + rjson.strings(resp.extensions) + b"}")


def _tensor(t) -> bytes:
    return (b'{"name":' + rjson.string(t.name) + b',"datatype":' + rjson.string(t.datatype) + b',"shape":[' +
            ",".join(map(str, t.shape)).encode() + b"]}")


def model_metadata(resp) -> bytes:
    return (b'{"name":' + rjson.string(resp.name) + b',"versions":' + rjson.strings(resp.versions) +
            b',"platform":' + rjson.string(resp.platform) + b',"inputs":[' + b",".join(map(_tensor, resp.inputs)) +
            b'],"outputs":[' + b",".join(map(_tensor, resp.outputs)) + b"]}")


def repository_index(models) -> bytes:
    rows = []
    for m in models:
        row = b'{"name":' + rjson.string(m.name)
        if m.version:
            row += b',"version":' + rjson.string(m.version)
        if m.state:
            row += b',"state":' + rjson.string(m.state)
        if m.reason:
            row += b',"reason":' + rjson.string(m.reason)
        rows.append(row + b"}")
    return b"[" + b",".join(rows) + b"]"


def statistics(resp) -> bytes:
    return b'{"model_stats":[' + b",".join(message(m) for m in resp.model_stats) + b"]}"


def shared_memory_status(resp, system: bool) -> bytes:
    """``SharedMemoryManager::GetStatus``: the regions in name order (Triton's std::map), each
    ``{"name","key","offset","byte_size"}`` (system) or ``{"name","device_id","byte_size"}`` (CUDA)."""
    rows = []
    for name in sorted(resp.regions):
        r = resp.regions[name]
        row = b'{"name":' + rjson.string(r.name)
        if system:
            row += b',"key":' + rjson.string(r.key) + b',"offset":%d' % r.offset
        else:
            row += b',"device_id":%d' % r.device_id
        rows.append(row + b',"byte_size":%d}' % r.byte_size)
    return b"[" + b",".join(rows) + b"]"
