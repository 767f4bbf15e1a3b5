"""tools/build_plans.py, the plan builder run in the TensorRT container: everything but trtexec.

Its config reader is checked against Triton's own ModelConfig protobuf; the repository walk,
profiles, FP16 choice, trtexec command lines and skip logic run on the real model repository
and on small synthetic ones. (Building a plan needs a GPU and TensorRT: not here.)
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_plans", ROOT / "tools" / "build_plans.py")
bp = sys.modules["build_plans"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bp)

ENV = bp.BuildEnv(gpu="NVIDIA L4", compute_capability="8.9", tensorrt="10.5.0.18")
CONFIGS = sorted((ROOT / "model_repository").glob("*/config.pbtxt")) + sorted(
    (ROOT / "model_repository").glob("*/configs/*.pbtxt"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "model_repository")))
def test_the_stdlib_reader_agrees_with_tritons_protobuf(path):
    text = path.read_text()
    proto = text_format.Parse(text, model_config_pb2.ModelConfig())
    ours = bp.parse_pbtxt(text)
    assert bp._one(ours, "name") == proto.name
    assert bp._one(ours, "platform", "") == proto.platform and bp._one(ours, "backend", "") == proto.backend
    assert int(bp._one(ours, "max_batch_size", 0)) == proto.max_batch_size
    for mine, theirs in zip(ours.get("input", []), proto.input, strict=True):
        assert bp._one(mine, "name") == theirs.name and mine.get("dims") == list(theirs.dims)
        assert bp._one(mine, "data_type") == model_config_pb2.DataType.Name(theirs.data_type)
    assert bp.parameters(ours) == {k: v.string_value for k, v in proto.parameters.items()}
    assert len(ours.get("output", [])) == len(proto.output)


def test_the_reader_handles_text_format_variants():
    text = """
    name: 'm'  # a comment
    max_batch_size: 4
    input [ { name: "a" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape: { shape: [ -1 ] } } ]
    input { name: "b", data_type: TYPE_INT32, dims: 2 }
    parameters < key: "plan_dim_range" value: { string_value: "1,2," "3" } >
    optimization { cuda { graphs: true } }
    """
    proto = text_format.Parse(text, model_config_pb2.ModelConfig())
    ours = bp.parse_pbtxt(text)
    assert [bp._one(i, "name") for i in ours["input"]] == [t.name for t in proto.input]
    assert ours["input"][1]["dims"] == [2]
    assert bp.parameters(ours) == {"plan_dim_range": "1,2,3"}
    assert ours["optimization"][0]["cuda"][0]["graphs"] == [True]
    # reshape wins: the engine sees the reshaped tensor
    assert bp.profile(ours, "m") == {"a": ([1, 1], [4, 2], [4, 3]), "b": ([1, 2], [4, 2], [4, 2])}
    with pytest.raises(ValueError):
        bp.parse_pbtxt("input [ { name: 'a' ")


def test_the_repository_walk_finds_every_onnx_graph_of_a_tensorrt_model():
    jobs = {j.model: j for j in bp.find_jobs(ROOT / "model_repository")}
    assert set(jobs) == {"saved_model_half_plus_three", "multi_tensor_scale"}  # more than one plan
    onnx_files = {p.parent.parent.name for p in (ROOT / "model_repository").glob("*/*/model.onnx")}
    assert onnx_files == set(jobs)
    half = jobs["saved_model_half_plus_three"]
    assert half.version == "123" and half.plan.name == "model.plan" and half.onnx.name == "model.onnx"
    assert half.shapes == {"x": ([1], [1024], [1048576])}  # max_batch_size 0: plan_dim_range
    scale = jobs["multi_tensor_scale"]
    assert scale.shapes == {"signal": ([1, 4], [8, 4], [8, 4]), "count": ([1, 1], [8, 1], [8, 1])}  # batch 1..8
    assert not half.fp16 and not scale.fp16  # both answer exactly: plan_fp16 "false"


def test_the_trtexec_command_line():
    jobs = {j.model: j for j in bp.find_jobs(ROOT / "model_repository")}
    cmd = bp.trtexec_command(jobs["multi_tensor_scale"], "/usr/src/tensorrt/bin/trtexec")
    onnx = jobs["multi_tensor_scale"].onnx
    assert cmd == [
        "/usr/src/tensorrt/bin/trtexec", f"--onnx={onnx}", f"--saveEngine={onnx.parent / 'model.plan'}",
        "--skipInference", "--minShapes=signal:1x4,count:1x1", "--optShapes=signal:8x4,count:8x1",
        "--maxShapes=signal:8x4,count:8x1",
    ]
    half = bp.trtexec_command(jobs["saved_model_half_plus_three"])
    assert half[-3:] == ["--minShapes=x:1", "--optShapes=x:1024", "--maxShapes=x:1048576"]


def _synthetic(tmp_path: Path, config: str, versions=("1",)) -> Path:
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text(config)
    for v in versions:
        (repo / "m" / v).mkdir()
        (repo / "m" / v / "model.onnx").write_bytes(b"onnx " + v.encode())
    return repo


def test_fp16_unless_the_model_forbids_it_and_per_input_ranges(tmp_path):
    config = """name: "m" platform: "tensorrt_plan" max_batch_size: 0 default_model_filename: "m.plan"
      input [ { name: "ids", data_type: TYPE_INT32, dims: [ -1, -1 ] }, { name: "mask", data_type: TYPE_FP32, dims: [ 2, -1 ] } ]
      parameters { key: "plan_dim_range" value { string_value: "1,64,512" } }
      parameters { key: "plan_dim_range.ids" value { string_value: "1,8,16" } }"""
    repo = _synthetic(tmp_path, config, versions=("2", "10"))
    jobs = bp.find_jobs(repo)
    assert [j.version for j in jobs] == ["2", "10"] and jobs[0].plan.name == "m.plan"
    assert jobs[0].fp16 and bp.trtexec_command(jobs[0])[-1] == "--fp16"
    assert jobs[0].shapes == {"ids": ([1, 1], [8, 8], [16, 16]), "mask": ([2, 1], [2, 64], [2, 512])}
    assert "--minShapes=ids:1x1,mask:2x1" in bp.trtexec_command(jobs[0])


def test_a_dynamic_dimension_without_a_range_is_an_error(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" platform: "tensorrt_plan" input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]')
    with pytest.raises(bp.PlanConfigError, match="plan_dim_range"):
        bp.find_jobs(repo)
    repo = _synthetic(tmp_path / "b", 'name: "m" platform: "tensorrt_plan" input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]'
                      ' parameters { key: "plan_dim_range" value { string_value: "8,4,16" } }')
    with pytest.raises(bp.PlanConfigError, match="min <= opt <= max"):
        bp.find_jobs(repo)


def test_a_static_graph_gets_no_shape_arguments(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" platform: "tensorrt_plan" max_batch_size: 0 '
                      'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 3 ] } ] '
                      'parameters { key: "plan_fp16" value { string_value: "False" } }')
    (job,) = bp.find_jobs(repo)
    assert job.shapes == {"x": ([2, 3], [2, 3], [2, 3])}
    assert bp.trtexec_command(job) == ["trtexec", f"--onnx={job.onnx}", f"--saveEngine={job.plan}", "--skipInference"]


def test_python_and_ensemble_models_and_missing_onnx_are_not_built(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" backend: "python" max_batch_size: 8')
    assert bp.find_jobs(repo) == []
    repo = _synthetic(tmp_path / "b", 'name: "m" backend: "tensorrt" max_batch_size: 8', versions=())
    (repo / "m" / "1").mkdir()
    assert bp.find_jobs(repo) == []  # a version directory without model.onnx (a plan shipped as is)


def test_skip_only_when_built_for_this_gpu_tensorrt_and_graph(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" platform: "tensorrt_plan" max_batch_size: 4 '
                      'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]')
    (job,) = bp.find_jobs(repo)
    calls = []

    def fake_trtexec(cmd, check):
        calls.append(cmd)
        Path(cmd[2].removeprefix("--saveEngine=")).write_bytes(b"engine")

    assert not bp.up_to_date(job, ENV)
    bp.build(job, ENV, "trtexec", run=fake_trtexec)
    assert calls[0][2] == f"--saveEngine={job.plan}.partial" and job.plan.read_bytes() == b"engine"
    assert not job.plan.with_name("model.plan.partial").exists()
    record = json.loads(job.record.read_text())
    assert record["gpu"] == "NVIDIA L4" and record["compute_capability"] == "8.9" and record["tensorrt"] == "10.5.0.18"
    assert bp.up_to_date(job, ENV)
    # another GPU, another TensorRT, a changed graph, a lost record: rebuild
    assert not bp.up_to_date(job, bp.BuildEnv("NVIDIA H100 80GB HBM3", "9.0", "10.5.0.18"))
    assert not bp.up_to_date(job, bp.BuildEnv("NVIDIA L4", "8.9", "10.6.0.26"))
    job.onnx.write_bytes(b"another graph")
    assert not bp.up_to_date(job, ENV)
    bp.build(job, ENV, "trtexec", run=fake_trtexec)
    assert bp.up_to_date(job, ENV)
    job.record.write_text("{broken")
    assert not bp.up_to_date(job, ENV)


def test_a_failed_build_leaves_the_previous_plan_and_record(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" platform: "tensorrt_plan" max_batch_size: 4 '
                      'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]')
    (job,) = bp.find_jobs(repo)
    job.plan.write_bytes(b"old")

    def failing(cmd, check):
        raise bp.subprocess.CalledProcessError(1, cmd)

    with pytest.raises(bp.subprocess.CalledProcessError):
        bp.build(job, ENV, "trtexec", run=failing)
    assert job.plan.read_bytes() == b"old" and not job.record.exists()


def test_dry_run_prints_one_command_per_plan(capsys):
    assert bp.main([str(ROOT / "model_repository"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("trtexec --onnx=") for line in lines)


def test_the_reader_matches_protobuf_json_for_a_whole_config():
    """Spot check beyond interfaces: the ensemble's steps read the same both ways."""
    path = ROOT / "model_repository" / "multi_tensor" / "config.pbtxt"
    proto = json_format.MessageToDict(text_format.Parse(path.read_text(), model_config_pb2.ModelConfig()))
    ours = bp.parse_pbtxt(path.read_text())
    steps = ours["ensemble_scheduling"][0]["step"]
    assert [bp._one(s, "model_name") for s in steps] == [s["modelName"] for s in proto["ensembleScheduling"]["step"]]
    assert {bp._one(m, "key"): bp._one(m, "value") for m in steps[1]["output_map"]} == \
        proto["ensembleScheduling"]["step"][1]["outputMap"]


def test_wait_returns_once_every_plan_and_record_is_there(tmp_path):
    repo = _synthetic(tmp_path, 'name: "m" platform: "tensorrt_plan" max_batch_size: 4 '
                      'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]', versions=("1", "2"))
    jobs = bp.find_jobs(repo)
    naps = []

    def sleep(seconds):  # the Job finishes one plan per nap
        naps.append(seconds)
        job = jobs[len(naps) - 1]
        job.plan.write_bytes(b"engine")
        job.record.write_text("{}")

    bp.wait(repo, interval=5, sleep=sleep)
    assert naps == [5, 5] and bp.missing_plans(jobs) == []
    bp.wait(repo, sleep=lambda _s: pytest.fail("nothing to wait for"))
