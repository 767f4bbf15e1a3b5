# The gateway image. Triton runs in its own container (compose.yaml, deploy/k8s/).
#
# Two stages: `build` installs the pinned dependency tree into a venv (compiling the gateway's one C
# extension with gcc); `runtime` copies only that venv, the configuration and the model repository
# (sources for the plan-building Job) onto a clean base, and runs as an unprivileged numeric user
# (Kubernetes runAsNonRoot can check it).
#
# The venv holds what the gateway imports and no more: tritonclient[grpc] (its V2 protobuf modules;
# not [all]: no cuda-python, no perf-analyzer, no HTTP client), not huggingface-hub and what only it
# needs (hf-xet, fsspec, filelock, tqdm: tokenizers requires it for from_pretrained, the gateway reads
# tokenizer.json files: gateway/llm/hf.py), no pip or setuptools (nothing installs at run time), no
# numpy test suite, no C/C++/Cython sources, headers, static libraries or type stubs (pysimdjson
# ships 8 MB of them), and the extension modules stripped as Debian strips its shared libraries
# (`strip --strip-unneeded`: uvloop ships 13 MB of debug sections, ml_dtypes 24 MB); never one
# patchelf touched (auditwheel: those with an RPATH, and the libraries in `*.libs/`; strip breaks
# their layout, numpy's OpenBLAS then fails to load); the build ends by importing the gateway from
# the venv, so a broken module fails the build.
# Development and tests install tritonclient[all] (pyproject's `dev` extra; make install).
#
# The base is pinned to a full version tag. To pin it by digest as well (reproducible builds),
# resolve the digest on a machine that can reach Docker Hub and pass it in, e.g.
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm --format '{{json .Manifest.Digest}}'
#   docker build --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest> .
# (docs/deploy.md, "Pinning images").
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# The runtime stage's base: the same Python at the same path as the build's (the venv links to it).
# Where the build base carries what only a build needs (make compose-test's stand-in made from
# Debian's packages has python3-dev), a slimmer one: --build-arg RUNTIME_IMAGE=...
ARG RUNTIME_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# gcc builds the float-text extension (gateway/core/_floattext.c); the runtime stage needs only the
# built .so in the venv (it links against libc alone), so no compiler reaches the image
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# python3, not python: the venv's interpreter links to the one that made it, and a runtime base
# may have no `python` (Debian's python3 without python-is-python3)
RUN python3 -m venv /opt/venv
COPY pyproject.toml ./
COPY requirements/constraints.txt requirements/
COPY gateway gateway
# A CA bundle for pip where the network to the package index needs one (a TLS-inspecting proxy):
# put it at requirements/build-ca/pip-ca.pem before building (scripts/compose-test.sh does, from
# pip's own `cert` setting, and removes it after). Only this stage sees it; the runtime stage below
# copies the venv alone, so no layer of the shipped image holds it.
COPY requirements/build-ca /tmp/build-ca
RUN if [ -f /tmp/build-ca/pip-ca.pem ]; then export PIP_CERT=/tmp/build-ca/pip-ca.pem; fi; \
    /opt/venv/bin/pip install -c requirements/constraints.txt . \
    && /opt/venv/bin/pip uninstall -y -q huggingface-hub hf-xet fsspec filelock tqdm pip setuptools \
    && cd /opt/venv/lib/python3*/site-packages \
    && rm -rf numpy/*/tests numpy/tests \
    && find . -type f \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.a' \
        -o -name '*.pyi' \) -delete \
    && find . -name '*.so' -type f ! -path '*.libs/*' -exec sh -c \
        'for f; do readelf -d "$f" | grep -q "RPATH\|RUNPATH" || strip --strip-unneeded "$f"; done' sh {} + \
    && cd / && /opt/venv/bin/python -c "import gateway.app, gateway.cli, gateway.llm.hf, numpy, uvloop, grpc, simdjson, yaml, tokenizers"

FROM ${RUNTIME_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 gateway && useradd --system --uid 10001 --gid 10001 --no-create-home gateway
COPY --from=build /opt/venv /opt/venv
# the venv runs on this base: its interpreter links resolve and the gateway imports
RUN /opt/venv/bin/python -c "import gateway.app, gateway.cli"
WORKDIR /app
COPY config config
COPY model_repository model_repository
COPY tools/build_plans.py tools/tcp_forward.py tools/
# the commit in gateway_build_info (.git is not in the image): docker build --build-arg GATEWAY_COMMIT=$(git rev-parse HEAD)
# (last: a new commit then rebuilds no layer above, the venv's included)
ARG GATEWAY_COMMIT=""
ENV GATEWAY_COMMIT=${GATEWAY_COMMIT}
USER 10001:10001
EXPOSE 8000 8001 8500 8501 7080 7081 1025 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:9090/health').status != 200)"
ENTRYPOINT ["gateway", "serve"]
CMD ["--config", "config/docker.yaml"]
