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
  tag=h$1-d$2
  echo "=== ncu transformer H=$1 D=$2 ($(date +%T))"
  timeout 240 "$ncu" --clock-control none --metrics "$metrics" --section WarpStateStats --csv \
    -k 'regex:rows_kernel|merge_kernel|prep_kernel|balanced_kernel' --launch-count 12 \
    "$build/tools/dfgnn-bench" --rmat 20 --model transformer --heads "$1" --dim "$2" --direction both \
    --warmup 0 --iters 1 --rotations 1 --no-baseline > "$out/ncu-$tag.csv" 2> "$out/ncu-$tag.log"
  echo "exit $?"; python3 - "$out/ncu-$tag.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no ncu rows")
head = rows[0]; col = {n: i for i, n in enumerate(head)}
by = collections.OrderedDict()
for r in rows[1:]:
    key = (r[col["ID"]], r[col["Kernel Name"]][:90])
    by.setdefault(key, {})[r[col["Metric Name"]]] = r[col["Metric Value"]]
for (kid, name), m in by.items():
    stalls = sorted(((float(v.replace(',', '')), k) for k, v in m.items() if k.startswith("smsp__average_warp") or "stall" in k.lower()), reverse=True)[:3]
    print(kid, name)
    print("   ", {k.split("__")[1][:40]: v for k, v in m.items() if not ("stall" in k.lower() or k.startswith("smsp__average_warp"))})
    print("    top stalls:", stalls)
PY
done
