#!/usr/bin/env bash
# The GPU run of the head-and-channel-shape work, in phases that each fit one device call (about
# 10 minutes on an H200); a later phase reuses what an earlier one built while the machine is warm.
#
# Usage: bench/shapes-gpu.sh OUTDIR PHASE [SHAPES_ARGS...]
#   check   on a fresh machine: build everything, then verify --tiny, GPU ctest (not the long-labelled
#           gpu.verify_quick), the Python GPU tests and
#           memcheck of the tiny corpus (MEMCHECK=0 leaves it out, PYTHON_TESTS=0 the Python package and its
#           tests, VERIFY=0 verify --tiny; CTEST_REGEX picks GPU tests), within CHECK_SECONDS (540)
#   memcheck  compute-sanitizer memcheck of one part of dfgnn-verify --tiny (PART=K/N, default 1/4: the whole
#           corpus runs past a device call, more than 400 s on an H100 with its modules cached; MEMCHECK_SECONDS
#           bounds it, 480), after the
#           part's own verify run, which compiles its modules; the N parts together are the whole corpus
#   targets this tree's CMake targets named by SHAPES_ARGS (e.g. dfgnn-verify dfgnn-bench), nothing else
#   build   unpacks .devdeps, then at once: tools/gpu-check.sh "tests" (Release build, GPU ctest,
#           compute-sanitizer memcheck of dfgnn-verify --tiny, the device graph build's sanitizers)
#           and the Python package's install (bench/run-python-gpu.sh's install step)
#   verify  on a fresh machine: the library and the Python package built at once, then dfgnn-verify --tiny
#   quick   a fresh machine, little device time: dfgnn-verify --tiny, then dfgnn-bench of this build on AB_CASES
#   prepare on a fresh machine, for accept and cold: the Python package and dfgnn-tune/dfgnn-db built at
#           once, then the Python tests PYTEST_ARGS (default tests/python/test_shipped_db.py)
#   pytest  the Python GPU tests (PYTEST_ARGS, default tests/python)
#   ab      the configurations that existed before, this tree against .ab/base.tgz, same schedules;
#           with AB_CASES=FILE, that file's (graph, op, schedules) lines instead (bench/ab-empty-rows.txt),
#           each run with AB_BENCH_ARGS added (e.g. "--dropout 0.6")
#   ab-kernels  one case's per-kernel GPU time (ncu) in both trees of ab, launch by launch
#           (AB_KERNEL_CASE, AB_KERNEL_DIRECTION, AB_KERNEL_ITERS; bench/ab_kernels.py)
#   shapes  bench/shapes.py with SHAPES_ARGS (writes OUTDIR/<date>-shapes.{json,md})
#   sweep   issue 24's tuning sweep, bench/tune-site.sh into OUTDIR (graphs from .sweep-data, unpacked from
#           xz, all it holds or GRAPHS; DATASETS names a directory of edges.txt instead), one part per device
#           call: CONFIGS and GRAPHS pick the part, SECONDS_LEFT its deadline; builds dfgnn-tune and dfgnn-db
#           first if needed
#   accept  issue 24's acceptance through dfgnn.torch, after build or check: graphs the sweep did not use
#           (ACCEPT_GRAPHS) tuned into OUTDIR/unseen.db for ACCEPT_CONFIGS ("model:H:D:dtype ..."), then
#           bench/tuning_acceptance.py: the out-of-the-box default (shipped file, then rule) and the rule
#           alone against tuned, by kernel time, within ACCEPT_SECONDS (240)
#   host-ab dfgnn.torch's host time per call, this tree against .ab/py-base.tgz (git archive of an older
#           commit's python_bindings/ and bench/op_overhead.py, laid over a copy of this tree and installed beside it):
#           bench/op_overhead.py --no-pyg --no-compile for each, alternating, HOST_AB_ROUNDS (3) rounds, after
#           prepare (this tree's package); the table is OUTDIR/host-ab.md
#   cold    bench/cold_start.py with SHAPES_ARGS (writes OUTDIR/<date>-cold-start.{json,md})
#   tune-share  issue 25: dfgnn-tune's wall time and compile share (its reports' compile_wait_s of elapsed_s),
#           compiles inline (DFGNN_TUNE_COMPILE_THREADS=0) against ahead on threads (the default), alternating,
#           TUNE_SHARE_ROUNDS (1) rounds, each into a fresh database: dfgnn-tune with TUNE_SHARE_ARGS (default
#           R-MAT 2^20, GT 4x64, both directions, budget 20 s); after prepare or check; OUTDIR/tune-share.md
#   reorder bench/reorder_bench.py with SHAPES_ARGS (issue 28: node orders, narrow storage, training epochs)
#   bytes   the same script's bytes section under ncu (DRAM bytes per pass against compulsory bytes)
# Environment: DATASETS (default .bench-data), T_TESTS (seconds for gpu-check, default 420).
# The inputs a call carries (.devdeps, .bench-data, .sweep-data, .ab, .perms) are built in a fresh checkout by
# bench/carry-inputs.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/shapes-gpu.sh OUTDIR PHASE [SHAPES_ARGS...]}
phase=${2:?phase: build, pytest or shapes}
shift 2
mkdir -p "$out"
datasets=${DATASETS:-.bench-data}
prefix=/opt/dfgnn-deps
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PWD/build-gpu-python/site${PYTHONPATH:+:$PYTHONPATH}
zlib=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
export CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix/usr -DSQLite3_INCLUDE_DIR=$prefix/usr/include \
-DSQLite3_LIBRARY=$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so -DZLIB_INCLUDE_DIR=$prefix/usr/include \
-DZLIB_LIBRARY=$zlib -DBoost_DIR=$prefix/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
-DCMAKE_CXX_FLAGS=-isystem$prefix/usr/include"

