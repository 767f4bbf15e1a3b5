"""Every example in README.md and docs/*.md runs against the local stack, so none can rot.

The convention (docs/architecture.md, "Examples that run"):

* a fenced block whose language is ``sh``, ``bash`` or ``python`` is run, one test per block
  (its id is ``file:line`` of the opening fence), unless the last non-blank line before it is
  ``<!-- no-run: reason -->`` (skipped with that reason; a reason is required) or
  ``<!-- walkthrough -->`` (run by the walkthrough's own test);
* blocks run from a scratch copy of the repository root (symlinks), so files they write stay out
  of the checkout;
* ``sh``/``bash`` blocks run in ``bash`` with ``set -euo pipefail`` and must exit 0 (so curl
  examples use ``curl -sf`` unless they show an error answer); ``python`` blocks run with the
  gateway's environment, where the dialects' own clients are installed (tritonclient, openai,
  text-generation, tensorflow-serving-api's stubs, grps_apis stubs generated from proto/grps.proto);
* the ports in the docs are the defaults (8501, 8500, 7080, 7081, 1025, 8001, 8000, 9090; Triton's
  18000-18002): ``localhost:<port>`` and ``127.0.0.1:<port>`` are rewritten to this session's free
  ports before the block runs; the gateway runs with the repository's gateway.yaml (what
  ``make run`` uses) in front of the session's Triton;
* a ``text`` block right after a run block is its expected output, checked loosely: each of its
  non-blank lines must appear in the block's stdout, in order, with whitespace runs equal and
  ``...`` standing for anything.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"sh": "bash", "bash": "bash", "python": "python"}
LISTENER_PORTS = {8501: "tfserving_rest", 8500: "tfserving_grpc", 7080: "grps_http", 7081: "grps_grpc",
                  1025: "mindie_http", 8001: "v2_grpc", 9090: "admin_http", 8000: "v2_http"}
TRITON_PORTS = {18000: "http_port", 18001: "grpc_port", 18002: "metrics_port"}
LEGACY = ROOT / ".run" / "legacy-clients"
TIMEOUT_S = 90

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>.*?)\s*-->$")
_WALKTHROUGH = re.compile(r"^<!--\s*walkthrough\b.*-->$")
_ADDRESS = re.compile(r"\b(?P<host>localhost|127\.0\.0\.1):(?P<port>\d{2,5})\b")
# Never run from a test, whatever the docs say: they start containers, clusters or long-running stacks.
_NEVER = re.compile(r"(?m)(?:^|[;&|(]|\bsudo\b|\benv\b)\s*(?:\w+=\S*\s+)*"
                    r"(docker|kubectl|kustomize|helm|make\s+(?:run|run-pd|bench\S*|test\S*|instructions-\S*|compose-\S*|migrate-\S*))\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None = None  # why it is not run here
    expected: str | None = None  # the text block that follows, if any

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def parse(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with its no-run/walkthrough marker and expected output."""
    lines = path.read_text().splitlines()
    raw: list[tuple[int, int, str, str, str | None]] = []  # (open, close index, lang, code, line before)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent, start = m["fence"], len(m["indent"]), i
        before = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), None)
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        raw.append((start, i, m["lang"].lower(), "\n".join(body) + "\n", before))
        i += 1
    blocks: list[Block] = []
    for n, (start, end, lang, code, before) in enumerate(raw):
        if lang not in RUN:
            continue
        skip = None
        if before and (m := _NO_RUN.match(before)):
            if not m["reason"]:
                raise ValueError(f"{path.name}:{start + 1}: `<!-- no-run: reason -->` needs a reason")
            skip = f"no-run: {m['reason']}"
        elif before and _WALKTHROUGH.match(before):
            skip = "walkthrough: run by the walkthrough's own test"
        expected = None
        if n + 1 < len(raw):
            nxt_start, _, nxt_lang, nxt_code, _ = raw[n + 1]
            if nxt_lang == "text" and all(not ln.strip() for ln in lines[end + 1:nxt_start]):
                expected = nxt_code
        blocks.append(Block(path, start + 1, lang, code, skip, expected))
    return blocks


