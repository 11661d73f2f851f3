#!/usr/bin/env bash
# Does attention dropout cost its passes through occupancy? One device call, within DEADLINE seconds
# (540): dfgnn-verify --tiny of this tree (the float64 reference, the held dropout kernels among its
# cases); the A/B of bench/ab-dropout.txt, plain and with --dropout 0.6, .ab/base.tgz (the tree before
# the held dropout kernels) against this tree, in two rounds as time allows; then, time left, ncu's
# registers, occupancy and instructions of R-MAT 2^20 GAT 1x7 and 8x8's rows kernels in both trees with
# dropout, and in this tree without (new0).
# Usage (device, repository root): bash bench/experiments/dropout-occupancy/run.sh OUTDIR
# Holding the kernels that spill too (GAT 8x8's row pass), against this tree as it is: here,
#   AB_BASE=HEAD bash bench/carry-inputs.sh ab && git apply bench/experiments/dropout-occupancy/hold-spills.patch
# then on the device DFGNN_SHIPPED_DB=off bash bench/experiments/dropout-occupancy/run.sh OUTDIR (both trees
# compile their own modules: the shipped modules file holds dropout kernels by this tree's rule, and the
# patch changes no kernel source, so its modules would have the same keys).
set -uo pipefail
out=${1:?outdir}
deadline=${DEADLINE:-540}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
ab_round() {
  AB_CASES=bench/ab-dropout.txt bash bench/shapes-gpu.sh "$out/p0$1" ab > "$out/p0$1.log" 2>&1
  AB_CASES=bench/ab-dropout.txt AB_BENCH_ARGS="--dropout 0.6" bash bench/shapes-gpu.sh "$out/p6$1" ab > "$out/p6$1.log" 2>&1
  echo "A/B round $1 done at $SECONDS s"; tail -14 "$out/p0$1.log"; tail -14 "$out/p6$1.log"
}
# Correctness first: this tree built, then dfgnn-verify --tiny within VERIFY_SECONDS (200).
bash bench/shapes-gpu.sh "$out/build" targets dfgnn-verify dfgnn-bench
timeout "${VERIFY_SECONDS:-200}" build-gpu/tools/dfgnn-verify --tiny --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
echo "dfgnn-verify --tiny exit $?: $(grep -E 'cases:' "$out/verify-tiny.log") ($SECONDS s)"
grep FAIL "$out/verify-tiny.log" | head -10
[ $SECONDS -lt $((deadline - 150)) ] && ab_round a
[ $SECONDS -lt $((deadline - 60)) ] && ab_round b
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
[ -n "$ncu" ] || { echo "no ncu"; exit 0; }
metrics=gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers,\
sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__grid_size,launch__block_size,\
smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes.sum
for c in "1 7 hub_split:lanes=8,groups=32,vec=1,threshold=128,chunk=128" \
         "8 8 hub_split:lanes=16,heads=8,groups=16,vec=4,threshold=128,chunk=128"; do
  read -r h dim sched <<< "$c"
  # new0: this tree without dropout, what the held kernels' remaining cost is measured against
  for v in base new new0; do
    [ $SECONDS -lt $((deadline - 25)) ] || { echo "ncu: out of time"; exit 0; }
    bench=build-gpu/tools/dfgnn-bench; [ $v = base ] && bench=/tmp/dfgnn-ab-base/build/tools/dfgnn-bench
    rate=0.6; [ $v = new0 ] && rate=0
    timeout 20 "$ncu" --clock-control none --print-units base --metrics "$metrics" --csv -k regex:rows_kernel \
      "$bench" --rmat 20 --model gat --heads "$h" --dim "$dim" --direction both --schedules "$sched" \
      --warmup 0 --iters 1 --rotations 1 --no-baseline --dropout $rate > "$out/ncu-$v-$h$dim.csv" 2> "$out/ncu-$v-$h$dim.log"
    echo "ncu $v ${h}x$dim p=$rate: exit $? ($SECONDS s)"
  done
done