# The .debs and headers that tools/gpu-check.sh needs and the device lacks (sqlite3, Boost.PO, ...).
unpack_deps() {
  mkdir -p $prefix && for f in .devdeps/*.deb; do dpkg -x "$f" $prefix; done
  [ -f .devdeps/boost174-po-headers.tar.xz ] && tar xJf .devdeps/boost174-po-headers.tar.xz -C $prefix
}

# On a fresh or a warm machine: build-gpu configured once, then brought up to date for TARGETS (a warm
# machine's build may be of an earlier checkout, and the kernel source is built in).
build_targets() {
  [ -d build-gpu ] || unpack_deps
  { [ -f build-gpu/build.ninja ] ||
      cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS > "$out/configure.log" 2>&1; } &&
    cmake --build build-gpu -j "$(nproc)" --target "$@" > "$out/build.log" 2>&1 ||
    { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
  echo "built at $SECONDS s"
}

# The lines "GRAPH | MODEL HEADS DIM | SCHEDULES" of a cases file ('#' comments skipped; GRAPH a dataset
# under DATASETS or "--rmat SCALE"; SCHEDULES as dfgnn-bench --schedules takes them), printed as
# tab-separated "GRAPH_ARGS MODEL HEADS DIM SCHEDULES".
cases() {
  local graph config sched model heads dim
  while IFS='|' read -r graph config sched; do
    case $graph in ''|'#'*) continue ;; esac
    graph=$(echo $graph) sched=$(echo $sched)
    case $graph in --*) ;; *) graph="--graph $datasets/$graph" ;; esac
    read -r model heads dim <<< "$config"
    printf '%s\t%s\t%s\t%s\t%s\n' "$graph" "$model" "$heads" "$dim" "$sched"
  done < "$1"
}

# dfgnn-bench of .ab/base.tgz (git archive of an older commit) in /tmp/dfgnn-ab-base/build, and of
# this tree in build-gpu (configured here on a fresh machine), for the A/B phases. This tree's is always
# brought up to date (a warm machine's build may be of an earlier checkout: the kernel source is
# built in); the base is built again only when .ab/base.tgz is another archive.
ab_base=/tmp/dfgnn-ab-base
build_ab_pair() {
  local stamp
  build_targets dfgnn-bench  # this tree's first: on a fresh machine it unpacks the deps both builds need
  stamp=$(sha1sum .ab/base.tgz | cut -d' ' -f1) || exit 1
  if [ "$(cat "$ab_base/stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$ab_base/build/tools/dfgnn-bench" ]; then
    rm -rf "$ab_base" && mkdir -p "$ab_base" && tar xzf .ab/base.tgz -C "$ab_base"
    cmake -S "$ab_base" -B "$ab_base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS \
      > "$out/ab-base-configure.log" 2>&1 && cmake --build "$ab_base/build" -j "$(nproc)" --target dfgnn-bench \
      > "$out/ab-base-build.log" 2>&1 || { tail -20 "$out/ab-base-build.log"; exit 1; }
    echo "$stamp" > "$ab_base/stamp"
  fi
}

case $phase in
  targets)
    # Only this tree's CMake targets (SHAPES_ARGS), configured and the deps unpacked on a fresh machine.
    build_targets "$@"
    ;;
  build)
    # One unpack before the two builds (each would unpack the same files into the same prefix).
    unpack_deps
    BUDGET=400 T_INSTALL=400 STEPS=" " bash bench/run-python-gpu.sh "$out/python" "$datasets" > "$out/python-install.log" 2>&1 &
    SANITIZERS=${SANITIZERS:-memcheck} timeout "${T_TESTS:-420}" bash tools/gpu-check.sh "$out/gpu" tests /nonexistent "$datasets"
    wait
    tail -3 "$out/python-install.log"
    ;;
  check)
    # A fresh machine, correctness in one call under a deadline (CHECK_SECONDS, default 540): the
    # library, its GPU tests and tools, and the Python package built at once; dfgnn-verify --tiny
    # (which also fills the module cache, so the sanitizer run after it compiles nothing); GPU ctest;
    # the Python GPU tests (PYTEST_ARGS); compute-sanitizer memcheck of the tiny corpus with the time left.
    deadline=$((SECONDS + ${CHECK_SECONDS:-540}))
    left() { echo $((deadline - SECONDS)); }
    unpack_deps
    install_pid=
    if [ "${PYTHON_TESTS:-1}" = 1 ]; then
      BUDGET=400 T_INSTALL=400 STEPS=" " bash bench/run-python-gpu.sh "$out/python" "$datasets" > "$out/python-install.log" 2>&1 &
      install_pid=$!
    fi
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS > "$out/configure.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target dfgnn dfgnn_tests_gpu dfgnn-verify dfgnn-tune dfgnn-bench dfgnn-db \
        dfgnn-graph > "$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
    echo "built at $SECONDS s"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    if [ "${VERIFY:-1}" = 1 ]; then
      timeout "$(left)" build-gpu/tools/dfgnn-verify --tiny --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
      echo "dfgnn-verify --tiny exit $?: $(grep -E 'cases:|prepared' "$out/verify-tiny.log" | tr '\n' ' ')"
      grep FAIL "$out/verify-tiny.log" | head -10
    fi
    timeout "$(left)" ctest --test-dir build-gpu -L gpu -LE long ${CTEST_REGEX:+-R "$CTEST_REGEX"} -j 8 --output-on-failure \
      --timeout 300 > "$out/ctest-gpu.log" 2>&1
    echo "ctest -L gpu exit $?: $(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log")"
    grep -E "\(Failed\)|\*\*\*|Skipped" "$out/ctest-gpu.log" | head -20
    if [ -n "$install_pid" ]; then
      wait $install_pid; tail -2 "$out/python-install.log"
      DFGNN_DATASETS=$PWD/$datasets timeout "$(left)" python3 -m pytest -q -p no:cacheprovider -rfs --durations=10 \
        ${PYTEST_ARGS:-tests/python} > "$out/pytest.log" 2>&1
      echo "pytest exit $?: $(tail -1 "$out/pytest.log")"
      grep -E "^FAILED|^ERROR" "$out/pytest.log" | head -20
    fi
    if [ "${MEMCHECK:-1}" = 1 ] && [ "$(left)" -gt 30 ]; then
      timeout "$(left)" compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tools/dfgnn-verify --tiny --repo . \
        --threads 16 > "$out/sanitizer-memcheck.log" 2>&1
      echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY|cases:' "$out/sanitizer-memcheck.log" | tr '\n' ' ')"
    fi
    ;;
  memcheck)
    build_targets dfgnn-verify
    part=${PART:-1/4}
    build-gpu/tools/dfgnn-verify --tiny --part "$part" --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
    echo "dfgnn-verify --tiny --part $part exit $?: $(grep -E 'part|cases:|prepared' "$out/verify-tiny.log" | tr '\n' ' ') ($SECONDS s)"
    timeout "${MEMCHECK_SECONDS:-480}" compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tools/dfgnn-verify --tiny --part "$part" --repo . \
      --threads 16 > "$out/sanitizer-memcheck.log" 2>&1
    echo "memcheck of part $part exit $?: $(grep -E 'ERROR SUMMARY|cases:' "$out/sanitizer-memcheck.log" | tr '\n' ' ') ($SECONDS s)"
    ;;
  verify)
    # A fresh machine: the library, dfgnn-verify and the Python package built at once, then
    # dfgnn-verify --tiny (every solver and lane mapping against the float64 reference, dropout too).
    unpack_deps
    BUDGET=400 T_INSTALL=400 STEPS=" " bash bench/run-python-gpu.sh "$out/python" "$datasets" > "$out/python-install.log" 2>&1 &
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS > "$out/configure.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target dfgnn-verify dfgnn-tune > "$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    timeout "${T_VERIFY:-200}" build-gpu/tools/dfgnn-verify --tiny --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
    echo "dfgnn-verify --tiny exit $?: $(grep -E 'cases:' "$out/verify-tiny.log")"
    grep FAIL "$out/verify-tiny.log" | head -10
    wait
    tail -2 "$out/python-install.log"
    ;;
  quick)
    # A fresh machine with little device time: dfgnn-verify and dfgnn-bench only, dfgnn-verify --tiny
    # within T_VERIFY (120), then this build alone on AB_CASES's lines (no base build).
    unpack_deps
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS > "$out/configure.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target dfgnn-verify dfgnn-bench > "$out/build.log" 2>&1 ||
      { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
    echo "built at $SECONDS s"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    timeout "${T_VERIFY:-120}" build-gpu/tools/dfgnn-verify --tiny --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
    echo "dfgnn-verify --tiny exit $? at $SECONDS s: $(grep -E 'cases:|prepared' "$out/verify-tiny.log" | tr '\n' ' ')"
    grep FAIL "$out/verify-tiny.log" | head -10
    k=0
    while IFS=$'\t' read -r graph model heads dim sched; do
      k=$((k + 1))
      build-gpu/tools/dfgnn-bench $graph --model $model --heads $heads --dim $dim --direction both \
        --schedules "$sched" --warmup 10 --iters 60 --no-baseline --json "$out/bench-$k.json" > "$out/bench-$k.txt" 2>&1
      grep -E "ms|error" "$out/bench-$k.txt" | head -8
    done < <(cases "${AB_CASES:-/dev/null}")
    ;;
  prepare)
    unpack_deps
    BUDGET=400 T_INSTALL=400 STEPS=" " bash bench/run-python-gpu.sh "$out/python" "$datasets" > "$out/python-install.log" 2>&1 &
    install_pid=$!
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF $CMAKE_ARGS > "$out/configure.log" 2>&1 &&
      cmake --build build-gpu -j "$(nproc)" --target dfgnn-tune dfgnn-db > "$out/build.log" 2>&1 ||
      { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
    echo "built at $SECONDS s"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    wait $install_pid; tail -2 "$out/python-install.log"
    echo "installed at $SECONDS s"
    DFGNN_DATASETS=$PWD/$datasets timeout "${T_PYTEST:-200}" python3 -m pytest -q -p no:cacheprovider -rfs \
      ${PYTEST_ARGS:-tests/python/test_shipped_db.py} > "$out/pytest.log" 2>&1
    echo "pytest exit $?: $(tail -1 "$out/pytest.log")"
    grep -E "^FAILED|^ERROR|^SKIPPED" "$out/pytest.log" | head -20
    ;;
  ab)
    # The configurations that existed before (issue 23's no-regression check): this tree against
    # .ab/base.tgz (git archive of the older commit), the same schedules side by side, alternating
    # which version goes first; dfgnn-bench times the C API's calls with CUDA events.
    build_ab_pair
    k=0
    if [ -n "${AB_CASES:-}" ]; then  # a cases file instead (see cases())
      while IFS=$'\t' read -r graph model heads dim sched; do
        k=$((k + 1))
        order=(base new); [ $((k % 2)) = 0 ] && order=(new base)
        for v in "${order[@]}"; do
          dir=build-gpu; [ $v = base ] && dir=$ab_base/build
          $dir/tools/dfgnn-bench $graph --model $model --heads $heads --dim $dim --direction both --schedules "$sched" \
            --warmup 10 --iters "${AB_ITERS:-100}" --no-baseline ${AB_BENCH_ARGS:-} --json "$out/ab-$v-$k.json" \
            > "$out/ab-$v-$k.txt" 2>&1 ||
            tail -3 "$out/ab-$v-$k.txt"
        done
      done < <(cases "$AB_CASES")
      python3 bench/ab_table.py "$out" "$k" 2>&1 | tail -60 || true
      exit 0
    fi
    configs=("transformer 1 128 32" "transformer 4 64 16" "gat 1 128 32" "gatv2 1 128 32")
    for graph in "--rmat 20" "--graph $datasets/pubmed"; do
      for c in "${configs[@]}"; do
        read -r model heads dim lanes <<< "$c"
        k=$((k + 1))
        sched="default;hub_split:lanes=$lanes,groups=$((256 / lanes)),vec=4,threshold=256,chunk=256;edge_balanced:lanes=$lanes,groups=$((512 / lanes)),vec=4,chunk=1024"
        order=(base new); [ $((k % 2)) = 0 ] && order=(new base)
        for v in "${order[@]}"; do
          dir=build-gpu; [ $v = base ] && dir=$ab_base/build
          $dir/tools/dfgnn-bench $graph --model $model --heads $heads --dim $dim --direction both --schedules "$sched" \
            --warmup 10 --iters 50 --no-baseline --json "$out/ab-$v-$k.json" > "$out/ab-$v-$k.txt" 2>&1 || tail -3 "$out/ab-$v-$k.txt"
        done
      done
    done
    python3 bench/ab_table.py "$out" "$k" 2>&1 | tail -40 || true
    ;;
  sweep)
    # Always the incremental build: a warm machine's older build would stamp results with its kernel source.
    build_targets dfgnn-tune dfgnn-db
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    # The deadline counts from this phase's start (tune-site.sh's own clock starts at zero).
    # The sweep's graphs are .sweep-data's (bench/carry-inputs.sh: xz, which the library does not read,
    # unpacked here) unless DATASETS names a directory.
    sweep_data=${DATASETS:-}
    if [ -z "$sweep_data" ]; then
      sweep_data=/tmp/dfgnn-sweep-data
      rm -rf "$sweep_data"
      for d in .sweep-data/*/; do
        g=$(basename "$d")
        mkdir -p "$sweep_data/$g"
        [ -f "$d/stats.json" ] && cp "$d/stats.json" "$sweep_data/$g/"
        xz -dc "$d/edges.txt.xz" > "$sweep_data/$g/edges.txt" || { echo "sweep: cannot unpack $d/edges.txt.xz"; exit 1; }
      done
      # only the graphs carried (GRAPHS names them when a call carries a part)
      [ -n "${GRAPHS:-}" ] || export GRAPHS="$(ls "$sweep_data" | tr '\n' ' ')"
    fi
    SECONDS_LEFT=$(( ${SECONDS_LEFT:-1000000} - SECONDS )) bash bench/tune-site.sh build-gpu "$out" "$sweep_data"
    ;;
  accept)
    graphs=${ACCEPT_GRAPHS:-"wiki-chameleon mesh-mdual snap-p2p-Gnutella08 snap-email-Eu-core tu-ENZYMES roget-thesaurus
      celegans-neural cora-linqs-directed"}
    configs=${ACCEPT_CONFIGS:-"gat:8:8:float32 gat:1:7:float32 transformer:4:64:float32 gatv2:1:128:float32"}
    args=() names=()
    for g in $graphs; do
      if [ -d "$datasets/$g" ]; then args+=(--graph "$datasets/$g"); names+=("$g"); else echo "skipped $g: not in $datasets"; fi
    done
    accept_configs=()
    for c in $configs; do
      IFS=: read -r model heads dim dtype <<< "$c"
      build-gpu/tools/dfgnn-tune "${args[@]}" --model "$model" --heads "$heads" --dim "$dim" --dtype "$dtype" \
        --direction both --budget "${ACCEPT_BUDGET:-3}" --db "$out/unseen.db" > "$out/tune-unseen-$model-$heads-$dim-$dtype.log" 2>&1 ||
        { tail -5 "$out/tune-unseen-$model-$heads-$dim-$dtype.log"; exit 1; }
      accept_configs+=("$model:H$heads:D$dim:$dtype")
    done
    python3 bench/tuning_acceptance.py --db "$out/unseen.db" --datasets "$datasets" --graphs "$(IFS=,; echo "${names[*]}")" \
      --configs "$(IFS=,; echo "${accept_configs[*]}")" --choices default,tuned,rule --out "$out/accept" \
      --budget-s "${ACCEPT_SECONDS:-240}" 2>&1 |
      tee "$out/accept.log" | tail -40
    ;;
  pytest)
    SKIP_INSTALL=1 BUDGET=${BUDGET:-300} T_PYTEST=${T_PYTEST:-280} STEPS=pytest PYTEST_ARGS="${PYTEST_ARGS:-tests/python}" \
      bash bench/run-python-gpu.sh "$out/python" "$datasets"
    grep -E "FAILED|ERROR|passed|failed" "$out/python/pytest.log" | tail -25
    ;;
  ab-kernels)
    # Why a case differs between the trees: each kernel's GPU time, launch by launch. One
    # dfgnn-bench case (AB_KERNEL_CASE: "GRAPH_ARGS|MODEL HEADS DIM|SCHEDULE", default the Graph
    # Transformer backward on R-MAT 2^20 that 2026-12-07-h100.md found 7% slower than 0cbcf60) runs
    # under ncu in each build (the base as the ab phase builds it), and bench/ab_kernels.py matches the
    # launches by kernel, pass, grid and block. ncu leaves the caches as the calls left them
    # (--cache-control none): dfgnn-bench rotates its inputs, and L2 reuse is part of what differs.
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
    [ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
    build_ab_pair
    spec=${AB_KERNEL_CASE:-"--rmat 20|transformer 1 128|edge_balanced:lanes=32,groups=16,vec=4,threshold=0,chunk=1024"}
    IFS='|' read -r graph config sched <<< "$spec"
    read -r model heads dim <<< "$config"
    for v in base new; do
      dir=build-gpu; [ $v = base ] && dir=$ab_base/build
      "$ncu" --clock-control none --cache-control none --csv --print-units base --print-kernel-base mangled \
        --metrics gpu__time_duration.sum --log-file "$out/ncu-$v.csv" \
        $dir/tools/dfgnn-bench $graph --model "$model" --heads "$heads" --dim "$dim" --direction "${AB_KERNEL_DIRECTION:-backward}" \
        --schedules "$sched" --warmup 2 --iters "${AB_KERNEL_ITERS:-10}" --no-baseline > "$out/ncu-$v-run.log" 2>&1 ||
        { tail -5 "$out/ncu-$v-run.log"; exit 1; }
    done
    python3 bench/ab_kernels.py "$out/ncu-base.csv" "$out/ncu-new.csv" --json "$out/ab-kernels.json" | tee "$out/ab-kernels.md"
    ;;
  tune-share)
    args=${TUNE_SHARE_ARGS:-"--rmat 20 --model transformer --heads 4 --dim 64 --direction both --budget 20"}
    for r in $(seq 1 "${TUNE_SHARE_ROUNDS:-1}"); do
      order="0 ahead"; [ $((r % 2)) = 0 ] && order="ahead 0"
      for t in $order; do
        rm -f "$out/share-$r-$t.db"*
        start=$SECONDS
        ( [ $t = 0 ] && export DFGNN_TUNE_COMPILE_THREADS=0
          build-gpu/tools/dfgnn-tune $args --db "$out/share-$r-$t.db" --json "$out/share-$r-$t.json" ) \
          > "$out/share-$r-$t.log" 2>&1 || { tail -5 "$out/share-$r-$t.log"; exit 1; }
        echo "round $r, compile threads $t: $((SECONDS - start)) s"
      done
    done
    python3 - "$out" <<'PY' | tee "$out/tune-share.md"
