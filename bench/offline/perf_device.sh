# A device check on a machine without a network (16 cores), from the bundle bench/offline/bundle.sh
# made in .dev/: (1) bench/stream_vs_unary.py, grpc.aio's unary call against the h2 client's, CPU per
# request on both sides; (2) the translating paths through one gateway worker, the floor beside them;
# (3) the scaling rows with 1, 2, 4, 8 workers. Each side on cores of its own (taskset / BENCH_CPUS_*).
# Everything into $OUT.
# usage, from the repository root: OUT=<folder> bash bench/offline/perf_device.sh [parts, default 1,2,3]
# env: DURATION (2 s), REPEATS (2), N (3000 requests a stream_vs_unary run), INSTANCES (8)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
PARTS=${1:-1,2,3}
export PYTHONUNBUFFERED=1
{ date -u; nproc; free -g | head -2; python3 -V; uname -r; lscpu 2>/dev/null | grep -E '^(Model name|Core|Socket|Thread)'; } 2>&1 | tee $OUT/machine.txt
t0=$(date +%s)
source bench/offline/setup.sh >> $OUT/machine.txt 2>&1
echo "setup took $(( $(date +%s) - t0 )) s"
export PATH=$PWD/.dev/bin:$PATH LD_LIBRARY_PATH=$PWD/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=${DURATION:-2} R=${REPEATS:-2}
pack() {  # a part's files into one archive as soon as it ends (what a device call brings back is few files)
  for f in $OUT/$1*/logs/*.log; do [ -f "$f" ] && tail -n 100 "$f" > "${f%/logs/*}/tail-$(basename "$f")"; done
  rm -rf $OUT/$1*/logs $OUT/$1*/results.png
  (cd $OUT && tar -czf $1.tgz --exclude='*.tgz' $1* && rm -rf $(ls -d $1* | grep -v '\.tgz$'))
}
common="BENCH_TRITON_INSTANCES=${INSTANCES:-8} BENCH_WRK_THREADS=2 BENCH_REPEATS=$R BENCH_DURATION=$D BENCH_WARMUP=1 BENCH_IDLE=1"
if [[ $PARTS == *1* ]]; then  # client on 2 cores, Triton on 12
  env TASKSET_CLIENT=0-1 TASKSET_TRITON=4-15 INSTANCES=${INSTANCES:-8} N=${N:-3000} ROUNDS=2 CONC=1,8,64 MODES=unary,h2 \
    RESULTS=$OUT/svu.json timeout 130 .venv/bin/python -m bench.stream_vs_unary 2>&1 | tee $OUT/svu.log
  cp $OUT/svu.log $OUT/summary-svu.txt; pack svu
  echo "part 1 done at $(( $(date +%s) - t0 )) s"
fi
if [[ $PARTS == *2* ]]; then  # load on 4 cores, the one gateway worker (and the floor) on 2, Triton on 10
  pins="BENCH_CPUS_LOAD=0-3 BENCH_CPUS_GATEWAY=4-5 BENCH_CPUS_TRITON=6-15"
  env $common $pins BENCH_ONLY=tf_rest_small,tf_grpc,grps_gtensors,v2_rest_json \
    BENCH_WORKERS=1 BENCH_BUDGET_S=140 BENCH_RESULTS=$OUT/paths timeout 170 .venv/bin/python -m bench.run 2>&1 | tee $OUT/paths.log
  pack paths
  echo "part 2 done at $(( $(date +%s) - t0 )) s"
fi
if [[ $PARTS == *3* ]]; then  # gateway workers on 8 cores, load on 3, Triton on 5
  env $common BENCH_REPEATS=1 BENCH_FLOOR=0 BENCH_CPUS_LOAD=8-10 BENCH_CPUS_GATEWAY=0-7 BENCH_CPUS_TRITON=11-15 \
    BENCH_ONLY=scaling,scaling_grpc,scaling_stream BENCH_SCALING_WORKERS=1,2,4,8 BENCH_SCALING_CONCURRENCY=64 \
    BENCH_SCALING_CLIENTS=2 BENCH_BUDGET_S=140 BENCH_RESULTS=$OUT/scaling timeout 170 .venv/bin/python -m bench.run 2>&1 | tee $OUT/scaling.log
  pack scaling
  echo "part 3 done at $(( $(date +%s) - t0 )) s"
fi
ls -la $OUT
