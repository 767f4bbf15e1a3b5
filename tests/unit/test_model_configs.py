"""Every model declares the same interface in its GPU (default) and CPU configuration.

Both are parsed with Triton's own ModelConfig protobuf (tritonclient ships model_config_pb2), so a
typo or an unknown field fails here, not at Triton start-up on a GPU host.
"""

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "model_repository"
MODELS = sorted(p.name for p in REPO.iterdir() if p.is_dir())


def _parse(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _configs(model: str) -> tuple[model_config_pb2.ModelConfig, model_config_pb2.ModelConfig]:
    """(GPU, CPU): the default config.pbtxt and configs/cpu.pbtxt (the default where there is none,
    as tritonserver --model-config-name=cpu does)."""
    gpu = _parse(REPO / model / "config.pbtxt")
    cpu_path = REPO / model / "configs" / "cpu.pbtxt"
    return gpu, (_parse(cpu_path) if cpu_path.exists() else gpu)


def _interface(cfg: model_config_pb2.ModelConfig) -> dict:
    def tensor(t, fields):
        return {f: text_format.MessageToString(getattr(t, f), as_one_line=True) if f == "reshape"
                else list(getattr(t, f)) if f == "dims" else getattr(t, f) for f in fields}

    return {
        "name": cfg.name,
        "max_batch_size": cfg.max_batch_size,
        "decoupled": cfg.model_transaction_policy.decoupled,
        "inputs": [tensor(t, ("name", "data_type", "dims", "optional", "format", "reshape", "is_shape_tensor"))
                   for t in cfg.input],
        "outputs": [tensor(t, ("name", "data_type", "dims", "reshape", "is_shape_tensor")) for t in cfg.output],
        "versions": list(cfg.version_policy.specific.versions),
    }


def test_the_repository_holds_the_documented_models():
    assert {"saved_model_half_plus_three", "tiny_llm", "grps_echo", "multi_tensor"} <= set(MODELS)


@pytest.mark.parametrize("model", MODELS)
def test_cpu_and_gpu_configs_declare_the_same_interface(model):
    gpu, cpu = _configs(model)
    assert gpu.name == model
    assert _interface(cpu) == _interface(gpu)
    assert all(g.kind != model_config_pb2.ModelInstanceGroup.KIND_GPU for g in cpu.instance_group)


@pytest.mark.parametrize("model", MODELS)
def test_tensorrt_models_ship_an_onnx_graph_and_a_cpu_twin(model):
    gpu, cpu = _configs(model)
    if gpu.platform != "tensorrt_plan":
        return
    assert cpu is not gpu and cpu.backend == "python", f"{model}: no CPU configuration for the TensorRT plan"
    versions = [v for v in (REPO / model).iterdir() if v.is_dir() and v.name.isdigit()]
    assert versions and all((v / "model.onnx").exists() and (v / "model.py").exists() for v in versions)
    # TensorRT has no string or FP64 tensors: such a model needs an ensemble around the plan
    unsupported = {model_config_pb2.TYPE_STRING, model_config_pb2.TYPE_FP64}
    assert all(t.data_type not in unsupported for t in [*gpu.input, *gpu.output])


@pytest.mark.parametrize("model", MODELS)
def test_ensemble_steps_wire_existing_tensors_of_the_same_type(model):
    """Each step's input_map/output_map names tensors its model declares, with matching dtypes."""
    for which in _configs(model):
        if which.platform != "ensemble":
            continue
        available = {t.name: t.data_type for t in which.input}
        produced = {}
        for step in which.ensemble_scheduling.step:
            step_gpu, step_cpu = _configs(step.model_name)
            for sub in (step_gpu, step_cpu):
                inputs = {t.name: t.data_type for t in sub.input}
                outputs = {t.name: t.data_type for t in sub.output}
                assert sub.max_batch_size == which.max_batch_size
                for key, value in step.input_map.items():
                    assert inputs[key] == available.get(value, produced.get(value)), (step.model_name, key)
                for key, value in step.output_map.items():
                    produced[value] = outputs[key]
        assert produced == {t.name: t.data_type for t in which.output}