import glob, json, os, sys
def passes(x):  # every pass report (a dict with compile_wait_s) anywhere in dfgnn-tune's JSON
    if isinstance(x, dict):
        if "compile_wait_s" in x: yield x
        for v in x.values(): yield from passes(v)
    elif isinstance(x, list):
        for v in x: yield from passes(v)
print("| round | compile threads | passes | tuning s | waiting on compiles s | compile share |")
print("|---|---|---:|---:|---:|---:|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "share-*.json"))):
    _, r, t = os.path.basename(f)[:-5].split("-")
    ps = list(passes(json.load(open(f))))
    el, wait = sum(p["elapsed_s"] for p in ps), sum(p["compile_wait_s"] for p in ps)
    threads = sorted({p["compile_threads"] for p in ps})
    print(f"| {r} | {','.join(map(str, threads))} | {len(ps)} | {el:.1f} | {wait:.1f} | {wait / el if el else 0:.1%} |")
PY
    ;;
  host-ab)
    base=/tmp/dfgnn-host-ab
    if [ ! -f "$base/site/dfgnn/__init__.py" ]; then
      rm -rf "$base" && mkdir -p "$base/src" && git ls-files -z | xargs -0 cp --parents -t "$base/src" &&
        tar xzf .ab/py-base.tgz -C "$base/src" || exit 1
      (cd "$base/src" && python3 -m pip install --disable-pip-version-check --no-build-isolation --no-index --no-deps \
        --target "$base/site" -C build-dir="$base/build" .) > "$out/host-ab-base-build.log" 2>&1 ||
        { tail -20 "$out/host-ab-base-build.log"; exit 1; }
      echo "base built at $SECONDS s"
    fi
    for r in $(seq "${HOST_AB_ROUNDS:-3}"); do
      order=(base new); [ $((r % 2)) = 0 ] && order=(new base)
      for v in "${order[@]}"; do
        site=$PWD/build-gpu-python/site script=bench/op_overhead.py
        [ $v = base ] && site=$base/site script=$base/src/bench/op_overhead.py  # its own, for its Launch
        PYTHONPATH=$site DFGNN_DATASETS=$PWD/$datasets python3 "$script" "$out/$v-$r" --no-pyg --no-compile \
          > "$out/$v-$r.log" 2>&1 || tail -5 "$out/$v-$r.log"
      done
    done
    python3 - "$out" "${HOST_AB_ROUNDS:-3}" <<'PY' | tee "$out/host-ab.md"
