#!/usr/bin/env bash
# Builds .dev/ (git-ignored through .git/info/exclude): everything `make bench` needs on an x86-64
# machine with Python 3.12 and no network, in about 45 MB: Triton from .venv-triton (stripped, its
# bundled libraries, the 3.12 python-backend stub, libpython3.12 in case that machine has none),
# numpy 1.26 for the stub, the gateway's pinned packages for cp312 (the machine's own numpy is used),
# the compiled float writer for cp312, wrk and its libluajit. There: `bash bench/offline/run.sh`
# (docs in that file). Needs here: `make install`, a python3.12 (PY312), pip's index, strip, xz.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${PY312:-}" ]; then
  for PY312 in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 ""; do
    [ -n "$PY312" ] && "$PY312" -V >/dev/null 2>&1 && break
  done
fi
[ -n "$PY312" ] || { echo "bundle.sh: no python3.12 here (set PY312)"; exit 1; }
OUT=.dev
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
grep -qxF "/$OUT/" .git/info/exclude 2>/dev/null || echo "/$OUT/" >> .git/info/exclude
rm -rf "$OUT" && mkdir -p "$OUT"
pip312() { "$PY312" -m pip --disable-pip-version-check -q "$@"; }
# the gateway's dependencies as pyproject.toml pins them, for cp312, without numpy (the machine's);
# tritonclient's grpc extra only: the gateway imports tritonclient.grpc alone ([all] adds 43 MB of cuda-python)
deps=$("$PY312" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))' \
       | grep -v '^numpy' | sed 's/^tritonclient\[all\]/tritonclient[grpc]/')
pip312 download --only-binary=:all: -c requirements/constraints.txt -d "$W/whl" $deps
rm -f "$W"/whl/numpy-* "$W"/whl/ml_dtypes-* "$W"/whl/setuptools-*
pip312 install --no-index --no-deps --no-compile --target "$W/gsite" "$W"/whl/*.whl
pip312 download --only-binary=:all: --no-deps -d "$W/stubwhl" numpy==1.26.4
pip312 install --no-index --no-deps --no-compile --target "$W/tsite" "$W"/stubwhl/*.whl
# Triton: what tritonserver, the python backend, the local cache and the 3.12 stub load
S=$(.venv-triton/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
T=$W/tri/pytriton/tritonserver
mkdir -p "$T/backends/python" "$T/python_backend_stubs" "$W/tri/libpy"
cp -a "$S/nvidia_pytriton.libs" "$W/tri/" && rm -f "$W"/tri/nvidia_pytriton.libs/libpython3-*
cp -a "$S/pytriton/tritonserver/bin" "$S/pytriton/tritonserver/caches" "$T/"
cp -a "$S"/pytriton/tritonserver/backends/python/{libtriton_python.so,triton_python_backend_utils.py} "$T/backends/python/"
cp -a "$S/pytriton/tritonserver/python_backend_stubs/3.12" "$T/python_backend_stubs/"
cp "$("$PY312" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')/libpython3.12.so.1.0" "$W/tri/libpy/"
rm -rf "$W"/tsite/numpy/tests "$W"/tsite/numpy/*/tests
find "$W/gsite" "$W/tsite" "$W/tri" -type f \( -name '*.so*' -o -name tritonserver -o -name triton_python_backend_stub \) \
  -exec strip --strip-unneeded {} +
for part in gsite tsite tri; do tar -C "$W/$part" -cf - . | xz -9 -T0 > "$OUT/$part.tar.xz"; done
mv "$OUT/tri.tar.xz" "$OUT/triton.tar.xz"
# the float writer for cp312
mkdir -p "$W/src" && git archive HEAD | tar -x -C "$W/src"
pip312 wheel --no-deps "$W/src" -w "$W/gw"
unzip -o -q -j "$W"/gw/gateway-*.whl 'gateway/core/_floattext*.so' -d "$OUT/"
cp "$(command -v wrk)" "$OUT/wrk"
cp "$(ldd "$(command -v wrk)" | awk '/libluajit/ {print $3}')" "$OUT/"
cp bench/offline/setup.sh bench/offline/run.sh "$OUT/"
du -sh "$OUT"
