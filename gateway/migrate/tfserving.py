"""``gateway import tfserving``: what a TF Serving model server serves becomes a Triton model
repository and the gateway's ``dialects.tfserving`` mapping.

    gateway import tfserving --model-config-file models.config [--out model_repository] [--config gateway.yaml]
    gateway import tfserving --base-path /models/half --name half

For every model (name, base path, ``model_version_policy``, ``version_labels``) and every version
the policy serves, each signature of the SavedModel (read from saved_model.pb: source.py) is
converted to ONNX by tf2onnx in TensorFlow's environment (tf_convert.py). Triton has one model per
signature (one graph each): the default signature's under the TF name, the others under
``<name>__<signature>``, all with the TF model's versions and policy; the mapping names them with
``same_versions: true``, so a version or label selects the same version of every signature, as in
TF Serving. Classify and regress signatures whose graph parses tf.Examples are converted from the
parsed features (the gateway parses the Examples and sends the features). What cannot be
converted is refused, one sentence per signature, and the rest is imported.

Only what changed is written (repository.write, yamlfile.merge): a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gateway.dialects.tfserving.config import DEFAULT_SIGNATURE, TFServingConfig
from gateway.migrate import repository, source, yamlfile
from gateway.migrate.repository import ModelConf, TensorConf

CONVERTER = Path(__file__).with_name("tf_convert.py")
TF2ONNX = "tf2onnx==1.17.0"  # requirements/migrate.txt; part of each conversion's record
OPSET = 17
TF_NAMES = {"float32": "FP32", "float64": "FP64", "float16": "FP16", "bfloat16": "BF16", "int8": "INT8",
            "int16": "INT16", "int32": "INT32", "int64": "INT64", "uint8": "UINT8", "uint16": "UINT16",
            "uint32": "UINT32", "uint64": "UINT64", "bool": "BOOL", "string": "BYTES"}


class MigrateError(Exception):
    """Nothing can be imported (the message says why)."""


@dataclass
class Options:
    out: Path
    config: Path
    tf_python: str = ""
    max_batch_size: int = 64


@dataclass
class SigPlan:
    model: str  # TF name
    sig: source.Signature
    triton: str
    mode: str  # predict | example
    refused: str = ""  # the sentence saying why not
    specs: dict[int, dict] = field(default_factory=dict)  # version -> converter record


@dataclass
class Result:
    lines: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    yaml_changed: list[str] = field(default_factory=list)


def triton_name(model: str, signature: str) -> str:
    if signature == DEFAULT_SIGNATURE:
        return model
    return f"{model}__{re.sub(r'[^A-Za-z0-9_.-]', '_', signature)}"


def default_tf_python() -> str:
    env = os.environ.get("GATEWAY_TF_PYTHON", "")
    if env:
        return env
    here = Path(".venv-tf/bin/python")
    return str(here.absolute()) if here.exists() else ""  # not resolve(): the venv's python is a symlink


def _mode(sig: source.Signature) -> tuple[str, str]:
    """(predict | example, refusal sentence or "")."""
    if sig.method not in ("predict", "classify", "regress"):
        return "", f"its method '{sig.method_name}' is none of predict, classify, regress, which TF Serving's APIs call"
    for t in sig.inputs + sig.outputs:
        try:
            t.v2  # noqa: B018 - the lookup is the check
        except KeyError:
            return "", f"its tensor '{t.key}' has type {t.dtype}, which Triton has no type for"
        if t.shape is None:
            return "", (f"its tensor '{t.key}' has no known rank and a Triton tensor needs one (re-export the "
                        f"signature with a shape, or map it by hand with `elementwise: true`)")
    if sig.method == "predict":
        return "predict", ""
    if len(sig.inputs) == 1 and sig.inputs[0].dtype == "DT_STRING":
        if sig.method == "classify" and "scores" not in {t.key for t in sig.outputs}:
            return "", "it classifies without a 'scores' output, which the gateway's classify answers from"
        if sig.method == "regress" and "outputs" not in {t.key for t in sig.outputs}:
            return "", "it regresses without an 'outputs' output"
        return "example", ""
    return "", (f"its {sig.method} input is not one DT_STRING tensor of serialized tf.Examples, so it has no "
                f"features to map (a Predict signature over the same tensors can be imported)")


def plan(sources: list[source.ModelSource], result: Result) -> tuple[list[tuple], list[SigPlan]]:
    """(model, served versions, labels) per model and a plan per signature; refusals noted."""
    models, sigs = [], []
    for m in sources:
        try:
            on_disk = source.versions_on_disk(m.base_path)
        except source.SourceError as e:
            result.refused.append(f"model {m.name}: {e}")
            continue
        served = m.policy.select(on_disk)
        if not served:
            result.refused.append(f"model {m.name}: no version directory under {m.base_path} that the policy "
                                  f"({m.policy.describe()}) serves")
            continue
        labels = {}
        for label, v in m.labels.items():
            if v in served:
                labels[label] = v
            else:
                result.refused.append(f"model {m.name}: label '{label}' names version {v}, which the policy "
                                      f"({m.policy.describe()}) does not serve from {m.base_path}")
        per_version = {}
        try:
            for v in served:
                per_version[v] = source.read_signatures(m.base_path / str(v))
        except source.SourceError as e:
            result.refused.append(f"model {m.name}: {e}")
            continue
        names = sorted(set().union(*per_version.values()))
        for name in names:
            first = next(s[name] for s in per_version.values() if name in s)
            sp = SigPlan(m.name, first, triton_name(m.name, name), "")
            missing = [v for v, s in per_version.items() if name not in s]
            differ = [v for v, s in per_version.items() if name in s and s[name] != first]
            if missing:
                sp.refused = f"versions {', '.join(map(str, missing))} lack it, and one Triton model carries every version"
            elif differ:
                sp.refused = ("its inputs or outputs differ between versions, and one Triton config "
                              "describes every version (import the versions as separate models)")
            else:
                sp.mode, sp.refused = _mode(first)
            sigs.append(sp)
        models.append((m, served, labels))
    return models, sigs


def _converter_ok(record: dict, digest: str, sp: SigPlan) -> bool:
    return (record.get("digest") == digest and record.get("signature") == sp.sig.name
            and record.get("mode") == sp.mode and record.get("converter") == f"{TF2ONNX} opset {OPSET}")


def convert(models: list[tuple], sigs: list[SigPlan], opts: Options, result: Result) -> None:
    """Convert what is new (per version, one converter process); keep each version's record."""
    todo = [s for s in sigs if not s.refused]
    for m, served, _labels in models:
        for v in served:
            vdir = m.base_path / str(v)
            digest = repository.digest(repository.saved_model_files(vdir))
            pending = []
            for sp in (s for s in todo if s.model == m.name and not s.refused):
                rec_path = opts.out / sp.triton / str(v) / "source.json"
                rec = json.loads(rec_path.read_text()) if rec_path.is_file() else {}
                if _converter_ok(rec, digest, sp) and (rec_path.parent / "model.onnx").is_file():
                    sp.specs[v] = rec
                else:
                    pending.append(sp)
            if pending:
                _run_converter(vdir, v, digest, pending, opts, result)


