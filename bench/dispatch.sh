#!/usr/bin/env bash
# Dispatch cost on a GPU (called by tools/gpu-check.sh, section "dispatch"):
#  1. tunes Cora into a database (so dispatch answers from it);
#  2. dfgnn's own host time per call on a warm in-process cache (dfgnn-bench-dispatch overhead);
#  3. fresh processes: first launch with an empty database (compiles) and with the warm one (none);
#  4. four processes tune Cora concurrently into one database, then four fresh processes dispatch
#     from it: every exit code 0, the database verifies, and all four choose the same schedules.
# Usage: bench/dispatch.sh BUILD_DIR OUTDIR DATASETS
set -uo pipefail
build=${1:?build dir}; out=${2:?out dir}
tools=$build/tools
graph=(--graph data/cora --self-loops)
op=(--model transformer --heads 1 --dim 64)
db=$out/dispatch.db cold=$out/cold.db shared=$out/shared.db
rm -f "$db"* "$cold"* "$shared"*

$tools/dfgnn-tune "${graph[@]}" "${op[@]}" --direction both --budget 4 --db "$db" > "$out/dispatch-tune.log" 2>&1
echo "tune cora: exit $?"
for m in transformer gat; do
  $tools/dfgnn-bench-dispatch overhead "${graph[@]}" --model $m --heads 1 --dim 64 --db "$db" \
    --json "$out/overhead-$m.json" 2>&1
done
echo "-- fresh process, empty database"
$tools/dfgnn-bench-dispatch first-launch "${graph[@]}" "${op[@]}" --db "$cold" --json "$out/first-cold.json" 2>&1
echo "-- fresh processes, the tuned database"
for i in 1 2 3; do
  $tools/dfgnn-bench-dispatch first-launch "${graph[@]}" "${op[@]}" --db "$db" --json "$out/first-warm-$i.json" 2>&1
done

echo "-- 4 concurrent tuners on one database (a copy of the tuned one: modules compiled), then 4 concurrent dispatchers"
cp "$db" "$shared"
pids=()
for i in 1 2 3 4; do
  $tools/dfgnn-tune "${graph[@]}" "${op[@]}" --direction both --budget 3 --db "$shared" > "$out/concurrent-tune-$i.log" 2>&1 &
  pids+=($!)
done
codes=(); for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
echo "tuner exit codes: ${codes[*]}"
pids=()
for i in 1 2 3 4; do
  $tools/dfgnn-bench-dispatch first-launch "${graph[@]}" "${op[@]}" --db "$shared" --json "$out/concurrent-$i.json" \
    > "$out/concurrent-dispatch-$i.log" 2>&1 &
  pids+=($!)
done
codes=(); for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
echo "dispatcher exit codes: ${codes[*]}"
$tools/dfgnn-db --db "$shared" verify > "$out/shared-verify.log" 2>&1; echo "dfgnn-db verify shared: exit $?"
grep -ci "locked" "$out"/concurrent-*.log | paste -sd' ' | sed 's/^/"locked" mentions per log: /'
python3 bench/summarize_dispatch.py "$out" --markdown "$out/dispatch.md"
