"""Write the ONNX graphs the GPU host builds TensorRT plans from (tools/build_plans.py):

  saved_model_half_plus_three/123/model.onnx   y = 0.5 * x + 3, x FP32 [-1]
  multi_tensor_scale/1/model.onnx              scaled = signal * float(count), batch dimension first

The CPU configurations compute the same functions in the python backend. Run with `make onnx` (its
own venv: the onnx package needs numpy>=2 and protobuf 7, which the gateway's environment does not
pin). The output is deterministic, so a rerun leaves the committed files unchanged. Each graph is
then run with onnxruntime (CPU) and compared, bit for bit, with what the CPU model.py computes.
"""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[1] / "model_repository"


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gateway")
    model.ir_version = 8  # readable by the TensorRT 10.x of Triton 24.10
    onnx.checker.check_model(model)
    return model


def half_plus_three() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    three = helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])
    nodes = [helper.make_node("Mul", ["x", "half"], ["hx"]), helper.make_node("Add", ["hx", "three"], ["y"])]
    return _model(helper.make_graph(nodes, "half_plus_three", [x], [y], initializer=[half, three]))


def multi_tensor_scale() -> onnx.ModelProto:
    """max_batch_size 8 in config.pbtxt: the batch dimension is the first one of every tensor."""
    signal = helper.make_tensor_value_info("signal", TensorProto.FLOAT, ["batch", 4])
    count = helper.make_tensor_value_info("count", TensorProto.INT32, ["batch", 1])
    scaled = helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["batch", 4])
    nodes = [
        helper.make_node("Cast", ["count"], ["count_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["signal", "count_f"], ["scaled"]),
    ]
    return _model(helper.make_graph(nodes, "multi_tensor_scale", [signal, count], [scaled]))


GRAPHS = {
    REPO / "saved_model_half_plus_three" / "123" / "model.onnx": half_plus_three,
    REPO / "multi_tensor_scale" / "1" / "model.onnx": multi_tensor_scale,
}


def check(path: Path) -> None:
    """The graph answers exactly what the python-backend twin answers (same numpy expressions)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    if path.parent.parent.name == "saved_model_half_plus_three":
        x = np.concatenate([[1.0, 2.0, 5.0], rng.normal(0, 1e4, 997)]).astype(np.float32)
        (y,) = session.run(None, {"x": x})
        expected = (np.float32(0.5) * x + np.float32(3.0)).astype(np.float32)
        assert y.dtype == np.float32 and np.array_equal(y, expected)
    else:
        signal = rng.normal(0, 100, (8, 4)).astype(np.float32)
        count = rng.integers(-1000, 1000, (8, 1)).astype(np.int32)
        (scaled,) = session.run(None, {"signal": signal, "count": count})
        expected = (signal.astype(np.float32) * count.astype(np.float32)).astype(np.float32)
        assert scaled.dtype == np.float32 and np.array_equal(scaled, expected)


if __name__ == "__main__":
    for out, build in GRAPHS.items():
        onnx.save(build(), out)
        check(out)
        print(f"wrote {out} (checked with onnxruntime {ort.__version__})")
