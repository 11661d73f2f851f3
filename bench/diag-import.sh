#!/usr/bin/env bash
# Diagnoses import-order crashes of the Python package on a GPU machine (after run-python-gpu.sh installed it).
site=$PWD/build-gpu-python/site
export PYTHONPATH=$site LD_LIBRARY_PATH=/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cd /tmp
t() { echo "--- $1"; timeout 60 python3 -X faulthandler -c "$1" > /tmp/t.log 2>&1; rc=$?; head -${2:-3} /tmp/t.log; echo "rc $rc"; }
t "import dfgnn; import torch; print('dfgnn first ok')" 14
echo "--- importtime tail"; timeout 60 python3 -X importtime -c "import dfgnn; import torch" 2>&1 | tail -8
t "import ctypes; ctypes.CDLL('/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu/libsqlite3.so.0'); import torch; print('sqlite then torch ok')"
t "import ctypes; ctypes.CDLL('$site/dfgnn/libdfgnn.so.1'); import torch; print('libdfgnn then torch ok')"
t "import ctypes; ctypes.CDLL('/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13'); ctypes.CDLL('/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu/libsqlite3.so.0'); ctypes.CDLL('/lib/x86_64-linux-gnu/libspdlog.so.1.12'); import torch; print('deps then torch ok')"
t "import sqlite3; print(sqlite3.sqlite_version)"
env -u LD_LIBRARY_PATH timeout 60 python3 -c "import dfgnn; import torch; print('no LD_LIBRARY_PATH ok')" 2>&1 | tail -2
env -u LD_LIBRARY_PATH ldd $site/dfgnn/libdfgnn.so.1 | grep sqlite
echo "exported: $(nm -D --defined-only $site/dfgnn/libdfgnn.so.1 | wc -l)"; nm -D --defined-only $site/dfgnn/libdfgnn.so.1 | grep -v dfgnn | head
