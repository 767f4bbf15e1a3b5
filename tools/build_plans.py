"""Build a TensorRT plan for every model of a Triton model repository that ships an ONNX graph.

    python3 tools/build_plans.py /models [--dry-run] [--force]
    python3 tools/build_plans.py /models --wait      # until every plan is there (Triton's init container)

Runs inside the TensorRT container of the same release as Triton (compose's `plan-builder`, the
Kubernetes Job `plan-builder`), on the GPU the plans are for: plans do not move between GPU
models or TensorRT versions. Standard library only (the container has python3, nothing else is
assumed).

For each model whose config.pbtxt says `platform: "tensorrt_plan"` and each version directory
holding `model.onnx`, it runs trtexec with:
  * one optimization profile derived from the config: the batch dimension (max_batch_size > 0)
    from 1 to max_batch_size, every other -1 dimension from the model's `plan_dim_range`
    parameter ("min,opt,max"; `plan_dim_range.<input>` for one input);
  * --fp16 unless the model's `plan_fp16` parameter is "false" (a model whose answers must stay
    bit-exact says so);
and writes `<plan>.build.json` next to the plan: GPU, compute capability, TensorRT version, the
ONNX file's digest and the command. A plan whose record matches this GPU, this TensorRT and this
ONNX/command is skipped; any difference rebuilds it (written to a temporary file, then renamed).
"""

from __future__ import annotations

import argparse
import codecs
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# -- a minimal protobuf text-format reader (enough for config.pbtxt) ----------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<punct>[{}\[\]:,;<>])
      | (?P<word>[-+.\w]+)
    )""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"config.pbtxt: cannot parse near {text[pos:pos + 30]!r}")
        pos = m.end()
        if m.group("comment") is None:
            out.append(m.group(m.lastgroup))
    return out


def _scalar(tok: str):
    if tok[0] in "\"'":
        text = tok[1:-1]
        return codecs.decode(text, "unicode_escape") if "\\" in text else text
    if re.fullmatch(r"[-+]?\d+", tok):
        return int(tok)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", tok):
        return float(tok)
    return {"true": True, "false": False}.get(tok, tok)  # enum names stay strings


def parse_pbtxt(text: str) -> dict[str, list]:
    """Every field as a list of values (scalars, or dicts for messages), like a repeated field."""
    toks = _tokens(text)
    pos = 0

    def message(end: str | None) -> dict[str, list]:
        nonlocal pos
        msg: dict[str, list] = {}
        while pos < len(toks) and toks[pos] != end:
            name = toks[pos]
            pos += 1
            if toks[pos] == ":":
                pos += 1
            msg.setdefault(name, []).extend(values())
            if pos < len(toks) and toks[pos] in ",;":
                pos += 1
        if end is not None:
            if pos >= len(toks):
                raise ValueError(f"config.pbtxt: missing {end!r}")
            pos += 1
        return msg

    def values() -> list:
        nonlocal pos
        tok = toks[pos]
        if tok == "[":
            pos += 1
            out = []
            while toks[pos] != "]":
                out.extend(values())
                if toks[pos] == ",":
                    pos += 1
            pos += 1
            return out
        if tok in "{<":
            pos += 1
            return [message("}" if tok == "{" else ">")]
        pos += 1
        while pos < len(toks) and toks[pos][0] in "\"'" and tok[0] in "\"'":  # "a" "b" concatenation
            tok = tok[:-1] + toks[pos][1:]
            pos += 1
        return [_scalar(tok)]

    return message(None)


def _one(msg: dict, name: str, default=None):
    vals = msg.get(name)
    return vals[-1] if vals else default


def parameters(config: dict) -> dict[str, str]:
    out = {}
    for p in config.get("parameters", []):
        value = _one(p, "value", {})
        out[str(_one(p, "key"))] = str(_one(value, "string_value", ""))
    return out


# -- what to build -------------------------------------------------------------------------------


class PlanConfigError(ValueError):
    pass


