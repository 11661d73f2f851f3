#!/usr/bin/env bash
# Nsight Compute counters of each kernel of one forward and one backward (default dispatch) on
# R-MAT 2^20, Transformer H=4 D=64 and H=1 D=128: duration, DRAM bytes, cache hit rates, occupancy
# and warp stall reasons, to see which pass loses time and why. Not a benchmark: ncu serialises
# and replays kernels; timings come from dfgnn-bench.
# Usage: bench/profile-passes.sh BUILD_DIR OUTDIR
set -uo pipefail
build=${1:?build dir}; out=${2:?out dir}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu not found"; exit 0; }
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,\
l1tex__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,\
launch__occupancy_limit_registers,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,\
launch__grid_size,launch__block_size
for shape in "4 64" "1 128"; do
  set -- $shape
  for what in forward backward; do
    tag=h$1-d$2-$what
    filter='regex:Forward<'; count=3
    [ $what = backward ] && { filter='regex:Backward|prep_kernel'; count=8; }
    echo "=== ncu transformer H=$1 D=$2 $what kernels ($(date +%T))"
    timeout 200 "$ncu" --clock-control none --metrics "$metrics" --section WarpStateStats --csv \
      --kernel-name-base demangled -k "$filter" --launch-count $count \
      "$build/tools/dfgnn-bench" --rmat 20 --model transformer --heads "$1" --dim "$2" --direction $what \
      --warmup 0 --iters 1 --rotations 1 --no-baseline > "$out/ncu-$tag.csv" 2> "$out/ncu-$tag.log"
    echo "exit $?"
    python3 bench/ncu_summary.py "$out/ncu-$tag.csv"
  done
done
