#!/usr/bin/env bash
# Builds, in a fresh checkout, the ignored inputs that device calls carry for bench/shapes-gpu.sh's
# phases (a device call sees only the checkout, at most 64 MiB with what it carries):
#   devdeps     .devdeps: the .debs the device lacks (../shared/tools/device-deps.sh), Boost's headers
#               slimmed (../shared/tools/slim-boost.sh); about 4 MB
#   bench-data  .bench-data: the datasets the checks, the host A/B, the acceptance and the reorder bench
#               read (BENCH_GRAPHS below); about 9 MB
#   sweep-data  .sweep-data: bench/tune-site.sh's graphs (GRAPHS: a part of them), edge lists only, xz; about
#               7 MB for all 26 (bench/shapes-gpu.sh sweep unpacks them on the device)
#   ab          .ab/base.tgz and .ab/py-base.tgz: git archives of the A/B bases (AB_BASE, default
#               0cbcf60: the kernels before the head-span and dropout work; PY_BASE, default e1f18a3:
#               python_bindings/ before the prepared-call core)
#   perms       .perms: saved node orders (bench/reorder_bench.py --save-perms) of PERM_GRAPHS with
#               PERM_METHODS; needs the Python package (its venv's python as PYTHON); METIS on R-MAT 2^22
#               takes 20 min on two cores, so the default leaves 2^22 out
# Usage: bench/carry-inputs.sh [WHAT...]   (default: devdeps bench-data sweep-data ab; SHARED_DIR, default
#        ../shared, holds the tools and datasets)
# Then name what a call needs in its carry list, e.g. [".devdeps", ".bench-data", ".ab"].
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED_DIR:-../shared}  # the shared tools and datasets beside the repository
datasets=$shared/datasets
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(devdeps bench-data sweep-data ab)
need_datasets() { [ -d "$datasets" ] || { echo "carry-inputs: no datasets at $datasets" >&2; exit 1; }; }
for w in "${what[@]}"; do
  case $w in
    devdeps)
      mkdir -p .devdeps
      bash "$shared/tools/device-deps.sh" .devdeps > /dev/null
      bash "$shared/tools/slim-boost.sh" .devdeps > /dev/null
      ;;
    bench-data)
      need_datasets
      mkdir -p .bench-data
      for g in ${BENCH_GRAPHS:-cora citeseer pubmed mesh-mdual blogcatalog cora-linqs-directed wiki-chameleon tu-ENZYMES \
          snap-p2p-Gnutella08 snap-email-Eu-core roget-thesaurus celegans-neural}; do
        [ -d "$datasets/$g" ] || { echo "carry-inputs: no dataset $g in $datasets" >&2; exit 1; }
        rm -rf ".bench-data/$g" && cp -r "$datasets/$g" .bench-data/
      done
      ;;
    sweep-data)
      need_datasets
      # xz -9, half gzip's size: the shipped files leave about 10 MiB of a device call's 64 MiB for
      # carried inputs (bench/NOTES.md). GRAPHS names a part of the sweep's graphs for one call.
      rm -rf .sweep-data
      for g in $(bash bench/tune-site.sh --graphs); do
        [ -d "$datasets/$g" ] || { echo "carry-inputs: no dataset $g in $datasets" >&2; exit 1; }
        mkdir -p ".sweep-data/$g"
        [ -f "$datasets/$g/stats.json" ] && cp "$datasets/$g/stats.json" ".sweep-data/$g/"
        if [ -f "$datasets/$g/edges.txt.gz" ]; then
          gzip -dc "$datasets/$g/edges.txt.gz" | xz -9 -T0 > ".sweep-data/$g/edges.txt.xz"
        else
          xz -9 -T0 -c "$datasets/$g/edges.txt" > ".sweep-data/$g/edges.txt.xz"
        fi
      done
      ;;
    ab)
      mkdir -p .ab
      git archive -o .ab/base.tgz "${AB_BASE:-0cbcf60}" -- . ':!data/tuning/*.db' ':!bench/results' ':!docs'
      git archive -o .ab/py-base.tgz "${PY_BASE:-e1f18a3}" python_bindings bench/op_overhead.py
      ;;
    perms)
      "${PYTHON:-python3}" bench/reorder_bench.py --save-perms .perms --datasets "$datasets" \
        --graphs "${PERM_GRAPHS:-rmat-20,rmat-20s,mesh-mdual}" --methods "${PERM_METHODS:-community,metis}"
      ;;
    *) echo "carry-inputs: unknown input '$w' (devdeps, bench-data, sweep-data, ab, perms)" >&2; exit 2 ;;
  esac
  echo "carry-inputs: .$w: $(du -sh ".$w" | cut -f1)"
done
