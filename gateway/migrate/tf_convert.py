"""One SavedModel signature -> one ONNX graph, in TensorFlow's own environment (.venv-tf, make
migrate-env): ``gateway import tfserving`` runs this file with that environment's python, one
process per SavedModel version, because TensorFlow's protobuf and numpy pins are not the gateway's.
It imports nothing from the gateway.

    python tf_convert.py JOB.json     JOB: {"saved_model": DIR, "opset": 17,
                                             "signatures": [{"name", "mode", "out"}, ...]}

``mode`` is ``predict`` (the signature's own inputs) or ``example`` (a classify/regress signature
whose graph parses serialized tf.Examples: the graph is cut after ParseExample and its dense
features become the ONNX inputs, named by feature key). The ONNX inputs and outputs carry the
signature's keys (or feature keys). Prints one JSON line per signature: {"name", "ok": true,
"inputs": [...], "outputs": [...]} or {"name", "ok": false, "why": "<one sentence>"}.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

PARSE_OPS = ("ParseExampleV2", "ParseExample")


class Refused(Exception):
    """A signature this converter cannot turn into ONNX; the message is the one sentence saying why."""


def _spec(name, dtype, shape) -> dict:
    return {"name": name, "dtype": dtype.name, "shape": None if shape.rank is None else
            [-1 if d is None else int(d) for d in shape.as_list()]}


def _frozen(fn):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    try:
        return convert_variables_to_constants_v2(fn)
    except Exception as e:  # noqa: BLE001 - TF raises many kinds here
        raise Refused(f"its variables cannot be frozen into constants ({type(e).__name__}: {e})") from None


def _outputs(fn, frozen) -> list[tuple[str, object]]:
    """(signature key, frozen graph tensor) for every output, in key order: the frozen function's
    outputs are the signature's dict flattened, which tf.nest orders by key."""
    if not isinstance(fn.structured_outputs, dict):
        raise Refused("its outputs are not a dict of named tensors")
    keys = sorted(fn.structured_outputs)
    if len(keys) != len(frozen.outputs):
        raise Refused("its frozen graph has not one output per signature key")
    return list(zip(keys, frozen.outputs, strict=True))


def _predict_specs(fn) -> tuple[list, list]:
    """(key, TensorSpec-like) of the signature's inputs and outputs, in key order."""
    args = fn.structured_input_signature
    if args[0] or not isinstance(args[1], dict):
        raise Refused("its inputs are not one named tensor per signature key")
    outs = fn.structured_outputs
    if not isinstance(outs, dict):
        raise Refused("its outputs are not a dict of named tensors")
    return [(k, args[1][k]) for k in sorted(args[1])], [(k, outs[k]) for k in sorted(outs)]


def _convert_predict(saved_model: str, name: str, fn, opset: int, out: str) -> tuple[list, list]:
    """tf2onnx's own SavedModel path (what `python -m tf2onnx.convert --saved-model` runs): it freezes
    the signature, keeps lookup tables (initialized_tables) and names the ONNX tensors by key."""
    from tf2onnx import convert, tf_loader

    ins, outs = _predict_specs(fn)
    try:
        graph_def, inputs, outputs, tables, rename = tf_loader.from_saved_model(
            saved_model, None, None, "serve", [name], None, False,
            return_initialized_tables=True, return_tensors_to_rename=True)
        convert._convert_common(graph_def, name=saved_model, opset=opset, input_names=inputs,
                                output_names=outputs, tensors_to_rename=rename, initialized_tables=tables,
                                output_path=out)
    except Exception as e:  # noqa: BLE001 - tf2onnx raises anything from its op handlers
        raise Refused(_why(e)) from None
    return ins, outs


def _why(e: Exception) -> str:
    import tf2onnx

    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"tf2onnx {tf2onnx.__version__} cannot convert its graph ({type(e).__name__}: {reason})"


