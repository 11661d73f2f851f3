#!/usr/bin/env bash
# Issue 16's GPU path end to end on ONE GPU: 2 processes (torchrun) sharing it, meeting over gloo,
# tiny sizes, under a minute on an H200. Writes logs and JSON under OUTDIR:
#   1. tune.json, site.db   python -m dfgnn.distributed tune: the graphs split across the 2 ranks, each
#                           rank tuning on the GPU (--exclusive: one rank at a time, so that the ranks'
#                           timings do not disturb each other), rank 0 merging and exporting site.db
#   2. agree.json           both ranks tune every graph (--no-split): the agreement of their winners
#   3. ddp.json             examples/ddp_minibatch.py: GAT and Graph Transformer, dfgnn and PyG layers,
#                           DDP over gloo (NCCL refuses two ranks on one GPU), dispatching from site.db
#   4. missing-site.log     the example with site.db missing on rank 1: every rank must exit, none hang
# Usage: bench/ddp-one-gpu.sh OUTDIR   (dfgnn importable by $PYTHON, default python3: e.g. run it as the
# ddp1gpu step of bench/run-python-gpu.sh, which installs the package first). Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/ddp-one-gpu.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 DFGNN_TUNE=off PYTHONUNBUFFERED=1
torchrun=("$py" -m torch.distributed.run --standalone --nproc_per_node 2)
status=0
start=$SECONDS

step() {  # step NAME LIMIT COMMAND...: runs COMMAND with a time limit, logs to OUTDIR/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s"
  return "$rc"
}

rm -rf "$out/tune-work" "$out/agree-work" "$out/site.db" "$out/site-agree.db" "$out"/site-rank*.db
ops=(--op gat:8:8 --op gat:1:16 --op transformer:4:64 --op transformer:1:16)
step tune 60 "${torchrun[@]}" -m dfgnn.distributed tune data/cora rmat:12 rmat:13 "${ops[@]}" --self-loops \
  --direction both --budget 0.5 --exclusive --out "$out/site.db" --work-dir "$out/tune-work" --json "$out/tune.json" \
  || status=1
tail -3 "$out/tune.log"
step agree 60 "${torchrun[@]}" -m dfgnn.distributed tune data/cora rmat:12 --op gat:8:8 --self-loops --budget 1 \
  --exclusive --no-split --out "$out/site-agree.db" --work-dir "$out/agree-work" --json "$out/agree.json" || status=1
tail -1 "$out/agree.log"

example=(examples/ddp_minibatch.py --backend gloo --rmat 14 --edges-per-node 16 --train-nodes 4096 --batch-size 512
         --epochs 2 --timeout 60)
step ddp 90 "${torchrun[@]}" "${example[@]}" --site-db "$out/site.db" --json "$out/ddp.json" || status=1
grep -E "world|identical" "$out/ddp.log"

# rank 0 finds site-rank0.db, rank 1 finds no site-rank1.db: both must exit at once with the reason
cp "$out/site.db" "$out/site-rank0.db" 2>/dev/null
t0=$SECONDS
if step missing-site 60 "${torchrun[@]}" "${example[@]}" --site-db "$out/site-rank{rank}.db"; then
  echo "missing-site: FAILED: the job succeeded without rank 1's site database"; status=1
elif ! grep -q "site-rank1.db: no such file" "$out/missing-site.log" || [ $((SECONDS - t0)) -ge 55 ]; then
  echo "missing-site: FAILED: no clear error, or it hung (see missing-site.log)"; status=1
else
  echo "missing-site: passed: $(grep -m1 -o 'rank 1: site database.*' "$out/missing-site.log")"
fi
echo "ddp-one-gpu: done in $((SECONDS - start)) s, status $status"
exit $status