@dataclass(frozen=True)
class PlanJob:
    model: str
    version: str
    onnx: Path
    plan: Path
    shapes: dict[str, tuple[list[int], list[int], list[int]]]  # input -> (min, opt, max)
    fp16: bool
    extra: list[str] = field(default_factory=list)

    @property
    def record(self) -> Path:
        return self.plan.with_name(self.plan.name + ".build.json")


def _dim_range(params: dict[str, str], model: str, tensor: str) -> tuple[int, int, int]:
    text = params.get(f"plan_dim_range.{tensor}") or params.get("plan_dim_range")
    if not text:
        raise PlanConfigError(
            f"{model}: input {tensor} has a dynamic dimension; give its range as parameter "
            f'plan_dim_range (or plan_dim_range.{tensor}) = "min,opt,max"'
        )
    try:
        lo, opt, hi = (int(v) for v in text.split(","))
    except ValueError:
        raise PlanConfigError(f"{model}: plan_dim_range {text!r} is not 'min,opt,max'") from None
    if not 1 <= lo <= opt <= hi:
        raise PlanConfigError(f"{model}: plan_dim_range {text!r} needs 1 <= min <= opt <= max")
    return lo, opt, hi


def profile(config: dict, model: str) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """One optimization profile (min, opt, max shape per input) from the model's config."""
    params = parameters(config)
    batch = int(_one(config, "max_batch_size", 0))
    shapes = {}
    for inp in config.get("input", []):
        name = str(_one(inp, "name"))
        reshape = _one(inp, "reshape")
        dims = [int(d) for d in (reshape.get("shape", []) if reshape else inp.get("dims", []))]
        lo, opt, hi = [], [], []
        if batch > 0:
            lo, opt, hi = [1], [batch], [batch]
        for d in dims:
            if d == -1:
                r = _dim_range(params, model, name)
                lo, opt, hi = lo + [r[0]], opt + [r[1]], hi + [r[2]]
            else:
                lo, opt, hi = lo + [d], opt + [d], hi + [d]
        shapes[name] = (lo, opt, hi)
    return shapes


def is_plan_model(config: dict) -> bool:
    return _one(config, "platform") == "tensorrt_plan" or _one(config, "backend") == "tensorrt"


def find_jobs(repo: Path) -> list[PlanJob]:
    """A job per (TensorRT model, version directory with model.onnx), in name order."""
    jobs = []
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir()):
        cfg_path = model_dir / "config.pbtxt"
        if not cfg_path.exists():
            continue
        config = parse_pbtxt(cfg_path.read_text())
        if not is_plan_model(config):
            continue
        params = parameters(config)
        shapes = profile(config, model_dir.name)
        fp16 = params.get("plan_fp16", "true").lower() != "false"
        filename = str(_one(config, "default_model_filename", "model.plan"))
        for version in sorted((v for v in model_dir.iterdir() if v.is_dir() and v.name.isdigit()), key=lambda v: int(v.name)):
            onnx = version / "model.onnx"
            if onnx.exists():
                jobs.append(PlanJob(model_dir.name, version.name, onnx, version / filename, shapes, fp16))
    return jobs


def _shape_arg(shapes: dict[str, tuple[list[int], list[int], list[int]]], which: int) -> str:
    return ",".join(f"{name}:{'x'.join(str(d) for d in s[which])}" for name, s in shapes.items())


def trtexec_command(job: PlanJob, trtexec: str = "trtexec", output: Path | None = None) -> list[str]:
    cmd = [trtexec, f"--onnx={job.onnx}", f"--saveEngine={output or job.plan}", "--skipInference"]
    if any(lo != hi for lo, _, hi in job.shapes.values()):  # a static graph takes no shapes
        cmd += [f"--minShapes={_shape_arg(job.shapes, 0)}", f"--optShapes={_shape_arg(job.shapes, 1)}",
                f"--maxShapes={_shape_arg(job.shapes, 2)}"]
    if job.fp16:
        cmd.append("--fp16")
    return cmd + job.extra


# -- where it runs: GPU and TensorRT version -------------------------------------------------------


@dataclass(frozen=True)
class BuildEnv:
    gpu: str
    compute_capability: str
    tensorrt: str