import json, statistics, sys, pathlib
out, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def rows(v, r):
    f = out / f"{v}-{r}" / "op_overhead.json"
    return json.loads(f.read_text()) if f.is_file() else None
print("| case | metric | base (median of rounds) | new | new / base |\n|---|---|---:|---:|---:|")
vals = {}
for v in ("base", "new"):
    for r in range(1, rounds + 1):
        f = out / f"{v}-{r}" / "op_overhead.json"
        for row in json.loads(f.read_text())["results"] if f.is_file() else []:
            name = " ".join(str(row.get(k, "")) for k in ("case", "impl", "passes"))
            for metric, x in row.items():
                if metric.endswith("_us") and isinstance(x, (int, float)):
                    vals.setdefault((name, metric), {}).setdefault(v, []).append(float(x))
for (name, metric), by in vals.items():
    if "base" in by and "new" in by:
        b, n = statistics.median(by["base"]), statistics.median(by["new"])
        print(f"| {name} | {metric} | {b:.1f} | {n:.1f} | {n / b:.3f} |")
PY
    ;;
  cold)
    # bench/cold_start.py (fresh processes, cold and warm user cache) with SHAPES_ARGS, after verify.
    python3 bench/cold_start.py --out "$out" --datasets "$datasets" "$@" 2>&1 | tee "$out/cold.log" | tail -30
    ;;
  reorder)
    # bench/reorder_bench.py (issue 28) with SHAPES_ARGS; orders saved elsewhere (--save-perms) from PERMS.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    python3 bench/reorder_bench.py --out "$out" --datasets "$datasets" ${PERMS:+--perms "$PERMS"} "$@" 2>&1 |
      tee "$out/reorder.log" | tail -60
    ;;
  bytes)
    # Issue 28's bytes model: ncu's DRAM bytes of one forward+backward per order (SHAPES_ARGS pick the
    # graphs and configs), then the table (OUTDIR/bytes-reorder.{json,md}).
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
    [ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
    "$ncu" --clock-control none --profile-from-start off --csv --print-units base --print-kernel-base mangled \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --log-file "$out/ncu.csv" \
      python3 bench/reorder_bench.py --out "$out" --tag bytes --datasets "$datasets" ${PERMS:+--perms "$PERMS"} \
      --sections bytes "$@" > "$out/bytes-run.log" 2>&1 || { tail -20 "$out/bytes-run.log"; exit 1; }
    python3 bench/reorder_bench.py --parse-ncu "$out/ncu.csv" --report "$out/bytes-reorder.json" && cat "$out/bytes-reorder.md"
    ;;
  shapes)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1
    python3 bench/shapes.py --out "$out" --datasets "$datasets" "$@" 2>&1 | tee "$out/shapes.log" | tail -60
    ;;
  *) echo "unknown phase '$phase'" >&2; exit 2 ;;
esac