def _example(fn):
    """Cut the graph after ParseExample: each dense feature becomes a placeholder named by its key."""
    import tensorflow as tf

    frozen = _frozen(fn)
    graph_def = frozen.graph.as_graph_def()
    parsers = [n for n in graph_def.node if n.op in PARSE_OPS]
    if len(parsers) != 1:
        raise Refused(f"its graph has {len(parsers)} ParseExample ops, not one, so its features cannot be told apart")
    node = parsers[0]
    if node.op != "ParseExampleV2":
        raise Refused(f"its graph parses tf.Examples with the old {node.op} op, which this importer does not cut")
    if node.attr["num_sparse"].i or node.attr["ragged_value_types"].list.type:
        raise Refused("it parses sparse or ragged features, which a Triton input cannot take as one dense tensor")
    consts = {n.name: n for n in graph_def.node if n.op == "Const"}
    keys_node = consts.get(node.input[3].split(":")[0])
    if keys_node is None:
        raise Refused("its dense feature keys are not constants in the graph")
    feature_keys = [k.decode() for k in tf.make_ndarray(keys_node.attr["value"].tensor).reshape(-1).tolist()]
    dtypes = [tf.dtypes.as_dtype(t) for t in node.attr["Tdense"].list.type]
    shapes = [tf.TensorShape(s) for s in node.attr["dense_shapes"].list.shape]
    outs = _outputs(fn, frozen)
    with tf.Graph().as_default() as g:
        holders, input_map = [], {}
        for i, (key, dtype, shape) in enumerate(zip(feature_keys, dtypes, shapes, strict=True)):
            ph = tf.compat.v1.placeholder(dtype, shape=[None, *shape.as_list()], name=f"migrate_feature_{i}")
            holders.append((key, ph))
            input_map[f"{node.name}:{i}"] = ph  # dense values follow 0 sparse indices/values/shapes
        # the batch size read from the serialized input (tf.shape(inputs)) is the first feature's
        serialized = node.input[0] if ":" in node.input[0] else node.input[0] + ":0"
        for n in graph_def.node:
            if n.name != node.name and any(i in (serialized, serialized[:-2]) for i in n.input):
                if n.op != "Shape" or not holders:
                    raise Refused(f"its graph uses the serialized tf.Examples beyond parsing them ({n.op} '{n.name}')")
                out_type = tf.dtypes.as_dtype(n.attr["out_type"].type)
                input_map[f"{n.name}:0"] = tf.shape(holders[0][1], out_type=out_type)[:1]
        tf.import_graph_def(graph_def, input_map=input_map, name="")
        out_tensors = [(k, g.get_tensor_by_name(t.name)) for k, t in outs]
        cut = tf.compat.v1.graph_util.extract_sub_graph(g.as_graph_def(), [t.op.name for _, t in out_tensors])
    return cut, holders, out_tensors


def convert(saved_model: str, job: dict, loaded, opset: int) -> dict:
    import tf2onnx

    name, mode = job["name"], job["mode"]
    if name not in loaded.signatures:
        raise Refused("TensorFlow does not load it as a concrete function of the SavedModel")
    fn = loaded.signatures[name]
    if mode == "predict":
        ins, outs = _convert_predict(saved_model, name, fn, opset, job["out"])
    else:
        graph_def, ins, outs = _example(fn)
        rename = {t.name: k for k, t in ins} | {t.name: k for k, t in outs}
        if len(set(rename.values())) != len(rename):
            raise Refused("two of its tensors would get the same ONNX name")
        try:
            tf2onnx.convert.from_graph_def(graph_def, input_names=[t.name for _, t in ins],
                                           output_names=[t.name for _, t in outs], opset=opset,
                                           tensors_to_rename=rename, output_path=job["out"])
        except Exception as e:  # noqa: BLE001 - tf2onnx raises anything from its op handlers
            raise Refused(_why(e)) from None
    _check_names(job["out"], [k for k, _ in ins], [k for k, _ in outs])
    return {"inputs": [_spec(k, t.dtype, t.shape) for k, t in ins],
            "outputs": [_spec(k, t.dtype, t.shape) for k, t in outs]}


def _check_names(path: str, inputs: list[str], outputs: list[str]) -> None:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    got = (sorted(i.name for i in graph.input), sorted(o.name for o in graph.output))
    if got != (sorted(inputs), sorted(outputs)):
        raise Refused(f"the ONNX graph's tensors {got} are not the signature's keys {inputs}, {outputs}")


def main(argv: list[str]) -> int:
    import logging

    import tensorflow as tf

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    tf.get_logger().setLevel(logging.ERROR)
    with open(argv[1]) as f:
        job = json.load(f)
    loaded = tf.saved_model.load(job["saved_model"], tags=["serve"])
    for sig in job["signatures"]:
        try:
            line = {"name": sig["name"], "ok": True} | convert(job["saved_model"], sig, loaded, job.get("opset", 17))
        except Refused as e:
            line = {"name": sig["name"], "ok": False, "why": str(e)}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
