# Two commands: `make run` and `make test`. Both install what they need (idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TRITON_VENV ?= .venv-triton
KSERVE_VENV ?= .venv-kserve
BIN := $(VENV)/bin
CONFIG ?= gateway.yaml
PIP_FLAGS ?= --disable-pip-version-check -q

.PHONY: install browser run run-pd test test-unit test-contract test-latest compose-test proto onnx lint bench bench-pd bench-wrk clean \
	migrate-env test-migrate
.PHONY: instructions-check instructions-baseline valgrind bench-h2flood

install: $(VENV)/.installed $(VENV)/.bench-installed $(TRITON_VENV)/.installed .run/legacy-clients/.installed .run/kserve-client/.installed browser

# Real legacy client packages for contract tests (no dependencies: see requirements/legacy-clients.txt).
.run/legacy-clients/.installed: requirements/legacy-clients.txt $(VENV)/.installed
	$(BIN)/pip install $(PIP_FLAGS) --no-deps --upgrade --target .run/legacy-clients -r requirements/legacy-clients.txt
	@touch $@

# KServe's Python SDK for the V2 REST client test (no dependencies: see requirements/kserve-client.txt).
.run/kserve-client/.installed: requirements/kserve-client.txt $(VENV)/.installed
	$(BIN)/pip install $(PIP_FLAGS) --no-deps --upgrade --target .run/kserve-client -r requirements/kserve-client.txt
	@touch $@

# Debian's headless Chromium for the GRPS monitoring-page test (apt-get; skipped with a warning
# where it cannot install: the test then skips, except under CI where it fails).
browser:
	@bash scripts/install-browser.sh || echo "warning: chromium not installed; the monitoring-page browser test will skip"

$(VENV)/.installed: pyproject.toml requirements/constraints.txt gateway/core/_floattext.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) -c requirements/constraints.txt -e ".[dev]"
	@touch $@

# The Triton python-backend stub's own environment: nvidia-pytriton (the tritonserver binary)
# and numpy<2, which the 2.51 stub needs (see docs/local-triton.md).
$(TRITON_VENV)/.installed: requirements/triton-stub.txt
	@test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install $(PIP_FLAGS) -r requirements/triton-stub.txt
	@touch $@

run: install
	$(BIN)/gateway local --config $(CONFIG)

# MindIE PD on 127.0.0.1: local Triton, coordinator :1025, P :2025/:2026, D :3025/:3026 (docs/mindie.md)
run-pd: install
	$(BIN)/gateway run-pd --config $(CONFIG)

# tests/migrate (TensorFlow's answers, minutes) run from `make test-migrate` only; the 25 slowest tests listed at the end (CI logs show where the time goes)
test: install
	$(BIN)/python -m pytest tests -m "not migrate" --durations=25

test-unit: install
	$(BIN)/python -m pytest tests -m "not contract and not migrate"

test-contract: install
	$(BIN)/python -m pytest tests -m contract

# The unit tests and the HTTP differential tests with sanic, grpcio and prometheus-client at their newest
# releases (the pins lifted, in .venv-latest), and which fast paths survive them (gateway/observe/fastpaths.py).
LATEST := sanic sanic-routing grpcio prometheus-client
test-latest: $(TRITON_VENV)/.installed .run/legacy-clients/.installed .run/kserve-client/.installed
	@test -x .venv-latest/bin/python || $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/pip install $(PIP_FLAGS) -c requirements/constraints.txt -e ".[dev]"
	.venv-latest/bin/pip install $(PIP_FLAGS) --upgrade $(LATEST)
	.venv-latest/bin/python -m gateway.tools.fastpaths
	.venv-latest/bin/python -m pytest tests/unit tests/contract/test_fastlane.py tests/contract/test_v2_http_differential.py

