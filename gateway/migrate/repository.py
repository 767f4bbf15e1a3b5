"""Triton's side of an import: one model directory per (TF model, signature), holding

    <model>/config.pbtxt             GPU: a TensorRT plan built from model.onnx by tools/build_plans.py
                                     (ONNX Runtime on the GPU where a tensor has no TensorRT type)
    <model>/configs/cpu.pbtxt        CPU (tritonserver --model-config-name=cpu: the tests, compose.cpu.yaml):
                                     the python backend running model.onnx with ONNX Runtime
    <model>/<version>/model.onnx     the converted graph
    <model>/<version>/model.py       the CPU model (onnx_cpu_model.py, copied)
    <model>/<version>/source.json    what it was converted from (digest): a rerun converts nothing new

Every file is written only when its bytes differ (``write``), so a second import changes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gateway.core import datatypes

CPU_MODEL = Path(__file__).with_name("onnx_cpu_model.py")
TENSORRT_TYPES = {"BOOL", "UINT8", "INT8", "INT32", "INT64", "FP16", "FP32", "BF16"}
PLAN_DIM_RANGE = "1,64,4096"  # the optimization profile of every non-batch -1 dimension (build_plans.py)


@dataclass(frozen=True)
class TensorConf:
    name: str
    v2: str  # "FP32"
    dims: tuple[int, ...]  # without the batch dimension when max_batch_size > 0


@dataclass(frozen=True)
class ModelConf:
    name: str
    max_batch_size: int
    inputs: tuple[TensorConf, ...]
    outputs: tuple[TensorConf, ...]
    policy: str  # Triton's version_policy body, e.g. 'specific: { versions: [ 1, 2 ] }'
    origin: str  # one comment line: where it came from

    @property
    def tensorrt(self) -> bool:
        return all(t.v2 in TENSORRT_TYPES for t in self.inputs + self.outputs)


def _tensors(kind: str, tensors: tuple[TensorConf, ...]) -> str:
    rows = [f'  {{ name: "{t.name}", data_type: {datatypes.by_v2(t.v2).config}, dims: [ {", ".join(map(str, t.dims))} ] }}'
            for t in tensors]
    return f"{kind} [\n" + ",\n".join(rows) + "\n]\n"


def gpu_config(m: ModelConf) -> str:
    head = [f"# {m.origin}",
            "# Written by `gateway import tfserving`; the CPU configuration is configs/cpu.pbtxt",
            "# (tritonserver --model-config-name=cpu)."]
    if m.tensorrt:
        head += ["# GPU: a TensorRT plan built from <version>/model.onnx by tools/build_plans.py.",
                 f'name: "{m.name}"', 'platform: "tensorrt_plan"']
    else:
        head += ["# GPU: ONNX Runtime (a tensor's type has no TensorRT equivalent, so no plan is built).",
                 f'name: "{m.name}"', 'platform: "onnxruntime_onnx"']
    body = "\n".join(head) + f"\nmax_batch_size: {m.max_batch_size}\n"
    body += _tensors("input", m.inputs) + _tensors("output", m.outputs)
    body += f"version_policy: {{ {m.policy} }}\n"
    body += "instance_group [ { kind: KIND_GPU, count: 1 } ]\n"
    if m.tensorrt:
        body += ("# TensorFlow computed in FP32: no FP16 in the plan, so answers stay TensorFlow's.\n"
                 'parameters: { key: "plan_fp16", value: { string_value: "false" } }\n'
                 f'parameters: {{ key: "plan_dim_range", value: {{ string_value: "{PLAN_DIM_RANGE}" }} }}\n')
    return body


def cpu_config(m: ModelConf) -> str:
    body = (f"# {m.origin}\n"
            "# CPU configuration (written by `gateway import tfserving`): <version>/model.onnx run with ONNX\n"
            "# Runtime inside the python backend (<version>/model.py), the backend the bundled Triton has.\n"
            f'name: "{m.name}"\nbackend: "python"\nmax_batch_size: {m.max_batch_size}\n')
    body += _tensors("input", m.inputs) + _tensors("output", m.outputs)
    body += f"version_policy: {{ {m.policy} }}\n"
    body += "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
    return body


def policy_text(kind: str, versions: list[int], num_versions: int) -> str:
    if kind == "latest":
        return f"latest: {{ num_versions: {num_versions} }}"
    if kind == "all":
        return "all: { }"
    return f"specific: {{ versions: [ {', '.join(map(str, versions))} ] }}"


def digest(paths: list[Path]) -> str:
    """sha256 over the files' relative names and bytes (a SavedModel directory's content)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def saved_model_files(version_dir: Path) -> list[Path]:
    return sorted((p for p in version_dir.rglob("*") if p.is_file()), key=lambda p: str(p.relative_to(version_dir)))


def write(path: Path, data: bytes | str, changed: list[Path]) -> None:
    """Write ``data`` unless the file already holds exactly it; record the paths written."""
    raw = data.encode() if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == raw:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(raw)
    tmp.replace(path)
    changed.append(path)
