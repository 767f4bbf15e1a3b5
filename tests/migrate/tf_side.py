"""TensorFlow's side of the migration test, run with .venv-tf's python (TensorFlow, the real
tensorflow-serving-api): nothing here imports the gateway.

    python tf_side.py build OUT                 SavedModels + models.config under OUT
    python tf_side.py compare OUT REST GRPC     every signature through TF Serving REST and gRPC at the
                                                gateway, against tf.saved_model.load(...).signatures[...]

``compare`` prints one JSON object: {"checked": n, "mismatches": [...], "floats": n, "bit_equal": n,
"max_abs_err": e}.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"
FRUIT = ["apple", "pear", "plum"]


class Shop(tf.Module):
    """Version ``v`` of model 'shop': every kind of signature the importer handles, weights by version."""

    def __init__(self, v: int):
        super().__init__()
        self.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2) * np.float32(0.37 * v))
        self.b = tf.Variable(np.array([0.5 * v, -0.25 * v], dtype=np.float32))
        self.wc = tf.Variable(np.array([[0.3, -1.2], [0.7 * v, 0.1]], dtype=np.float32))
        self.wr = tf.Variable(np.array([[1.5 * v], [-0.75]], dtype=np.float32))
        self.v = v
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(FRUIT, tf.constant([1, 2, 3], tf.int64) * v), default_value=-1)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(x, self.w) + self.b, "total": tf.reduce_sum(x, axis=1, keepdims=True)}

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64, name="counts"),
                                  tf.TensorSpec([None, 2], tf.int32, name="step")])
    def ints(self, counts, step):
        return {"next": counts * self.v + tf.cast(step, tf.int64), "neg": -step}

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32, name="values")])
    def unbatched(self, values):
        return {"doubled": values * 2.0 * self.v}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="fruit")])
    def text(self, fruit):
        return {"id": self.table.lookup(fruit)}

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32, name="anything")])
    def shapeless(self, anything):
        return {"same": anything + 1.0}

    def _features(self, inputs):
        return tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([2], tf.float32)})["x"]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, inputs):
        scores = tf.nn.softmax(tf.matmul(self._features(inputs), self.wc))
        classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(inputs)[0], 1])
        return {"scores": scores, "classes": classes}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, inputs):
        return {"outputs": tf.matmul(self._features(inputs), self.wr)}


class Plain(tf.Module):
    def __init__(self, v: int):
        super().__init__()
        self.k = tf.Variable(np.float32(v))

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="a")])
    def serve(self, a):
        return {"b": a * self.k}


def _save(module, path: Path, sigs: dict, methods: dict) -> None:
    tf.saved_model.save(module, str(path), signatures=sigs)
    if methods:  # TF2 writes every signature as predict; classify/regress carry their TF Serving method
        from tensorflow.core.protobuf import saved_model_pb2

        sm = saved_model_pb2.SavedModel()
        pb = path / "saved_model.pb"
        sm.ParseFromString(pb.read_bytes())
        for name, method in methods.items():
            sm.meta_graphs[0].signature_def[name].method_name = method
        pb.write_bytes(sm.SerializeToString())


def build(out: Path) -> None:
    for v in (1, 2):
        m = Shop(v)
        sigs = {"serving_default": m.serve, "ints": m.ints, "unbatched": m.unbatched, "text": m.text,
                "shapeless": m.shapeless, CLASSIFY: m.classify, REGRESS: m.regress}
        _save(m, out / "models" / "shop" / str(v), sigs, {CLASSIFY: CLASSIFY, REGRESS: REGRESS})
    for v in (3, 7):  # latest 1 (TF Serving's default policy): only 7 is served
        m = Plain(v)
        _save(m, out / "models" / "plain" / str(v), {"serving_default": m.serve}, {})
    (out / "models.config").write_text(
        'model_config_list {\n'
        '  config {\n    name: "shop"\n    base_path: "models/shop"\n    model_platform: "tensorflow"\n'
        '    model_version_policy { specific { versions: 1 versions: 2 } }\n'
        '    version_labels { key: "stable" value: 1 }\n    version_labels { key: "canary" value: 2 }\n  }\n'
        '  config {\n    name: "plain"\n    base_path: "models/plain"\n    model_platform: "tensorflow"\n  }\n'
        '}\n')


# -- compare ---------------------------------------------------------------------------------------
PREDICT_INPUTS = {
    "serving_default": {"x": np.array([[1.0, 2.0, 3.0], [-0.5, 0.25, 8.0]], np.float32)},
    "ints": {"counts": np.array([[1, 2], [30, -4], [5, 6]], np.int64), "step": np.array([[7, 8], [9, -10], [0, 1]], np.int32)},
    "unbatched": {"values": np.array([0.1, -2.5, 3.0, 1e3], np.float32)},
    "text": {"fruit": np.array([b"pear", b"kiwi", b"apple"], object)},
}
EXAMPLES = [[1.0, 2.0], [-0.5, 3.25], [0.0, 0.0]]
# (how a client names the version, the version TF Serving serves for it)
SELECTORS = [({}, 2), ({"version": 1}, 1), ({"version": 2}, 2), ({"label": "stable"}, 1), ({"label": "canary"}, 2)]


class Tally:
    def __init__(self):
        self.checked, self.mismatches, self.floats, self.bit_equal, self.max_err = 0, [], 0, 0, 0.0

    def same(self, what: str, got, want) -> None:
        self.checked += 1
        got, want = np.asarray(got), np.asarray(want)
        if want.dtype.kind == "f":
            got = got.astype(want.dtype)
            ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)
            if ok:
                self.floats += want.size
                self.bit_equal += int(np.sum(got == want))
                self.max_err = max(self.max_err, float(np.max(np.abs(got - want), initial=0.0)))
        elif want.dtype.kind in "OSU":
            ok = got.shape == want.shape and [_b(x) for x in got.reshape(-1)] == [_b(x) for x in want.reshape(-1)]
        else:
            ok = got.shape == want.shape and np.array_equal(got.astype(want.dtype), want)
        if not ok:
            self.mismatches.append(f"{what}: got {got.tolist()!r} ({got.shape}), TensorFlow {want.tolist()!r} ({want.shape})")


def _b(x) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def _json_value(a: np.ndarray):
    def plain(x):
        return [plain(y) for y in x] if isinstance(x, list) else x.decode() if isinstance(x, bytes) else x

    return plain(a.tolist())


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"http_error": e.code, "body": e.read().decode(errors="replace")}


def _rest_path(base: str, sel: dict, verb: str) -> str:
    tail = f"/versions/{sel['version']}" if "version" in sel else f"/labels/{sel['label']}" if "label" in sel else ""
    return f"{base}/v1/models/shop{tail}:{verb}"


def _spec(req, sel: dict, signature: str) -> None:
    req.model_spec.name = "shop"
    req.model_spec.signature_name = signature
    if "version" in sel:
        req.model_spec.version.value = sel["version"]
    if "label" in sel:
        req.model_spec.version_label = sel["label"]


def _examples(rows) -> list:
    return [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=r))})) for r in rows]


def compare(out: Path, rest: str, grpc_target: str) -> dict:
    import grpc
    from tensorflow_serving.apis import (
        classification_pb2,
        predict_pb2,
        prediction_service_pb2_grpc,
        regression_pb2,
    )

    loaded = {v: tf.saved_model.load(str(out / "models" / "shop" / str(v))) for v in (1, 2)}
    t = Tally()
    channel = grpc.insecure_channel(grpc_target)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    serialized = tf.constant([e.SerializeToString() for e in _examples(EXAMPLES)])
    for sel, v in SELECTORS:
        fns = loaded[v].signatures
        for sig, inputs in PREDICT_INPUTS.items():
            want = {k: val.numpy() for k, val in fns[sig](**{k: tf.constant(a) for k, a in inputs.items()}).items()}
            # REST, columnar ("inputs" -> "outputs": a dict, or the value itself for one output)
            body = {"signature_name": sig, "inputs": {k: _json_value(a) for k, a in inputs.items()}}
            got = _post(_rest_path(rest, sel, "predict"), body)
            outs = got.get("outputs")
            outs = outs if isinstance(outs, dict) else {next(iter(want)): outs} if "outputs" in got else {}
            for k, w in want.items():
                t.same(f"REST {sig} {sel} {k}", np.array(outs.get(k), dtype=object if w.dtype == object else None), w)
            # gRPC, the real stubs, tensors made as clients make them
            req = predict_pb2.PredictRequest()
            _spec(req, sel, sig)
            for k, a in inputs.items():
                req.inputs[k].CopyFrom(tf.make_tensor_proto(a))
            resp = stub.Predict(req, timeout=30)
            t.same(f"gRPC {sig} {sel} version", resp.model_spec.version.value, v)
            for k, w in want.items():
                t.same(f"gRPC {sig} {sel} {k}", tf.make_ndarray(resp.outputs[k]) if k in resp.outputs else [], w)
        # classify / regress over tf.Examples
        cw = {k: val.numpy() for k, val in fns[CLASSIFY](inputs=serialized).items()}
        rw = fns[REGRESS](inputs=serialized)["outputs"].numpy()
        got = _post(_rest_path(rest, sel, "classify"), {"signature_name": CLASSIFY,
                                                        "examples": [{"x": r} for r in EXAMPLES]})
        res = got.get("results") or []
        t.same(f"REST classify {sel} labels", np.array([[c[0] for c in r] for r in res], dtype=object), cw["classes"])
        t.same(f"REST classify {sel} scores", np.array([[c[1] for c in r] for r in res]), cw["scores"])
        got = _post(_rest_path(rest, sel, "regress"), {"signature_name": REGRESS, "examples": [{"x": r} for r in EXAMPLES]})
        t.same(f"REST regress {sel}", np.array(got.get("results", [])), rw.reshape(-1))
        creq = classification_pb2.ClassificationRequest()
        _spec(creq, sel, CLASSIFY)
        creq.input.example_list.examples.extend(_examples(EXAMPLES))
        cresp = stub.Classify(creq, timeout=30)
        t.same(f"gRPC classify {sel} version", cresp.model_spec.version.value, v)
        cls = cresp.result.classifications
        t.same(f"gRPC classify {sel} labels", np.array([[c.label for c in r.classes] for r in cls], dtype=object),
               cw["classes"])
        t.same(f"gRPC classify {sel} scores", np.array([[c.score for c in r.classes] for r in cls], np.float32),
               cw["scores"])
        rreq = regression_pb2.RegressionRequest()
        _spec(rreq, sel, REGRESS)
        rreq.input.example_list.examples.extend(_examples(EXAMPLES))
        rresp = stub.Regress(rreq, timeout=30)
        t.same(f"gRPC regress {sel}", np.array([r.value for r in rresp.result.regressions], np.float32), rw.reshape(-1))
    # 'plain': latest 1 of versions 3 and 7 on disk -> 7
    a = np.array([[1.5, -2.0]], np.float32)
    want = tf.saved_model.load(str(out / "models" / "plain" / "7")).signatures["serving_default"](a=a)["b"].numpy()
    got = _post(f"{rest}/v1/models/plain:predict", {"instances": [{"a": [1.5, -2.0]}]})
    t.same("REST plain", np.array(got.get("predictions", [])), want)
    status = urllib.request.urlopen(f"{rest}/v1/models/plain", timeout=30).read()
    t.same("REST plain status versions", np.array([s["version"] for s in json.loads(status)["model_version_status"]],
                                                  dtype=object), np.array(["7"], dtype=object))
    channel.close()
    return {"checked": t.checked, "mismatches": t.mismatches, "floats": t.floats, "bit_equal": t.bit_equal,
            "max_abs_err": t.max_err}


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        print(json.dumps(compare(Path(sys.argv[2]), sys.argv[3], sys.argv[4])))
