#!/usr/bin/env bash
# One device call that verifies the tuning work on a GPU machine: builds (tools/gpu-check.sh), runs
# the GPU tests, compute-sanitizer memcheck on the device-built plans, installs the Python package,
# then issue 14's acceptance through dfgnn.torch (bench/tuning_acceptance.py against the shipped
# data/tuning/sm90.db, with the hand rule beside the fitted one) and the tune-twice check. About nine
# minutes on an H200. Usage: bench/gpu-verify-tuning.sh OUTDIR (datasets in .bench-data, debs in .devdeps)
# Writes OUTDIR/a/... and OUTDIR/a.tgz.
OUT=${1:?usage: bench/gpu-verify-tuning.sh OUTDIR}
cd "$(dirname "$0")/.."
set -u; o=$OUT/a; mkdir -p $o
timeout 150 tools/gpu-check.sh $o build .devdeps .bench-data > $o/build-step.log 2>&1; echo "build rc=$?"
timeout 170 ctest --test-dir build-gpu -L gpu -j 8 -E verify_quick --output-on-failure --timeout 160 > $o/ctest-gpu.log 2>&1; tail -3 $o/ctest-gpu.log; grep -E "\(Failed\)|Timeout" $o/ctest-gpu.log | head
export LD_LIBRARY_PATH=/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/dfgnn_tests_gpu --gtest_filter='GpuOpsDeviceBuilt.*:DeviceBuild.CooMatches*' > $o/memcheck-devplan.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $o/memcheck-devplan.log)"
STEPS=none BUDGET=120 bench/run-python-gpu.sh $o/py .bench-data > $o/install.log 2>&1; echo "install rc=$?"
export PYTHONPATH=$PWD/build-gpu-python/site
G=actor,amazon-photo,blogcatalog,citeseer,coauthor-cs,cora,deezer-europe,mesh-4elt,musae-facebook,polblogs,power-grid-us,pubmed,reddit-threads-10k,snap-email-Enron,snap-wiki-Vote,tu-PROTEINS,wikipedia-crocodile,twitch-engb
DFGNN_SHIPPED_DB=off timeout 260 python3 bench/tuning_acceptance.py --db data/tuning/sm90.db --datasets .bench-data --graphs $G --configs transformer:H1:D128:float32,transformer:H4:D64:float32,gat:H1:D128:float32,gatv2:H4:D64:bfloat16 --out $o/acceptance --budget-s 215 --hand > $o/acceptance.log 2>&1; echo "acceptance rc=$?"; tail -25 $o/acceptance.log
DFGNN_SHIPPED_DB=off timeout 90 bash bench/tune-twice.sh build-gpu $o/twice .bench-data > $o/twice.log 2>&1; echo "twice rc=$?"; tail -12 $o/twice.log
rm -rf $o/acceptance/work; tar czf $OUT/a.tgz -C $OUT a
