"""Neutral values ⇄ KServe V2 protobufs beside inference: parameters, model metadata, config and
the repository index. ModelInfer's requests and answers are gateway/upstream/wire.py's.
"""

from __future__ import annotations

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import ModelIndexEntry, ModelMetadata, Params, TensorSpec


def set_params(target, params: Params) -> None:
    """Write a plain dict into a protobuf map<string, InferParameter>."""
    for key, value in params.items():
        p = target[key]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, int):
            p.int64_param = value
        elif isinstance(value, float):
            p.double_param = value
        elif isinstance(value, str):
            p.string_param = value
        else:
            raise GatewayError(ErrorKind.INVALID_ARGUMENT, f"parameter '{key}' has unsupported type")


def get_params(source) -> Params:
    if not source:
        return {}
    out: Params = {}
    for key in source:  # by key: the map's items() is collections.abc's, a Python generator (upb)
        p = source[key]
        which = p.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(p, which)
    return out



def _spec(t, optional: bool = False) -> TensorSpec:
    return TensorSpec(t.name, t.datatype, tuple(int(d) for d in t.shape), optional)


def decode_metadata(
    meta: service_pb2.ModelMetadataResponse, config: model_config_pb2.ModelConfig | None
) -> ModelMetadata:
    optional = {i.name for i in config.input if i.optional} if config is not None else set()
    return ModelMetadata(
        name=meta.name,
        versions=tuple(meta.versions),
        platform=meta.platform,
        inputs=tuple(_spec(t, t.name in optional) for t in meta.inputs),
        outputs=tuple(_spec(t) for t in meta.outputs),
        max_batch_size=config.max_batch_size if config is not None else 0,
        decoupled=bool(config.model_transaction_policy.decoupled) if config is not None else False,
    )


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict:
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def decode_index(resp: service_pb2.RepositoryIndexResponse) -> list[ModelIndexEntry]:
    return [ModelIndexEntry(m.name, m.version, m.state, m.reason) for m in resp.models]
