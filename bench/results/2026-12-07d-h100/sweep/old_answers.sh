#!/bin/bash
# old_answers.sh SHIPPED_DIR OUT.jsonl : the H100's answers (LOOPS=1) for every fp32 self-loop config and swept dataset
cd /work/main
export DFGNN_SHIPPED_DB=$1 DFGNN_LOG_LEVEL=error LOOPS=1 SHOW=1 GPU="NVIDIA H100 80GB HBM3"
: > $2
for c in "0 8 8" "0 1 7" "0 1 3" "0 1 40" "0 1 47" "0 1 16" "0 8 16" "0 4 16" "0 1 64" "0 1 128" "1 8 8" "1 1 128" "1 1 7" "3 1 64"; do
  for g in $(bash bench/tune-site.sh --graphs); do
    build/first-decisions ../shared/datasets/$g $c | tail -2 | python3 -c "
import json,sys
lines=[l for l in sys.stdin.read().splitlines() if l.strip()]
out=[]
for l in lines:
    j=json.loads(l); out += j if isinstance(j,list) else [j]
print(json.dumps({'graph':'$g','config':'$c','answers':[{k:a.get(k) for k in ('pass','origin','schedule','distance')} for a in out]}))" >> $2
  done
done
