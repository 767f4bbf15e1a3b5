"""docs/expose-a-model.md, performed step by step against the real Triton: the YAML snippet and the
commands come out of the page's blocks marked ``<!-- walkthrough: ID -->`` (so the page cannot rot),
with the documented default ports replaced by this session's free ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from gateway.dialects import LISTENERS
from tests.support import ROOT, free_port, start_gateway, stop_gateway

DOC = ROOT / "docs" / "expose-a-model.md"
TF_NAME, GRPS_NAME = "half_plus_two_legacy", "half_plus_two-1.0.0"


def blocks() -> dict[str, str]:
    """ID -> the fenced block right after ``<!-- walkthrough: ID -->``."""
    found = re.findall(r"<!-- walkthrough: ([\w-]+) -->\n```[\w]*\n(.*?)```", DOC.read_text(), re.S)
    return dict(found)


def merge(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def user_config(snippet: str, triton_target: str, ports: dict[str, int]) -> dict:
    """gateway.yaml with the page's snippet added, as the user's my-gateway.yaml; only the upstream and
    the listeners' ports differ (this session's Triton, free ports)."""
    cfg = merge(yaml.safe_load((ROOT / "gateway.yaml").read_text()), yaml.safe_load(snippet))
    cfg["upstream"]["grpc"] = triton_target
    cfg["listeners"] = {name: {"host": "127.0.0.1", "port": port} for name, port in ports.items()}
    return cfg


def localize(text: str, ports: dict[str, int], config_path) -> str:
    """The page's command with this session's ports and config file."""
    for name, port in ports.items():
        text = text.replace(f"localhost:{LISTENERS[name].port}", f"127.0.0.1:{port}")
        text = text.replace(f"{name} :{LISTENERS[name].port}", f"{name} :{port}")  # check's section titles
    return text.replace("my-gateway.yaml", str(config_path))


def sh(command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def in_order(shown: list[str], printed: list[str]) -> bool:
    """Every line the page shows is printed, in the same order (other lines may come between)."""
    rest = iter(printed)
    return all(any(line == p for p in rest) for line in shown)


def squeeze(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def page() -> dict[str, str]:
    b = blocks()
    missing = {"config", "start", "check", "check-output", "mistake-output", "tf-rest", "tf-rest-output",
               "tf-grpc", "tf-grpc-output", "grps", "grps-output"} - set(b)
    assert not missing, f"docs/expose-a-model.md lost its marked blocks: {sorted(missing)}"
    return b


@pytest.fixture(scope="module")
def walk(page, triton, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("walkthrough")
    ports = {name: free_port() for name in LISTENERS}
    cfg = user_config(page["config"], triton.grpc_target, ports)
    gw = start_gateway(cfg, tmp)  # the page's `make run CONFIG=...` is `gateway local`: here `gateway serve`
    yield ports, gw.config_path, triton.grpc_target
    stop_gateway(gw)


def test_the_page_starts_the_gateway_with_the_users_file(page):
    assert page["start"].strip() == "make run CONFIG=my-gateway.yaml"


def test_check_passes_and_shows_both_names(page, walk):
    ports, config, _ = walk
    run = sh(localize(page["check"], ports, config))
    assert run.returncode == 0, run.stdout + run.stderr
    assert TF_NAME in run.stdout and GRPS_NAME in run.stdout
    shown = [line for line in squeeze(localize(page["check-output"], ports, config)) if line != "..."]
    assert in_order(shown, squeeze(run.stdout)), f"the page shows\n{page['check-output']}\ncheck printed:\n{run.stdout}"
    assert re.search(r"^0 error\(s\), \d+ warning\(s\)$", run.stdout, re.M)


def test_tf_serving_rest_answers(page, walk):
    ports, config, _ = walk
    run = sh(localize(page["tf-rest"], ports, config))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == page["tf-rest-output"].strip()  # TF Serving's PrettyWriter bytes


def test_tf_serving_grpc_answers(page, walk, tmp_path):
    ports, config, _ = walk
    script = tmp_path / "tf_grpc_client.py"
    script.write_text(localize(page["tf-grpc"], ports, config))
    run = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == page["tf-grpc-output"].strip()


def test_grps_http_answers(page, walk):
    ports, config, _ = walk
    run = sh(localize(page["grps"], ports, config))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(page["grps-output"])


def test_a_wrong_mapping_fails_check_naming_it(page, walk, tmp_path):
    """The page's mistakes: a misspelled Triton model and an input the model does not have."""
    ports, _, target = walk
    snippet = page["config"]
    assert "triton: half_plus_two " in snippet and "ndarray_input: x " in snippet
    wrong = snippet.replace("triton: half_plus_two ", "triton: half_plus_tw0 ").replace(
        "ndarray_input: x ", "ndarray_input: x_wrong ")
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(user_config(wrong, target, ports)))
    run = sh(localize(page["check"], ports, path))
    assert run.returncode == 1, run.stdout + run.stderr
    assert in_order(squeeze(page["mistake-output"]), squeeze(run.stdout)), run.stdout
