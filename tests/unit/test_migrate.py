"""gateway/migrate without TensorFlow: reading TF Serving's models.config and saved_model.pb, the
plan of what is converted or refused, the YAML merge, and `gateway import grps`. The conversion and
TensorFlow's answers are tests/migrate (make test-migrate)."""

from __future__ import annotations

import yaml

from gateway import cli
from gateway._proto.tensorflow.core.framework import tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from gateway.migrate import source, tfserving, yamlfile

CONFIG = """
model_config_list {
  config {
    name: "shop"
    base_path: "models/shop"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 2 versions: 1 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 3 }
  }
  config { name: "plain" base_path: "/abs/plain" }
}
"""


def _saved_model(path, sigs: dict) -> None:
    """A saved_model.pb as TensorFlow lays it out (tags, signature_def), from the TF protos."""
    sm = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    mg = sm.meta_graphs.add()
    mg.meta_info_def.tags.append("serve")
    for name, (method, inputs, outputs) in sigs.items():
        sd = mg.signature_def[name]
        sd.method_name = method
        for target, tensors in ((sd.inputs, inputs), (sd.outputs, outputs)):
            for key, (dtype, shape) in tensors.items():
                info = meta_graph_pb2.TensorInfo(name=f"{name}_{key}:0", dtype=dtype)
                if shape is None:
                    info.tensor_shape.unknown_rank = True
                else:
                    info.tensor_shape.dim.extend(tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in shape)
                target[key].CopyFrom(info)
    mg.signature_def["__saved_model_init_op"].outputs["__saved_model_init_op"].name = "NoOp"
    path.mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())


PREDICT = "tensorflow/serving/predict"
SIGS = {
    "serving_default": (PREDICT, {"x": (types_pb2.DT_FLOAT, [-1, 3])}, {"y": (types_pb2.DT_FLOAT, [-1, 2])}),
    "shapeless": (PREDICT, {"a": (types_pb2.DT_FLOAT, None)}, {"b": (types_pb2.DT_FLOAT, None)}),
    "tensorflow/serving/classify": ("tensorflow/serving/classify", {"inputs": (types_pb2.DT_STRING, [-1])},
                                    {"scores": (types_pb2.DT_FLOAT, [-1, 2])}),
    "regress_floats": ("tensorflow/serving/regress", {"x": (types_pb2.DT_FLOAT, [-1, 1])},
                       {"outputs": (types_pb2.DT_FLOAT, [-1, 1])}),
    "custom": ("my/method", {"x": (types_pb2.DT_FLOAT, [-1])}, {"y": (types_pb2.DT_FLOAT, [-1])}),
}


def test_models_config_policy_labels_and_relative_base_path(tmp_path):
    (tmp_path / "models.config").write_text(CONFIG)
    shop, plain = source.read_config_file(tmp_path / "models.config")
    assert (shop.name, shop.base_path, shop.labels) == ("shop", tmp_path / "models/shop", {"canary": 3, "stable": 1})
    assert shop.policy == source.Policy("specific", versions=(1, 2))
    assert shop.policy.select([1, 2, 3]) == [1, 2]
    assert plain.policy == source.Policy("latest", num_versions=1)
    assert plain.policy.select([3, 7, 5]) == [7]
    assert source.Policy("all").select([4, 1]) == [1, 4]


def test_saved_model_signatures(tmp_path):
    _saved_model(tmp_path / "1", SIGS)
    sigs = source.read_signatures(tmp_path / "1")
    assert sorted(sigs) == sorted(SIGS)  # __saved_model_init_op is not a signature
    x = sigs["serving_default"].inputs[0]
    assert (x.key, x.name, x.dtype, x.shape, x.v2) == ("x", "serving_default_x:0", "DT_FLOAT", (-1, 3), "FP32")
    assert sigs["shapeless"].inputs[0].shape is None


def test_plan_converts_what_it_can_and_says_why_not_for_the_rest(tmp_path):
    (tmp_path / "models.config").write_text(CONFIG)
    for v in (1, 2, 3):
        _saved_model(tmp_path / "models" / "shop" / str(v), SIGS)
    result = tfserving.Result()
    models, sigs = tfserving.plan(source.read_config_file(tmp_path / "models.config"), result)
    (shop, served, labels), = models  # 'plain' has no base path here
    assert served == [1, 2] and labels == {"stable": 1}
    assert result.refused == [
        f"model shop: label 'canary' names version 3, which the policy (specific 1, 2) does not serve "
        f"from {tmp_path / 'models/shop'}",
        "model plain: base path /abs/plain is not a directory"]
    by_name = {s.sig.name: s for s in sigs}
    assert (by_name["serving_default"].mode, by_name["serving_default"].triton) == ("predict", "shop")
    assert (by_name["tensorflow/serving/classify"].mode,
            by_name["tensorflow/serving/classify"].triton) == ("example", "shop__tensorflow_serving_classify")
    assert "no known rank" in by_name["shapeless"].refused
    assert by_name["regress_floats"].refused.startswith("its regress input is not one DT_STRING tensor")
    assert by_name["custom"].refused.startswith("its method 'my/method' is none of predict, classify, regress")


