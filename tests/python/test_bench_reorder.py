"""CPU checks of bench/reorder_bench.py (issue 28's measurements): saved orders are refused for
another graph, the ncu CSV is cut into one block per profiled call, and the compulsory bytes are
what the formula says. The timings themselves need a GPU."""

import json

import numpy as np
import pytest

import dfgnn
from conftest import load_bench

rb = load_bench("reorder_bench")


def csv_row(kernel_id, name, metric, unit, value):
    fields = [str(kernel_id), "1", "python3", "host", name, "1", "7", "(1, 1, 1)", "(1, 1, 1)", "0", "9.0",
              "Command line profiler metrics", metric, unit, value]
    return ",".join(f'"{f}"' for f in fields)


HEADER = ",".join(f'"{h}"' for h in ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                                      "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
                                      "Metric Name", "Metric Unit", "Metric Value"])
FWD_ROWS = "_ZN5dfgnn11rows_kernelINS_7ForwardINS_3GeoIfLi8EEENS_3GatEEELi16ELi1EEEvNS_6ParamsE"
FWD_MERGE = "_ZN5dfgnn12merge_kernelINS_7ForwardINS_3GeoIfLi8EEENS_3GatEEELi16EEEvNS_6ParamsE"
BWD_ROW = "_ZN5dfgnn11rows_kernelINS_11BackwardRowINS_3GeoIfLi8EEENS_3GatEEELi16ELi1EEEvNS_6ParamsE"
BWD_COL = "_ZN5dfgnn11rows_kernelINS_11BackwardColINS_3GeoIfLi8EEENS_3GatEEELi16ELi1EEEvNS_6ParamsE"
PREP = "_ZN5dfgnn11prep_kernelINS_3GeoIfLi8EEENS_3GatELi32EEEvNS_6ParamsE"


def call_rows(first_id, scale):
    """One profiled forward+backward: two forward kernels (rows, merge), prep, row and column passes,
    and a torch kernel in between that is not dfgnn's."""
    rows, k = [], first_id
    for name, read, ns in ((FWD_ROWS, 100, 10), (FWD_MERGE, 20, 2), ("elementwise_kernel", 10**9, 10**9),
                           (PREP, 5, 1), (BWD_ROW, 300, 30), (BWD_COL, 200, 20)):
        rows += [csv_row(k, name, "dram__bytes_read.sum", "byte", f"{read * scale:,}"),
                 csv_row(k, name, "dram__bytes_write.sum", "byte", str(scale)),
                 csv_row(k, name, "gpu__time_duration.sum", "ns", str(ns * scale))]
        k += 1
    return rows


def test_parse_ncu_cuts_one_block_per_call_and_scales_units(tmp_path):
    csv = tmp_path / "ncu.csv"
    csv.write_text("\n".join(["==PROF== Connected to process", HEADER] + call_rows(0, 1) + call_rows(10, 1000)) + "\n")
    order = [dict(graph="g", nodes=100, edges=1000, config="gat:8:8:float32", order=o) for o in ("none", "degree")]
    report = tmp_path / "r.json"
    report.write_text(json.dumps(dict(meta=dict(date="d", commit="c", gpu="g", torch="t", rounds=1, calls=1,
                                                argv=""), orders=[], ops=[], train=[], narrow=[], skipped=[],
                                      errors=[], copy_GBps=1000.0, bytes_order=order)))
    rb.parse_ncu(rb.parse_args(["--parse-ncu", str(csv), "--report", str(report)]))
    table = {(r["order"], r["pass"]): r for r in json.loads(report.read_text())["bytes"]}
    assert len(table) == 4
    # forward: rows + merge kernels (read 100 + 20, one written byte each); the torch kernel is not counted
    assert table[("none", "forward")]["dram_bytes"] == 120 + 2
    assert table[("none", "forward")]["seconds"] == pytest.approx(12e-9)
    assert table[("none", "backward")]["dram_bytes"] == 505 + 3
    assert table[("degree", "forward")]["dram_bytes"] == 1000 * 122  # "100,000": a thousands separator
    assert table[("degree", "backward")]["seconds"] == pytest.approx(1000 * 51e-9)
    assert table[("none", "forward")]["compulsory_bytes"] == rb.compulsory_bytes(100, 1000, "gat:8:8:float32")["forward"]
    assert (tmp_path / "r.md").read_text().count("| g | gat:8:8:float32 |") == 4


def test_parse_ncu_refuses_a_count_that_differs_from_the_run(tmp_path):
    csv = tmp_path / "ncu.csv"
    csv.write_text("\n".join([HEADER] + call_rows(0, 1)) + "\n")
    report = tmp_path / "r.json"
    report.write_text(json.dumps(dict(bytes_order=[dict(graph="g", nodes=1, edges=1, config="gat:8:8:float32",
                                                        order=o) for o in ("none", "degree")])))
    with pytest.raises(SystemExit, match="1 profiled calls, the run recorded 2"):
        rb.parse_ncu(rb.parse_args(["--parse-ncu", str(csv), "--report", str(report)]))


def test_compulsory_bytes_by_hand():
    # Transformer, 1 head of 128 fp32 channels, N = 10, E = 40: 512 bytes a row.
    got = rb.compulsory_bytes(10, 40, "transformer:1:128:float32")
    csr = 4 * 11 + 4 * 40
    assert got["forward"] == 3 * 512 * 10 + csr + 512 * 10
    assert got["backward"] == 8 * 512 * 10 + csr + 4 * 11 + 8 * 40
    assert rb.compulsory_bytes(10, 40, "gat:8:8:bfloat16")["forward"] == 2 * 128 * 10 + csr


def test_saved_order_round_trips_and_is_refused_for_another_graph(tmp_path):
    g = dfgnn.Graph.rmat(8, 2000, seed=3, permute=True)
    other = dfgnn.Graph.rmat(8, 2000, seed=4, permute=True)
    perm = dfgnn.reorder(g, method="degree")
    rb.save_perm(tmp_path, "g", "degree", perm, 0.5, rb.digest(g))
    loaded, seconds, machine = rb.load_perm(tmp_path, "g", "degree", rb.digest(g))
    assert np.array_equal(loaded, perm) and seconds == 0.5 and machine
    assert rb.digest(g) != rb.digest(other)
    assert "saved for another graph" in rb.load_perm(tmp_path, "g", "degree", rb.digest(other))
    assert "no saved order" in rb.load_perm(tmp_path, "g", "rcm", rb.digest(g))
    # A damaged file (two nodes mapped to one id) is no permutation.
    z = dict(np.load(tmp_path / "g-degree.npz"))
    z["delta"] = z["delta"].copy()
    z["delta"][1] = 0
    np.savez_compressed(tmp_path / "g-degree.npz", **z)
    assert "not a permutation" in rb.load_perm(tmp_path, "g", "degree", rb.digest(g))