# `docker compose -f compose.yaml -f compose.cpu.yaml up` for real: installs Docker and Compose v2 when
# missing, builds the gateway image and Triton's CPU image, brings the stack up, runs every dialect's
# real client and the faults against the published 127.0.0.1 ports, tears it all down (docs/deploy.md).
compose-test: $(VENV)/.installed .run/legacy-clients/.installed
	bash scripts/compose-test.sh

proto: $(VENV)/.installed
	$(BIN)/python -m gateway.tools.genproto

# Regenerate the ONNX graphs the GPU TensorRT plans are built from, each checked with onnxruntime
# against its CPU twin (own venv: onnx needs numpy>=2, protobuf 7).
onnx:
	@test -x .venv-onnx/bin/python || $(PYTHON) -m venv .venv-onnx
	.venv-onnx/bin/pip install $(PIP_FLAGS) onnx==1.23.2 onnxruntime==1.31.1
	.venv-onnx/bin/python tools/make_onnx.py

# `gateway import tfserving`'s conversion step (gateway/migrate/tf_convert.py): TensorFlow, tf2onnx,
# ONNX Runtime and tensorflow-serving-api in their own venv (TensorFlow pins its own protobuf/numpy).
TF_VENV ?= .venv-tf
migrate-env: $(TF_VENV)/.installed
$(TF_VENV)/.installed: requirements/migrate.txt
	@test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/pip install $(PIP_FLAGS) -r requirements/migrate.txt
	@touch $@

# The import proven against TensorFlow (tests/migrate, marker migrate: not part of `make test`).
test-migrate: install $(TF_VENV)/.installed
	$(BIN)/python -m pytest tests/migrate -m migrate

lint: $(VENV)/.installed
	$(BIN)/ruff check gateway tests bench tools soak
	$(BIN)/lint-imports
	$(BIN)/python -m gateway.tools.genproto --check

# The guard for the hot paths (bench/instructions_check.py, docs/testing.md): callgrind instructions per
# call of the V2 passthrough, TF gRPC Predict and TF REST predict, each the least of RUNS (3) runs,
# against bench/instructions_baseline.json; fails when one is above its tolerance (3-8 %, per kind:
# bench/instructions_check.py). Its own Triton on
# free 127.0.0.1 ports. CI runs it after `make test`.
instructions-check: $(VENV)/.installed $(TRITON_VENV)/.installed valgrind
	$(BIN)/python -m bench.instructions_check

# Measure the same and rewrite the baseline (a change meant to cost more or less, an upgrade, a merge).
instructions-baseline: $(VENV)/.installed $(TRITON_VENV)/.installed valgrind
	$(BIN)/python -m bench.instructions_check --write

# valgrind, which counts the instructions (Debian package).
valgrind:
	@command -v callgrind_control >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; } \
		|| { echo "error: valgrind is missing and could not be installed: apt-get install -y valgrind"; exit 1; }

# Its own Triton and gateway on free 127.0.0.1 ports, stopped at the end (also on Ctrl-C): every row, about 11 minutes,
# BENCH_QUICK=1 about 2. Writes bench/results/ (results.md, results.png, results.json); settings: bench/run.py.
# Then the anchors (bench-anchors below, about 3 minutes more) unless BENCH_ONLY is set without naming anchors;
# BENCH_ONLY=anchors runs only them.
bench: $(VENV)/.installed $(TRITON_VENV)/.installed $(VENV)/.bench-installed $(KSERVE_VENV)/.installed bench-wrk bench-nginx
	@if [ "$(BENCH_ONLY)" != anchors ]; then $(BIN)/python -m bench.run; fi
	$(BIN)/python -m bench.anchors --make-bench $(ANCHORS_ARGS)