def test_yaml_merge_keeps_comments_and_is_idempotent(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text("# top\nlog_level: INFO  # why\ndialects:\n  tfserving:\n    models:\n      other: {triton: o}\n")
    entry = {"triton": "shop", "version_labels": {"stable": 1}, "derived": False,
             "signatures": {"serving_default": {"method": "predict", "inputs": {"x": "x"}, "outputs": {"y": "y"}}}}
    assert yamlfile.merge(path, "tfserving", {"shop": entry}) == ["shop"]
    text = path.read_text()
    assert text.startswith("# top\nlog_level: INFO  # why\n")
    assert "      serving_default: {method: predict, inputs: {x: x}, outputs: {y: y}}\n" in text
    models = yaml.safe_load(text)["dialects"]["tfserving"]["models"]
    assert models == {"other": {"triton": "o"}, "shop": entry}
    mtime = path.stat().st_mtime_ns
    assert yamlfile.merge(path, "tfserving", {"shop": entry}) == []
    assert path.stat().st_mtime_ns == mtime and path.read_text() == text


INFERENCE_YML = """
models:
  - name: resnet
    version: 1.0.0
    device: cuda
    inferer_type: torch
    inferer_path: ./data/model/resnet.pt
    converter_type: torch
    batching: {type: dynamic, max_batch_size: 16, batch_timeout_us: 1000}
  - name: bert
    version: 2.1.0
    inferer_type: tensorflow
dag:
  type: sequential
  name: your_dag
  nodes:
    - name: node-1
      type: model
      model: resnet-1.0.0
"""


def test_import_grps(tmp_path, capsys):
    (tmp_path / "inference.yml").write_text(INFERENCE_YML)
    cfg = tmp_path / "gateway.yaml"
    argv = ["import", "grps", "--inference-yml", str(tmp_path / "inference.yml"), "--config", str(cfg), "--no-check"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "resnet-1.0.0: over Triton model 'resnet' (latest version); its torch inferer's weights must be in " \
           "model_repository/resnet/ for a Triton backend to load" in out
    grps = yaml.safe_load(cfg.read_text())["dialects"]["grps"]
    assert grps == {"models": {"resnet-1.0.0": {"triton_model": "resnet"}, "bert-2.1.0": {"triton_model": "bert"}},
                    "default_model": "resnet-1.0.0"}
    from gateway import config

    settings = config.load(cfg, env={})  # what it wrote is a gateway config the gateway reads
    assert settings.dialect("grps").models["bert-2.1.0"].triton_model == "bert"
    text = cfg.read_text()
    assert cli.main(argv) == 0
    assert cfg.read_text() == text and "already up to date" in capsys.readouterr().out


def _plan_builder():
    import importlib.util
    import sys

    from tests.support import ROOT

    spec = importlib.util.spec_from_file_location("build_plans", ROOT / "tools" / "build_plans.py")
    module = sys.modules["build_plans"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triton_configs_parse_and_feed_the_plan_builder(tmp_path):
    """The configs the import writes are Triton's ModelConfig text, and tools/build_plans.py derives
    the TensorRT build from the GPU one (batch 1..max_batch_size, other dims from plan_dim_range)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from gateway.migrate import repository
    from gateway.migrate.repository import ModelConf, TensorConf

    policy = repository.policy_text("specific", [1, 2], 1)
    batched = ModelConf("shop", 64, (TensorConf("x", "FP32", (3,)), TensorConf("n", "INT64", (-1,))),
                        (TensorConf("y", "FP32", (2,)),), policy, "test")
    text = ModelConf("shop__text", 0, (TensorConf("fruit", "BYTES", (-1,)),), (TensorConf("id", "INT64", (-1,)),),
                     repository.policy_text("latest", [], 2), "test")
    for conf, platform in ((batched, "tensorrt_plan"), (text, "onnxruntime_onnx")):
        gpu = text_format.Parse(repository.gpu_config(conf), model_config_pb2.ModelConfig())
        cpu = text_format.Parse(repository.cpu_config(conf), model_config_pb2.ModelConfig())
        assert (gpu.platform, cpu.backend, gpu.max_batch_size, cpu.max_batch_size) == (
            platform, "python", conf.max_batch_size, conf.max_batch_size)
        assert [tuple(i.dims) for i in gpu.input] == [tuple(i.dims) for i in cpu.input] == [t.dims for t in conf.inputs]
        (tmp_path / conf.name / "1").mkdir(parents=True)
        (tmp_path / conf.name / "1" / "model.onnx").write_bytes(b"onnx")
        (tmp_path / conf.name / "config.pbtxt").write_text(repository.gpu_config(conf))
    assert text_format.Parse(repository.gpu_config(batched), model_config_pb2.ModelConfig()).version_policy.specific.versions == [1, 2]
    (job,) = _plan_builder().find_jobs(tmp_path)  # the string model has no plan
    assert (job.model, job.version, job.fp16) == ("shop", "1", False)
    assert job.shapes == {"x": ([1, 3], [64, 3], [64, 3]), "n": ([1, 1], [64, 64], [64, 4096])}


def test_tensorflow_python_is_the_venvs_own(tmp_path, monkeypatch):
    """.venv-tf/bin/python is a symlink to the base interpreter: the path must stay inside the venv."""
    import sys

    (tmp_path / ".venv-tf" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-tf" / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_TF_PYTHON", raising=False)
    assert tfserving.default_tf_python() == str(tmp_path / ".venv-tf" / "bin" / "python")
    monkeypatch.setenv("GATEWAY_TF_PYTHON", "/opt/tf/bin/python")
    assert tfserving.default_tf_python() == "/opt/tf/bin/python"
