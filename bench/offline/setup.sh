# Lays out, on a bare machine without a network, what `make install` would, from the bundle in .dev/
# (bench/offline/bundle.sh): .venv-triton (Triton, the 3.12 stub, numpy 1.26) and .venv (the gateway's
# pinned packages, then the machine's numpy). Sourced by run.sh from the repository root.
# PY: the interpreter with numpy (the device's python3); EXTRA_SITE: where its numpy lives (default: PY's purelib).
set -e
R=$PWD
D=$R/.dev
PY=${PY:-python3}
BASE=$($PY -c 'import sys; print(sys._base_executable)')
EXTRA_SITE=${EXTRA_SITE:-$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')}
echo "setup: PY=$PY BASE=$BASE EXTRA_SITE=$EXTRA_SITE"
untar() { $BASE -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
# Triton's venv: tritonserver + its libraries + numpy 1.26 (the 2.51 stub)
rm -rf .venv-triton && $BASE -m venv --without-pip .venv-triton
TS=$(.venv-triton/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
untar $D/triton.tar.xz "$TS" & untar $D/tsite.tar.xz "$TS" &
# the gateway's venv: our pinned packages first, the machine's numpy after them
rm -rf .venv && $BASE -m venv --without-pip .venv
GS=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
untar $D/gsite.tar.xz "$GS" &
wait
echo "$R" > "$GS/gateway-src.pth"
echo "$EXTRA_SITE" > "$GS/zz-machine.pth"
cp $D/_floattext.cpython-312-x86_64-linux-gnu.so gateway/core/
LIBDIR=$(.venv-triton/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
if [ ! -e "$LIBDIR/libpython3.12.so.1.0" ]; then
  echo "setup: no $LIBDIR/libpython3.12.so.1.0: the carried one"; cp "$TS/libpy/libpython3.12.so.1.0" "$TS/nvidia_pytriton.libs/"
fi
mkdir -p .dev/bin && cp $D/wrk .dev/bin/ && chmod +x .dev/bin/wrk
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
wrk --version 2>&1 | head -1 || true
.venv/bin/python -c 'import gateway.core._floattext, sanic, grpc, numpy, orjson, tritonclient.grpc; print("gateway env ok: numpy", numpy.__version__, "grpc", grpc.__version__)'
.venv-triton/bin/python -c 'import numpy; print("stub numpy", numpy.__version__)'
set +e
