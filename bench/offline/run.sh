# `make bench` on a machine without a network (16 cores, say), from the bundle bench/offline/bundle.sh
# made in .dev/ (carried there beside the repository): the scaling runs, then the paths with one
# worker, each into $OUT (results.md, results.json, the logs).
# usage, from the repository root: OUT=<folder> bash .dev/run.sh <scaling budget s> <paths budget s> [path keys]
#   (a budget of 0 skips that part)
# env: INSTANCES (python-backend instances per CPU model, 8), WRK_THREADS (4), REPEATS (2), DURATION (4 s),
#      SCALING (worker counts, 1,4,8,16), SCALING_CONC (connections of the scaling runs, 64),
#      SCALING_ONLY (the scaling rows, scaling,scaling_grpc,scaling_stream; BENCH_SCALING_CHANNELS / _CLIENTS pass through),
#      PY (the interpreter whose numpy the gateway uses, python3), EXTRA_SITE (its site-packages).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
{ date -u; nproc; free -g | head -2; nvidia-smi -L 2>&1 | head -2; python3 -V; df -h /dev/shm | tail -1; uname -r;
  lscpu 2>/dev/null | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))'; } 2>&1 | tee $OUT/machine.txt
t0=$(date +%s)
source .dev/setup.sh 2>&1 | tee -a $OUT/machine.txt
echo "setup took $(( $(date +%s) - t0 )) s"
export PATH=$PWD/.dev/bin:$PATH LD_LIBRARY_PATH=$PWD/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
common="BENCH_TRITON_INSTANCES=${INSTANCES:-8} BENCH_WRK_THREADS=${WRK_THREADS:-4} BENCH_REPEATS=${REPEATS:-2} BENCH_DURATION=${DURATION:-4} BENCH_WARMUP=1 BENCH_IDLE=2"
if [ "${1:-0}" -gt 0 ]; then
  env $common BENCH_FLOOR=0 BENCH_ONLY=${SCALING_ONLY:-scaling,scaling_grpc,scaling_stream} BENCH_SCALING_WORKERS=${SCALING:-1,4,8,16} BENCH_SCALING_CONCURRENCY=${SCALING_CONC:-64} \
    BENCH_BUDGET_S=$1 BENCH_RESULTS=$OUT/scaling timeout $(( $1 + 60 )) .venv/bin/python -m bench.run 2>&1 | tee $OUT/scaling.log
  echo "scaling done at $(( $(date +%s) - t0 )) s"
fi
if [ "${2:-0}" -gt 0 ]; then
  env $common BENCH_ONLY=${3:-tf_rest_small,v2_unary,tf_grpc,grps_gtensors,tf_rest_image,grps_bin,v2_stream} BENCH_WORKERS=1 \
    BENCH_BUDGET_S=$2 BENCH_RESULTS=$OUT/cases timeout $(( $2 + 60 )) .venv/bin/python -m bench.run 2>&1 | tee $OUT/cases.log
fi
echo "all done at $(( $(date +%s) - t0 )) s"
# the logs' last 200 lines each (whole, they can pass what a device call brings back)
for f in $OUT/*/logs/*.log; do [ -f "$f" ] && tail -n 200 "$f" > "${f%/logs/*}/tail-$(basename "$f")"; done
rm -rf $OUT/scaling/logs $OUT/cases/logs $OUT/*/results.png; ls -R $OUT