def rewrite_ports(code: str, listeners: dict[str, int], triton: dict[str, int]) -> str:
    """Default ports → this session's ports, for ``localhost:P`` and ``127.0.0.1:P`` only."""

    def sub(m: re.Match) -> str:
        port = int(m["port"])
        if port in LISTENER_PORTS:
            return f"{m['host']}:{listeners[LISTENER_PORTS[port]]}"
        if port in TRITON_PORTS:
            return f"{m['host']}:{triton[TRITON_PORTS[port]]}"
        return m.group(0)

    return _ADDRESS.sub(sub, code)


def loose_mismatch(expected: str, output: str) -> str | None:
    """None when every non-blank expected line occurs in ``output`` in order (whitespace runs equal,
    ``...`` matching anything); else what was not found."""
    out = " ".join(output.split())
    pos = 0
    for line in expected.splitlines():
        for frag in " ".join(line.split()).split("..."):
            frag = frag.strip()
            if not frag:
                continue
            found = out.find(frag, pos)
            if found < 0:
                return f"expected output line {line.strip()!r}: {frag!r} not found (in order)"
            pos = found + len(frag)
    return None


ALL = [b for doc in DOCS for b in parse(doc)]


# ---- the harness itself (no stack needed) ------------------------------------------------------

def test_parse_markers_expected_output_and_line_numbers(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("\n".join([
        "# t",  # 1
        "```sh",  # 2
        "curl -sf localhost:8501/v1/models/m",  # 3
        "```",  # 4
        "",  # 5
        "```text",  # 6
        '"state": "AVAILABLE"',  # 7
        "```",  # 8
        "<!-- no-run: needs a GPU -->",  # 9
        "```bash",  # 10
        "docker compose up",  # 11
        "```",  # 12
        "<!-- walkthrough -->",  # 13
        "```python",  # 14
        "print(1)",  # 15
        "```",  # 16
        "prose",  # 17
        "```text",  # 18
        "not expected output: prose between",  # 19
        "```",  # 20
        "```yaml",  # 21
        "a: 1",  # 22
        "```",  # 23
    ]) + "\n")
    blocks = parse(doc)
    assert [(b.line, b.lang, b.skip) for b in blocks] == [
        (2, "sh", None), (10, "bash", "no-run: needs a GPU"),
        (14, "python", "walkthrough: run by the walkthrough's own test")]
    assert blocks[0].code == "curl -sf localhost:8501/v1/models/m\n"
    assert blocks[0].expected == '"state": "AVAILABLE"\n'
    assert blocks[2].expected is None


def test_no_run_needs_a_reason(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("<!-- no-run: -->\n```sh\nmake run\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        parse(doc)


def test_ports_are_rewritten_only_where_known():
    listeners = {name: 40000 + i for i, name in enumerate(LISTENER_PORTS.values())}
    code = "curl localhost:8501/x 127.0.0.1:1025 http://localhost:9090/metrics localhost:12345 host:8501 18001"
    got = rewrite_ports(code, listeners, {"http_port": 1, "grpc_port": 2, "metrics_port": 3})
    assert got == "curl localhost:40000/x 127.0.0.1:40004 http://localhost:40006/metrics localhost:12345 host:8501 18001"
    assert rewrite_ports("localhost:18001", listeners, {"grpc_port": 2}) == "localhost:2"


def test_containers_clusters_and_long_runs_are_never_started():
    for code in ("docker compose up\n", "cd x && kubectl apply -k .\n", "make run\n", "BENCH_QUICK=1 make bench\n",
                 "  make test-unit\n", "make instructions-check\n"):
        assert _NEVER.search(code), code
    for code in ("curl -sf localhost:9090/health\n", "echo docker\n", "python3 tools/build_plans.py x --dry-run\n"):
        assert not _NEVER.search(code), code


def test_loose_matching():
    out = '{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}\n'
    assert loose_mismatch('"predictions": [3.5, 4.0, 5.5 ]', out) is None
    assert loose_mismatch('{\n...\n"predictions": [3.5, ... 5.5', out) is None
    assert loose_mismatch('"predictions": [3.5, 4.0, 5.6]', out) is not None
    assert loose_mismatch("5.5\n3.5", out) is not None  # order counts


def test_every_doc_has_examples_and_each_id_is_unique():
    ids = [b.id for b in ALL]
    assert len(ids) == len(set(ids))
    assert {b.path.name for b in ALL if b.skip is None} >= {"README.md", "tfserving.md", "grps.md", "mindie.md"}


# ---- the examples ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def docs_stack(triton, tmp_path_factory):
    """gateway.yaml (what `make run` uses) in front of the session's Triton, every listener on a free port."""
    tmp = tmp_path_factory.mktemp("docs-gateway")
    config = yaml.safe_load((ROOT / "gateway.yaml").read_text())
    ports = {name: free_port() for name in LISTENER_PORTS.values()}
    config.update(gateway_config(triton.grpc_target, ports))
    config["upstream"] = {**yaml.safe_load((ROOT / "gateway.yaml").read_text())["upstream"],
                          "grpc": triton.grpc_target}
    gw = start_gateway(config, tmp)
    triton_ports = {"http_port": triton.cfg.http_port, "grpc_port": triton.cfg.grpc_port,
                    "metrics_port": triton.cfg.metrics_port}
    # Blocks run in a scratch directory that looks like the repository root (a symlink per entry),
    # so an example that writes a file (`cp gateway.yaml my.yaml`) leaves nothing in the checkout.
    work = tmp / "repo"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry)
    yield ports, triton_ports, tmp, work
    stop_gateway(gw)


@pytest.fixture(scope="module")
def client_path(tmp_path_factory) -> str:
    """PYTHONPATH for python examples: the legacy clients' own packages (tensorflow-serving-api's
    stubs with TensorFlow's core protos compiled from proto/; GRPS's grps_apis from proto/grps.proto)."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("doc-clients")
    tf = out / "tf"
    tf.mkdir()
    protos = [str(p.relative_to(ROOT / "proto")) for top in ("tensorflow", "xla")
              for p in (ROOT / "proto" / top).rglob("*.proto")]
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={tf}", *protos]) == 0
    for d in [tf, *(p for p in tf.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    grps = out / "grps" / "grps_apis"
    grps.mkdir(parents=True)
    assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={grps}", f"--grpc_python_out={grps}",
                        str(ROOT / "proto" / "grps.proto")]) == 0
    # as GRPS's own grps_apis package: its generated modules import each other as top-level modules
    (grps / "__init__.py").write_text("import os, sys\nsys.path.append(os.path.dirname(__file__))\n")
    if not (LEGACY / "tensorflow_serving").exists():
        pytest.fail("tensorflow-serving-api is not installed in .run/legacy-clients: run `make install`")
    return os.pathsep.join([str(tf), str(LEGACY), str(out / "grps")])


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=b.skip)] if b.skip else [])
              for b in ALL])
def test_doc_example_runs(block: Block, docs_stack, client_path):
    if block.lang == "bash" or block.lang == "sh":
        never = _NEVER.search(block.code)
        assert never is None, (f"{block.id} would run `{never.group(1)}`: mark the block "
                               f"`<!-- no-run: reason -->` (docs/architecture.md, \"Examples that run\")")
    ports, triton_ports, tmp, work = docs_stack
    code = rewrite_ports(block.code, ports, triton_ports)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = client_path
    env["PYTHONWARNINGS"] = "ignore"
    if block.lang == "python":
        script = tmp / f"{block.path.stem}_{block.line}.py"
        script.write_text(code)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-c", "set -euo pipefail\n" + code]
    run = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    shown = f"--- ran ({block.id}):\n{code}--- stdout:\n{run.stdout[-3000:]}--- stderr:\n{run.stderr[-3000:]}"
    assert run.returncode == 0, f"exit code {run.returncode}\n{shown}"
    if block.expected is not None:
        problem = loose_mismatch(block.expected, run.stdout)
        assert problem is None, f"{problem}\n{shown}"