def _run_converter(vdir: Path, v: int, digest: str, pending: list[SigPlan], opts: Options, result: Result) -> None:
    python = opts.tf_python or default_tf_python()
    if not python:
        raise MigrateError("TensorFlow's environment is missing: run `make migrate-env` (it makes .venv-tf), "
                           "or name its python with --tf-python / GATEWAY_TF_PYTHON")
    with tempfile.TemporaryDirectory(prefix="gateway-import-") as tmp:
        job = {"saved_model": str(vdir.resolve()), "opset": OPSET,
               "signatures": [{"name": sp.sig.name, "mode": sp.mode, "out": f"{tmp}/{i}.onnx"}
                              for i, sp in enumerate(pending)]}
        Path(tmp, "job.json").write_text(json.dumps(job))
        proc = subprocess.run([python, str(CONVERTER), f"{tmp}/job.json"], capture_output=True, text=True)
        answers = {}
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                answers[d["name"]] = d
        for i, sp in enumerate(pending):
            a = answers.get(sp.sig.name)
            if a is None:
                tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
                sp.refused = f"the converter stopped before it (version {v}: {tail[0]})"
            elif not a["ok"]:
                sp.refused = f"version {v}: {a['why']}"
            else:
                vout = opts.out / sp.triton / str(v)
                repository.write(vout / "model.onnx", Path(tmp, f"{i}.onnx").read_bytes(), result.written)
                rec = {"saved_model": str(vdir.resolve()), "digest": digest, "signature": sp.sig.name,
                       "mode": sp.mode, "converter": f"{TF2ONNX} opset {OPSET}",
                       "inputs": a["inputs"], "outputs": a["outputs"]}
                repository.write(vout / "source.json", json.dumps(rec, indent=2) + "\n", result.written)
                sp.specs[v] = rec


def _triton_conf(sp: SigPlan, policy: str, max_batch: int) -> ModelConf | str:
    rec = sp.specs[max(sp.specs)]
    tensors = rec["inputs"] + rec["outputs"]
    if any(t["shape"] is None for t in tensors):
        return "TensorFlow gives one of its tensors no rank after loading"
    if any(t["dtype"] not in TF_NAMES for t in tensors):
        return "one of its tensors has a type Triton has none for"
    batched = all(len(t["shape"]) >= 2 and t["shape"][0] == -1 for t in tensors)

    def conf(t) -> TensorConf:
        shape = tuple(t["shape"])
        return TensorConf(t["name"], TF_NAMES[t["dtype"]], shape[1:] if batched else shape)

    origin = f"TF Serving model '{sp.model}', signature '{sp.sig.name}' ({sp.sig.method_name}), {TF2ONNX}"
    return ModelConf(sp.triton, max_batch if batched else 0, tuple(map(conf, rec["inputs"])),
                     tuple(map(conf, rec["outputs"])), policy, origin)


