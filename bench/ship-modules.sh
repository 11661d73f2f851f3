#!/usr/bin/env bash
# Builds the shipped modules file of one GPU class: the compiled kernels that default dispatch runs
# for every configuration of the zoo (bench/zoo.txt), forward and backward, so that a fresh process
# on that GPU loads them instead of waiting on NVRTC. Needs NVRTC, not a GPU: without one, dispatch
# answers with the default rule (fitted leaves and hand rule), which is what an untuned user runs.
#
# Usage: bench/ship-modules.sh BUILD_DIR OUT.db [DATASETS]
#   The graphs: the repository's Cora and every dataset directory under DATASETS (default
#   ../shared/datasets, skipped when absent), each with and without self-loops (GATConv adds
#   them), R-MAT 2^18 (past the fitted rule's domain: the hand rule's schedules) and a small
#   planted-hub graph (hub splits on few nodes).
# Also every winner of the shipped winners files (WINNERS, ':'-separated; default every
# data/tuning/sm<ARCH>*.db but the modules file, one per GPU class tuned; "none" for none), which
# dispatch runs on that GPU where a file answers (exactly or by the nearest graph).
# Environment: ARCH (compute capability, default 90), CONFIGS ("model:H:D:dtype ...", default the zoo),
#   DROPOUT_CONFIGS (the same, compiled once more with attention dropout, which has kernels of its own;
#   default the zoo's GAT lines, PyG's examples/gat.py among them: every config would double the file,
#   and a device run's checkout must stay under 64 MiB).
# Writes OUT.db holding modules only (zlib-compressed cubins keyed by the kernel-source hash; no
# results), then prints its size. Install it as data/tuning/sm<ARCH>-modules.db; a test fails when
# the kernel sources change until it is rebuilt.
set -euo pipefail
build=${1:?usage: bench/ship-modules.sh BUILD_DIR OUT.db [DATASETS]}
out=${2:?usage: bench/ship-modules.sh BUILD_DIR OUT.db [DATASETS]}
data=${3:-../shared/datasets}
arch=${ARCH:-90}
here=$(cd "$(dirname "$0")" && pwd)
tune=$build/tools/dfgnn-tune
[ -x "$tune" ] || { echo "ship-modules: $tune not built" >&2; exit 1; }
configs=${CONFIGS:-$(python3 "$here/zoo.py")}
dropout_configs=${DROPOUT_CONFIGS-$(python3 "$here/zoo.py" | grep '^gat:' || true)}
graphs=(--graph "$here/../data/cora")
if [ -d "$data" ]; then
  for d in "$data"/*/; do
    [ -e "$d/edges.txt" ] || [ -e "$d/edges.txt.gz" ] && graphs+=(--graph "${d%/}")
  done
else
  echo "ship-modules: no datasets at $data; Cora and the generated graphs only"
fi
graphs+=(--rmat 18 --hubs 20000,8,4,4000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Every module default dispatch runs goes into the new file: with the shipped layer visible (the file
# being rebuilt among it), a module already there would count as stored and be left out.
export DFGNN_SHIPPED_DB=off
# The shipped winners, one 'MODEL DTYPE HEADS DIM PASS SCHEDULE' line each (dfgnn-tune --compile-listed),
# all and the GAT ones (compiled once more with dropout, as the GAT configs are). A zoo configuration with
# no row of its own model is answered by another model's rows on its op shape (models_alike), so those
# are listed under its model too (every other model's: a superset of the one dispatch picks).
winners=()
if [ -n "${WINNERS:-}" ]; then
  [ "$WINNERS" = none ] || IFS=: read -r -a winners <<< "$WINNERS"
else
  for f in "$here/../data/tuning/sm$arch"*.db; do
    [ -f "$f" ] && [ "${f%-modules.db}" = "$f" ] && winners+=("$f")
  done
  [ ${#winners[@]} -gt 0 ] || { echo "ship-modules: no winners file data/tuning/sm$arch*.db (WINNERS=none for none)" >&2; exit 1; }
fi
if [ ${#winners[@]} -gt 0 ]; then
  for f in "${winners[@]}"; do [ -f "$f" ] || { echo "ship-modules: no winners file $f (WINNERS=none for none)" >&2; exit 1; }; done
  python3 - "$work/winners.txt" "$work/winners-gat.txt" "${#winners[@]}" "${winners[@]}" $configs <<'EOF'
import sqlite3, sys
models, dtypes = ("gat", "gatv2", "transformer", "agnn"), ("float32", "float16", "bfloat16")
passes = ("forward", "backward_row", "backward_col")
files = sys.argv[4:4 + int(sys.argv[3])]
rows = []
for path in files:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    if con.execute("SELECT count(*) FROM results WHERE key_bits >= 16").fetchone()[0]:
        sys.exit(f"ship-modules: {path} holds edge-feature results, which --compile-listed cannot name yet")
    rows += con.execute("SELECT DISTINCT model, dtype, heads, dim, direction, schedule FROM results "
                        "WHERE schedule IS NOT NULL").fetchall()
    con.close()
rows = sorted(set(rows))
lines = [(models[m], dtypes[d], h, dim, passes[p], s) for m, d, h, dim, p, s in rows]
have = {(m, d, h, dim) for m, d, h, dim, _, _ in lines}
for config in sys.argv[4 + len(files):]:  # model:H:D:dtype
    m, h, dim, d = config.split(":")
    if (m, d, int(h), int(dim)) not in have:
        lines += [(m, d, int(h), int(dim), p, s) for m2, d2, h2, dim2, p, s in list(lines)
                  if (d2, h2, dim2) == (d, int(h), int(dim)) and m2 != m]
with open(sys.argv[1], "w") as every, open(sys.argv[2], "w") as gat:
    for line in dict.fromkeys(lines):
        text = " ".join(map(str, line)) + "\n"
        every.write(text)
        if line[0] == "gat":
            gat.write(text)
print(f"{len(rows)} shipped winners (op, pass, schedule) in {', '.join(files)}, {len(set(lines))} lines with the zoo's "
      "configurations answered by another model")
EOF
fi
compile_defaults() {  # CONFIG [--dropout RATE]
  local c=$1 model heads dim dtype loops
  shift
  IFS=: read -r model heads dim dtype <<< "$c"
  for loops in "" --self-loops; do
    "$tune" --compile-defaults "$arch" "${graphs[@]}" $loops --model "$model" --heads "$heads" --dim "$dim" \
      --dtype "$dtype" --direction both "$@" --db "$work/work.db" > "$work/log.txt" 2>&1 ||
      { tail -20 "$work/log.txt"; echo "ship-modules: $c $* failed" >&2; exit 1; }
    echo "$c ${loops:-(as read)} $*: $(grep '^compiled' "$work/log.txt")"
  done
}
for c in $configs; do compile_defaults "$c"; done
compile_winners() {  # LIST [--dropout RATE]
  local list=$1
  shift
  "$tune" --compile-defaults "$arch" --hubs 20000,8,4,4000 --model gat --heads 8 --dim 8 --compile-listed "$list" "$@" \
    --db "$work/work.db" \
    > "$work/log.txt" 2>&1 || { tail -20 "$work/log.txt"; echo "ship-modules: the winners of $list $* failed" >&2; exit 1; }
  echo "shipped winners $(basename "$list") $*: $(grep '^compiled' "$work/log.txt")"
}
if [ ${#winners[@]} -gt 0 ]; then
  compile_winners "$work/winners.txt"
  [ -s "$work/winners-gat.txt" ] && compile_winners "$work/winners-gat.txt" --dropout 0.5
fi
# Any nonzero rate compiles the same kernels (the rate is a launch argument).
for c in $dropout_configs; do compile_defaults "$c" --dropout 0.5; done
# Modules only: results of no one's tuning, and nothing but the modules table's rows.
python3 - "$work/work.db" "$out" <<'EOF'
import os, sqlite3, sys
src, dst = sys.argv[1:3]
if os.path.exists(dst):
    os.remove(dst)
con = sqlite3.connect(src)
con.execute("VACUUM INTO ?", (dst,))
con.close()
con = sqlite3.connect(dst)
con.execute("PRAGMA foreign_keys = ON")
for table in ("candidate_stats", "runs", "results", "fingerprints", "environments"):
    con.execute(f"DELETE FROM {table}")
con.commit()
con.execute("VACUUM")
n, size = con.execute("SELECT count(*), coalesce(sum(length(image)), 0) FROM modules").fetchone()
hashes = [r[0] for r in con.execute("SELECT DISTINCT template_hash FROM modules")]
con.close()
print(f"{dst}: {n} modules, {size / 2**20:.1f} MiB of compressed cubins, file {os.path.getsize(dst) / 2**20:.1f} MiB, "
      f"kernel source {', '.join(hashes)}")
EOF
