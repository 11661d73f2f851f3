#!/usr/bin/env bash
# Builds a site tuning database for the GPU it runs on: tunes a set of shared graphs of different
# shapes for a few op configurations (forward and backward) with dfgnn-tune, then exports a
# compact snapshot without compiled modules (each machine compiles its own) to ship read-only.
# The same databases are the sweep data the measured default rule and the nearest-fingerprint
# calibration are fitted on (tools/fit_default_rule.py, tools/calibrate_nearest.py).
#
# Usage: bench/tune-site.sh BUILD_DIR OUTDIR DATASETS
#        bench/tune-site.sh --graphs    (prints the dataset names it tunes, for bench/carry-inputs.sh)
# Environment: GRAPHS (dataset names under DATASETS, default below), CONFIGS ("model:H:D:dtype ...";
#              default: the configuration zoo, bench/zoo.txt),
#              BUDGET_FWD / BUDGET_BWD (seconds per forward / backward problem; 1.5 and 3),
#              WARM_BUDGET (seconds per warm-up problem, 40), RMAT (R-MAT scales tuned beside the datasets,
#              default "18 20 22"; empty for none), SECONDS_LEFT (a deadline: no config starts after
#              it, so that a device call's export still runs; a config cut short keeps what it stored),
#              SELF_LOOP_MODELS (models whose graphs are tuned with a self-loop per node; default
#              "gat gatv2 agnn", whose PyG layers add them, so that a user's GATConv on a shipped
#              dataset finds its own row: tuned without them, Cora's GAT 8x8 was answered by 13 voting
#              neighbours at distance 1.41, bench/NOTES.md).
# Output: OUTDIR/work.db (everything, with modules), OUTDIR/site.db (the snapshot to ship),
#         OUTDIR/tune-CONFIG-{forward,backward}.json (dfgnn-tune reports: every timed candidate's
#         score and both timing regimes), logs.
# For another GPU class: run it there and install site.db as data/tuning/<class>.db (see the docs).
set -uo pipefail
graphs=${GRAPHS:-"cora citeseer pubmed cora-ml citationfull-dblp amazon-photo coauthor-cs musae-facebook deezer-europe
  lastfm-asia twitch-engb wikipedia-crocodile blogcatalog polblogs snap-email-Enron snap-ca-AstroPh snap-wiki-Vote
  snap-ego-Facebook actor tu-PROTEINS tu-NCI109 tu-IMDB-BINARY reddit-threads-10k power-grid-us mesh-4elt wormnet-v3"}
[ "${1:-}" = --graphs ] && { echo $graphs; exit 0; }
build=${1:?build dir}; out=${2:?out dir}; data=${3:?datasets dir}
tools=$build/tools
mkdir -p "$out"
# The op shapes: the configuration zoo (bench/zoo.txt). A device call too short for all of them
# takes a part, e.g. CONFIGS="$(python3 bench/zoo.py | sed -n 1,11p)", and the parts' site.db files
# are merged with dfgnn-db merge.
configs=${CONFIGS:-$(python3 "$(dirname "$0")/zoo.py")} || { echo "bench/zoo.txt: unreadable"; exit 1; }
# The recorded default of every tuned problem is the hand rule's: the same databases are the sweep
# the default rule is fitted on (tools/fit_default_rule.py), which measures regret against it.
export DFGNN_DEFAULT_RULE=${DFGNN_DEFAULT_RULE:-hand}
db=$out/work.db
step() { echo "=== $* ($(date +%T))"; }
args=()
for g in $graphs; do
  # A sweep that silently lost graphs would still ship and fit: a missing one stops it.
  [ -d "$data/$g" ] || { echo "tune-site: no dataset $g in $data (GRAPHS names the graphs to tune)" >&2; exit 1; }
  args+=(--graph "$data/$g")
done
# Large power-law graphs beside the datasets (all far smaller): the fitted rule's domain ends at
# twice its largest graph, and past it the hand rule answers.
for scale in ${RMAT-18 20 22}; do args+=(--rmat "$scale"); done
status=0
deadline=$((SECONDS + ${SECONDS_LEFT:-1000000}))
for c in $configs; do
  if [ "$SECONDS" -ge "$deadline" ]; then echo "not started, past the deadline: $c"; status=1; continue; fi
  IFS=: read -r model heads dim dtype <<< "$c"
  op=(--model "$model" --heads "$heads" --dim "$dim" --dtype "$dtype")
  case " ${SELF_LOOP_MODELS-gat gatv2 agnn} " in *" $model "*) op+=(--self-loops) ;; esac
  # Warm-up: a planted-hub graph (every solver applies) with a long budget compiles every candidate
  # kernel once, into the database's module cache, so the short budgets below time, not compile.
  step "warm-up compile $c"
  "$tools/dfgnn-tune" --hubs 20000,8,4,4000 "${op[@]}" --direction both --budget "${WARM_BUDGET:-40}" --db "$db" \
    > "$out/warm-$model-h$heads-d$dim-$dtype.log" 2>&1 || { echo "warm-up failed (exit $?)"; status=1; }
  for dir in forward backward; do
    budget=${BUDGET_FWD:-1.5}; [ $dir = backward ] && budget=${BUDGET_BWD:-3}
    step "tune $c $dir"
    name=$model-h$heads-d$dim-$dtype-$dir
    "$tools/dfgnn-tune" "${args[@]}" "${op[@]}" --direction $dir --budget "$budget" --db "$db" \
      --json "$out/tune-$name.json" > "$out/tune-$name.log" 2>&1 || { echo "tune $name failed (exit $?)"; status=1; }
    tail -1 "$out/tune-$name.log"
  done
done
step "export the site snapshot"
rm -f "$out/site.db"
"$tools/dfgnn-db" --db "$db" export "$out/site.db" > "$out/export.log" 2>&1 || { cat "$out/export.log"; status=1; }
# The warm-up graph is not a real graph to ship, and compiled modules stay on the machine that
# compiled them.
python3 - "$out/site.db" "$out/warm-fingerprints.txt" <<'EOF' || status=1
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA foreign_keys = ON")
n = con.execute("SELECT count(*) FROM modules").fetchone()[0]
con.execute("DELETE FROM modules")
# The planted-hub graph: 20000 nodes (no shipped dataset has exactly that many).
ids = [r[0] for r in con.execute("SELECT id FROM fingerprints WHERE text LIKE '%\"num_nodes\":20000,%'")]
for i in ids:
    con.execute("DELETE FROM results WHERE fingerprint_id = ?", (i,))
    con.execute("DELETE FROM fingerprints WHERE id = ?", (i,))
con.commit()
con.execute("VACUUM")
con.close()
print(f"site.db: removed {n} modules and {len(ids)} warm-up fingerprint(s)")
EOF
"$tools/dfgnn-db" --site "$out/site.db" stats 2>&1 | tee "$out/site-stats.txt"
"$tools/dfgnn-db" --site "$out/site.db" verify > "$out/site-verify.txt" 2>&1 || { echo "verify failed"; status=1; }
ls -l "$out"/*.db
exit $status