def _mapping(sp: SigPlan, own: str, rec: dict) -> dict:
    ins = [t["name"] for t in rec["inputs"]]
    outs = [t["name"] for t in rec["outputs"]]
    entry: dict = {"method": "predict" if sp.mode == "predict" else sp.sig.method}
    if sp.triton != own:
        entry |= {"triton": sp.triton, "same_versions": True}
    if sp.mode == "predict":
        entry |= {"inputs": {k: k for k in ins}, "outputs": {k: k for k in outs}}
    elif sp.sig.method == "regress":
        entry |= {"features": {k: k for k in ins}, "output": "outputs"}
    else:
        entry |= {"features": {k: k for k in ins}, "scores": "scores"}
        if "classes" in outs:
            entry["classes"] = "classes"
    return entry


def write(models: list[tuple], sigs: list[SigPlan], opts: Options, result: Result) -> dict[str, dict]:
    """config.pbtxt, configs/cpu.pbtxt and model.py per converted signature; the mapping entries."""
    cpu_model = repository.CPU_MODEL.read_bytes()
    entries = {}
    for m, served, labels in models:
        policy = repository.policy_text(m.policy.kind, list(m.policy.versions), m.policy.num_versions)
        done = []
        for sp in (s for s in sigs if s.model == m.name and not s.refused):
            conf = _triton_conf(sp, policy, opts.max_batch_size)
            if isinstance(conf, str):
                sp.refused = conf
                continue
            mdir = opts.out / sp.triton
            repository.write(mdir / "config.pbtxt", repository.gpu_config(conf), result.written)
            repository.write(mdir / "configs" / "cpu.pbtxt", repository.cpu_config(conf), result.written)
            for v in served:
                repository.write(mdir / str(v) / "model.py", cpu_model, result.written)
            done.append((sp, conf))
        if not done:
            continue
        own = next((sp.triton for sp, _ in done if sp.sig.name == DEFAULT_SIGNATURE), done[0][0].triton)
        entry: dict = {"triton": own}
        if labels:
            entry["version_labels"] = dict(labels)
        entry["derived"] = False
        entry["signatures"] = {sp.sig.name: _mapping(sp, own, sp.specs[max(sp.specs)]) for sp, _ in done}
        entries[m.name] = entry
        kinds = ", ".join(f"{sp.sig.name} -> {sp.triton} [{_mapping(sp, own, sp.specs[max(sp.specs)])['method']}"
                          f"{', max_batch_size ' + str(c.max_batch_size) if c.max_batch_size else ''}"
                          f"{', GPU: TensorRT plan' if c.tensorrt else ', GPU: ONNX Runtime'}]" for sp, c in done)
        result.lines.append(f"model {m.name}: versions {', '.join(map(str, served))} (policy {m.policy.describe()})"
                            + (f", labels {', '.join(f'{k}={v}' for k, v in labels.items())}" if labels else ""))
        result.lines.append(f"  signatures: {kinds}")
    TFServingConfig.model_validate({"models": entries})  # what is written validates as the gateway reads it
    if any(s.triton != s.model for s in sigs if not s.refused):
        result.lines.append("note: with dialects.tfserving.expose_all_models (the default) the <name>__<signature> "
                            "Triton models are also exposed under their own names; false exposes only configured models")
    return entries


def run(sources: list[source.ModelSource], opts: Options) -> Result:
    result = Result()
    models, sigs = plan(sources, result)
    convert(models, sigs, opts, result)
    entries = write(models, sigs, opts, result)
    for sp in sigs:
        if sp.refused:
            result.refused.append(f"model {sp.model}, signature {sp.sig.name}: not imported: {sp.refused}.")
    if entries:
        result.yaml_changed = yamlfile.merge(opts.config, "tfserving", entries)
    return result


def main(args) -> int:
    """The CLI's ``import tfserving`` (gateway/cli.py): import, print the summary; 0, or 1 when
    nothing could be imported. The CLI runs ``gateway check`` afterwards."""
    try:
        if args.model_config_file:
            sources = source.read_config_file(Path(args.model_config_file))
        else:
            sources = [source.ModelSource(args.name or Path(args.base_path).name, Path(args.base_path))]
        opts = Options(Path(args.out), Path(args.config), args.tf_python, args.max_batch_size)
        result = run(sources, opts)
    except (source.SourceError, MigrateError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in result.lines:
        print(line)
    if not result.lines:
        for line in result.refused:
            print(line)
        print("nothing imported")
        return 1
    print(f"{len(result.written)} file(s) written under {opts.out}" if result.written
          else f"{opts.out}: already up to date")
    print(f"{opts.config}: dialects.tfserving.models {', '.join(result.yaml_changed)} written" if result.yaml_changed
          else f"{opts.config}: already up to date")
    for line in result.refused:
        print(line)
    return 0 if result.lines else 1
