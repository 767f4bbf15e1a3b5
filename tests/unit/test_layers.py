"""The layers of pyproject.toml's import-linter contracts hold (docs/architecture.md, "Layers"),
and the check would catch an import that runs back up a layer or from one dialect into another."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_gateway_keeps_its_layers_and_its_dialects_apart():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 kept, 0 broken" in r.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("gateway/core/errors.py", "import gateway.edge  # noqa", "Layers"),  # core reaching up to the edge
    ("gateway/upstream/client.py", "import gateway.dialects  # noqa", "Layers"),  # below the catalogue
    ("gateway/dialects/grps/codec.py", "import gateway.dialects.tfserving.jsonio  # noqa", "No dialect imports"),
    ("gateway/dialects/v2/calls.py", "import gateway.upstream.shm  # noqa", "Dialects stay off"),
    ("gateway/llm/service.py", "import gateway.edge.sanicx  # noqa", "Dialects stay off"),
])
def test_an_import_against_the_layers_breaks_the_contract(tmp_path, module, line, contract):
    shutil.copytree(ROOT / "gateway", tmp_path / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert f"{contract}" in r.stdout and "BROKEN" in r.stdout, r.stdout