# The gateway beside its two anchors in one run (bench/anchors.py, docs/benchmarks.md): Debian's nginx grpc_pass
# beside the V2 gRPC passthrough (gateway ÷ nginx CPU per call, unary and stream messages) and KServe's transformer
# beside the TF Serving REST predict; one Triton and one gateway (gateway.yaml), 127.0.0.1 only, all stopped at the
# end; about 3 minutes. Writes bench/results/anchors/. ANCHORS_ARGS="--only nginx" for the nginx row alone; --help.
.PHONY: bench-anchors bench-nginx
bench-anchors: $(VENV)/.installed $(TRITON_VENV)/.installed $(KSERVE_VENV)/.installed bench-wrk bench-nginx
	$(BIN)/python -m bench.anchors $(ANCHORS_ARGS)

# nginx, the C proxy of the anchors (Debian package: nginx-light has the http2 and grpc modules). Where it cannot
# be installed the nginx row says so and the rest of the bench runs.
bench-nginx:
	@PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx-light; } \
		|| echo "warning: nginx is missing and could not be installed (apt-get install -y nginx-light): the nginx anchor row will not run"

# Its own Triton and gateway on free 127.0.0.1 ports, stopped at the end (also on Ctrl-C): steady load
# over every dialect while Triton is SIGKILLed and restarted, clients vanish mid-stream, oversized,
# malformed and schemathesis-fuzzed requests arrive. SOAK_SECONDS (180) and more: soak/run.py.
# Writes soak/results/ (summary.md, results.json); fails when a request is lost or memory grows.
.PHONY: soak
soak: $(VENV)/.installed $(TRITON_VENV)/.installed
	$(BIN)/python -m soak.run

# MindIE PD: standard instance vs coordinator + P + D (bench/pd_latency.py), on a stack of its own.
bench-pd: $(VENV)/.installed $(TRITON_VENV)/.installed
	$(BIN)/python -m bench.pd_latency

# The gateway against KServe's transformer pattern (bench/kserve_side.py, docs/benchmarks.md): its own Triton,
# gateway (gateway.yaml, one worker) and kserve.ModelServer transformer (.venv-kserve) on free 127.0.0.1 ports,
# stopped at the end (also on Ctrl-C); about 5 minutes. Writes bench/results/kserve/. Options: KSERVE_ARGS="--help".
.PHONY: bench-kserve
bench-kserve: $(VENV)/.installed $(TRITON_VENV)/.installed $(KSERVE_VENV)/.installed bench-wrk
	$(BIN)/python -m bench.kserve_side $(KSERVE_ARGS)

# KServe's SDK and model server in their own venv (requirements/bench-kserve.txt: every version pinned).
$(KSERVE_VENV)/.installed: requirements/bench-kserve.txt
	@test -x $(KSERVE_VENV)/bin/python || $(PYTHON) -m venv $(KSERVE_VENV)
	$(KSERVE_VENV)/bin/pip install $(PIP_FLAGS) --no-deps -r requirements/bench-kserve.txt
	@touch $@

# matplotlib for the chart, pinned in requirements/bench.txt, into the gateway's venv.
$(VENV)/.bench-installed: requirements/bench.txt $(VENV)/.installed
	$(BIN)/pip install $(PIP_FLAGS) -c requirements/constraints.txt -r requirements/bench.txt
	@touch $@

# wrk, the HTTP load generator (Debian package).
# HTTP/2 floods (issue 52) against a gRPC listener on h2serve and on grpc core's server, a good client
# beside each: RSS growth, CPU, the good client's p99 and failures (bench/h2flood.py, docs/operations.md).
# 127.0.0.1 only, about 6 min; H2FLOOD_ARGS e.g. "--kinds h2 --attacks hpack_bomb --seconds 10".
bench-h2flood: $(VENV)/.installed
	$(BIN)/python -m bench.h2flood $(H2FLOOD_ARGS)

bench-wrk:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; } \
		|| { echo "error: wrk is missing and could not be installed: apt-get install -y wrk"; exit 1; }

clean:
	rm -rf $(VENV) $(TRITON_VENV) .venv-onnx .venv-latest $(TF_VENV) $(KSERVE_VENV) .run
