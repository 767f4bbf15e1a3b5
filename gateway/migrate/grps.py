"""``gateway import grps``: GRPS's ``conf/inference.yml`` becomes the ``dialects.grps`` mapping.

    gateway import grps --inference-yml conf/inference.yml [--config gateway.yaml]

Every ``models[]`` entry (``name``, ``version``) is exposed under GRPS's own model id
``name-version`` over the Triton model of the same ``name`` (latest version: GRPS versions such as
``1.0.0`` are not Triton's integer versions). The default DAG's first model node becomes
``default_model`` (what a request naming no model reaches). Payload mapping (``ndarray_input``,
``str_input`` ...) is left to the gateway's derivation from Triton's metadata (docs/grps.md), so
``gateway check`` afterwards shows what each payload reaches.

Only names move. GRPS's inferers load TorchScript, SavedModels, TensorRT engines or customized
code with its converters' pre/post-processing; putting those weights into Triton is the business
of Triton's backends (pytorch_libtorch, onnxruntime, tensorrt_plan, python) and is not done here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from gateway.dialects.grps.config import GrpsSettings
from gateway.migrate import yamlfile


class GrpsImportError(Exception):
    pass


def entries(doc: dict) -> tuple[dict[str, dict], str, list[str]]:
    """(model id -> dialects.grps.models entry, default model id or "", notes)."""
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list) or not models:
        raise GrpsImportError("inference.yml has no `models` list")
    out, notes = {}, []
    for i, m in enumerate(models):
        if not isinstance(m, dict) or not m.get("name") or m.get("version") in (None, ""):
            raise GrpsImportError(f"inference.yml models[{i}] needs a name and a version")
        mid = f"{m['name']}-{m['version']}"
        out[mid] = {"triton_model": str(m["name"])}
        kind = m.get("inferer_type", "")
        notes.append(f"{mid}: over Triton model '{m['name']}' (latest version); its {kind or 'unnamed'} inferer's "
                     f"weights must be in model_repository/{m['name']}/ for a Triton backend to load")
    default = ""
    dag = doc.get("dag")
    if isinstance(dag, dict):
        nodes = [n for n in dag.get("nodes") or [] if isinstance(n, dict) and n.get("type", "model") == "model"]
        if nodes and nodes[0].get("model") in out:
            default = nodes[0]["model"]
            if len(nodes) > 1:
                notes.append(f"dag '{dag.get('name', '')}' chains {len(nodes)} models; the gateway calls one Triton "
                             f"model per request: default_model is the first, {default} (a Triton ensemble can chain them)")
    GrpsSettings.model_validate({"models": out})
    return out, default, notes


def run(inference_yml: Path, config: Path) -> tuple[list[str], list[str]]:
    try:
        doc = yaml.safe_load(inference_yml.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise GrpsImportError(f"{inference_yml}: {e}") from None
    models, default, notes = entries(doc)
    changed = yamlfile.merge(config, "grps", models)
    if default:
        changed += yamlfile.set_value(config, ("dialects", "grps", "default_model"), default)
    return changed, notes


def main(args) -> int:
    try:
        changed, notes = run(Path(args.inference_yml), Path(args.config))
    except GrpsImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in notes:
        print(line)
    print(f"{args.config}: {', '.join(changed)} written" if changed else f"{args.config}: already up to date")
    return 0