def detect_env(trtexec: str) -> BuildEnv:
    """The first visible GPU (nvidia-smi) and the TensorRT version (NGC's TRT_VERSION, the
    tensorrt module, or trtexec's banner)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[0]
    gpu, cc = (s.strip() for s in out.rsplit(",", 1))
    version = os.environ.get("TRT_VERSION", "")
    if not version:
        try:
            import tensorrt  # type: ignore[import-not-found]

            version = tensorrt.__version__
        except ImportError:
            banner = subprocess.run([trtexec, "--help"], capture_output=True, text=True).stdout
            m = re.search(r"TensorRT v(\d+)", banner)
            version = m.group(1) if m else "unknown"
    return BuildEnv(gpu, cc, version)


def find_trtexec() -> str:
    for candidate in (os.environ.get("TRTEXEC"), shutil.which("trtexec"), "/usr/src/tensorrt/bin/trtexec",
                      "/opt/tensorrt/bin/trtexec", "/workspace/tensorrt/bin/trtexec"):
        if candidate and Path(candidate).is_file():
            return candidate
    raise FileNotFoundError("trtexec not found (set TRTEXEC=/path/to/trtexec)")


def build_record(job: PlanJob, env: BuildEnv) -> dict:
    digest = hashlib.sha256(job.onnx.read_bytes()).hexdigest()
    cmd = trtexec_command(job, "trtexec")
    return {"gpu": env.gpu, "compute_capability": env.compute_capability, "tensorrt": env.tensorrt,
            "onnx_sha256": digest, "trtexec": cmd[1:]}


def up_to_date(job: PlanJob, env: BuildEnv) -> bool:
    """A plan is reused only when it was built for this GPU, TensorRT, ONNX graph and command."""
    if not job.plan.exists() or not job.record.exists():
        return False
    try:
        return json.loads(job.record.read_text()) == build_record(job, env)
    except (OSError, ValueError):
        return False


def build(job: PlanJob, env: BuildEnv, trtexec: str, run=subprocess.run) -> None:
    tmp = job.plan.with_name(job.plan.name + ".partial")
    run(trtexec_command(job, trtexec, output=tmp), check=True)
    os.replace(tmp, job.plan)
    job.record.write_text(json.dumps(build_record(job, env), indent=1) + "\n")


def missing_plans(jobs: list[PlanJob]) -> list[PlanJob]:
    """Jobs whose plan or build record is not there yet."""
    return [job for job in jobs if not (job.plan.exists() and job.record.exists())]


def wait(repo: Path, interval: float = 5.0, sleep=time.sleep) -> None:
    """Block until every plan of the repository has been built (Kubernetes: Triton pods start
    before the plan-building Job ends; without this they would fail to load and crash-loop)."""
    while missing := missing_plans(find_jobs(repo)):
        names = ", ".join(f"{j.model}/{j.version}/{j.plan.name}" for j in missing)
        print(f"plan-builder: waiting for {names}", flush=True)
        sleep(interval)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repository", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="print the trtexec command lines, build nothing")
    ap.add_argument("--force", action="store_true", help="rebuild plans that are up to date")
    ap.add_argument("--wait", action="store_true", help="build nothing; return once every plan is there")
    args = ap.parse_args(argv)
    if args.wait:
        wait(args.repository)
        print("plan-builder: every plan is there")
        return 0
    jobs = find_jobs(args.repository)
    if args.dry_run:
        for job in jobs:
            print(" ".join(trtexec_command(job)))
        return 0
    trtexec = find_trtexec()
    env = detect_env(trtexec)
    print(f"plan-builder: {env.gpu} (compute capability {env.compute_capability}), TensorRT {env.tensorrt}")
    for job in jobs:
        name = f"{job.model}/{job.version}/{job.plan.name}"
        if not args.force and up_to_date(job, env):
            print(f"plan-builder: {name} is up to date, skipped")
            continue
        print(f"plan-builder: building {name}{' (FP16 allowed)' if job.fp16 else ''}", flush=True)
        build(job, env, trtexec)
    print(f"plan-builder: {len(jobs)} plan(s) ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
