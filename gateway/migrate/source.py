"""What TF Serving would serve: its models.config (or one base path), the version directories under
each base path, the version policy and labels, and each version's SavedModel signatures, read from
``saved_model.pb`` with the TF protos under gateway/_proto (no TensorFlow needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from gateway._proto.tensorflow.core.protobuf import saved_model_pb2
from gateway._proto.tensorflow_serving.config import model_server_config_pb2
from gateway.core import datatypes

SERVE_TAG = "serve"
METHODS = {"tensorflow/serving/predict": "predict", "tensorflow/serving/classify": "classify",
           "tensorflow/serving/regress": "regress"}


class SourceError(Exception):
    """A models.config or SavedModel the importer cannot read (the message says which and why)."""


@dataclass(frozen=True)
class Tensor:
    key: str  # the signature's alias ("x")
    name: str  # the graph tensor ("serving_default_x:0")
    dtype: str  # TF enum name ("DT_FLOAT")
    shape: tuple[int, ...] | None  # None: unknown rank; -1: unknown size

    @property
    def v2(self) -> str:
        """The KServe V2 datatype ("FP32"); KeyError for a TF type Triton has none for."""
        return datatypes.by_tf(self.dtype).v2


@dataclass(frozen=True)
class Signature:
    name: str
    method_name: str  # as written ("tensorflow/serving/predict")
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def method(self) -> str:
        """predict | classify | regress, or the method name itself when TF Serving has no API for it."""
        return METHODS.get(self.method_name, self.method_name)


@dataclass(frozen=True)
class Policy:
    kind: str  # latest | all | specific
    num_versions: int = 1  # latest
    versions: tuple[int, ...] = ()  # specific

    def select(self, on_disk: list[int]) -> list[int]:
        """The versions TF Serving serves from those on disk (ascending)."""
        if self.kind == "all":
            return sorted(on_disk)
        if self.kind == "specific":
            return sorted(v for v in on_disk if v in self.versions)
        return sorted(on_disk)[-self.num_versions:] if on_disk else []

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        if self.kind == "specific":
            return "specific " + ", ".join(map(str, self.versions))
        return "all"


@dataclass
class ModelSource:
    name: str
    base_path: Path
    policy: Policy = field(default_factory=lambda: Policy("latest"))
    labels: dict[str, int] = field(default_factory=dict)


def read_config_file(path: Path) -> list[ModelSource]:
    """A TF Serving ``--model_config_file`` (ModelServerConfig in text format); relative base
    paths are taken from the file's directory, as a user running the server from there would."""
    conf = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(path.read_text(), conf, allow_unknown_field=True)
    except (OSError, text_format.ParseError) as e:
        raise SourceError(f"{path}: not a ModelServerConfig text proto: {e}") from None
    if conf.WhichOneof("config") != "model_config_list":
        raise SourceError(f"{path}: only model_config_list is supported (custom_model_config names no SavedModels)")
    out = []
    for mc in conf.model_config_list.config:
        if mc.model_platform not in ("", "tensorflow"):
            raise SourceError(f"{path}: model '{mc.name}' has model_platform '{mc.model_platform}', not tensorflow")
        base = Path(mc.base_path)
        out.append(ModelSource(mc.name, base if base.is_absolute() else path.parent / base,
                               _policy(mc.model_version_policy), dict(sorted(mc.version_labels.items()))))
    return out


def _policy(p) -> Policy:
    which = p.WhichOneof("policy_choice")
    if which == "all":
        return Policy("all")
    if which == "specific":
        return Policy("specific", versions=tuple(sorted(p.specific.versions)))
    if which == "latest":
        return Policy("latest", num_versions=p.latest.num_versions or 1)
    return Policy("latest")


def versions_on_disk(base_path: Path) -> list[int]:
    """Version directories as TF Serving's file system source finds them: names that are
    non-negative integers (other entries are ignored)."""
    if not base_path.is_dir():
        raise SourceError(f"base path {base_path} is not a directory")
    return sorted(int(p.name) for p in base_path.iterdir() if p.is_dir() and p.name.isdigit())


def read_signatures(version_dir: Path) -> dict[str, Signature]:
    """The signatures of the ``serve``-tagged MetaGraph in ``version_dir/saved_model.pb``."""
    pb = version_dir / "saved_model.pb"
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(pb.read_bytes())
    except OSError as e:
        raise SourceError(f"{pb}: {e.strerror}") from None
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise SourceError(f"{pb}: not a SavedModel: {e}") from None
    graphs = [mg for mg in sm.meta_graphs if SERVE_TAG in mg.meta_info_def.tags]
    if not graphs:
        raise SourceError(f"{pb}: no MetaGraph tagged '{SERVE_TAG}' (TF Serving loads only that one)")
    out = {}
    for name in sorted(graphs[0].signature_def):
        sd = graphs[0].signature_def[name]
        if name.startswith("__"):  # __saved_model_init_op and the like: not signatures a client calls
            continue
        out[name] = Signature(name, sd.method_name, _tensors(sd.inputs), _tensors(sd.outputs))
    return out


def _tensors(infos) -> tuple[Tensor, ...]:
    out = []
    for key in sorted(infos):
        info = infos[key]
        shape = None if info.tensor_shape.unknown_rank else tuple(d.size for d in info.tensor_shape.dim)
        dtype = datatypes.by_tf(info.dtype).tf_name if info.dtype in _KNOWN_TF else f"DT_ENUM_{info.dtype}"
        out.append(Tensor(key, info.name, dtype, shape))
    return tuple(out)


_KNOWN_TF = {d.tf for d in datatypes.TABLE if d.tf is not None}
