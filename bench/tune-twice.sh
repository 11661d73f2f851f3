#!/usr/bin/env bash
# Issue 14 item 6: the same winner twice. Tunes the same graphs twice, in two separate dfgnn-tune
# processes writing two fresh databases (no site layer, so nothing is pooled from elsewhere), then
# bench/tune_twice_summary.py reports per (graph, op, pass) whether the winners are the same or
# within the tuner's noise band of each other (each run's candidate statistics judge the other
# run's winner). About 70 s on an H200 with the defaults (6 graphs, GT H1 D128 fp32, forward and
# backward, 2.5 s per problem and run).
# Usage: bench/tune-twice.sh BUILD_DIR OUTDIR [DATASETS]
#   BUILD_DIR/tools/dfgnn-tune is used (or $DFGNN_TUNE_BIN); DATASETS defaults to shared/datasets in or beside the
#   repository (else /work/shared/datasets).
#   TWICE_GRAPHS (space-separated dataset names), TWICE_BUDGET (s per problem), TWICE_OP (dfgnn-tune
#   op options) override the defaults.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?build dir}; out=${2:?out dir}; data=${3:-}
if [ -z "$data" ]; then
  for d in "$here/../shared/datasets" "$here/../../shared/datasets" /work/shared/datasets; do
    [ -d "$d" ] && { data=$d; break; }
  done
fi
tune=${DFGNN_TUNE_BIN:-$build/tools/dfgnn-tune}
[ -x "$tune" ] || { echo "tune-twice: $tune is not an executable dfgnn-tune" >&2; exit 1; }
graphs=(${TWICE_GRAPHS:-cora pubmed amazon-photo blogcatalog tu-PROTEINS mesh-4elt})
budget=${TWICE_BUDGET:-2.5}
op=(${TWICE_OP:---model transformer --dtype float32 --heads 1 --dim 128 --direction both})
mkdir -p "$out"
args=()
for g in "${graphs[@]}"; do
  path=$data/$g
  [ -e "$path" ] || path=$here/../data/$g
  [ -e "$path" ] || { echo "tune-twice: graph $g is in neither $data nor data/" >&2; exit 1; }
  args+=(--graph "$path")
done
# The tuner keeps to its budget (plus at most one measurement); the timeout only guards a hang.
limit=$(python3 -c "print(int(${#graphs[@]} * 2 * $budget + 30))")
status=0
for run in a b; do
  db=$out/twice-$run.db
  rm -f "$db" "$db"-wal "$db"-shm
  echo "=== run $run: ${#graphs[@]} graphs, $budget s per problem ($(date +%T))"
  start=$(date +%s.%N)
  env -u DFGNN_SITE_DB timeout "$limit" "$tune" "${args[@]}" "${op[@]}" --budget "$budget" --db "$db" --site "" \
    --json "$out/twice-$run.json" > "$out/twice-$run.log" 2>&1
  code=$?
  echo "dfgnn-tune exit $code, wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  [ "$code" = 0 ] || { status=1; tail -5 "$out/twice-$run.log"; }
done
python3 "$here/tune_twice_summary.py" "$out/twice-a.db" "$out/twice-b.db" \
  --names "$out/twice-a.json" "$out/twice-b.json" --markdown "$out/tune-twice.md" --json "$out/tune-twice.json" \
  || status=1
exit $status
