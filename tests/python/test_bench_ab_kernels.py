"""CPU checks of bench/ab_kernels.py (the per-kernel A/B of two builds): launches are matched across
versions whose template arguments differ, other libraries' kernels are left out, units are converted,
and a launch found in one build only is reported, not dropped."""

import json

import pytest

from conftest import load_bench

ak = load_bench("ab_kernels")

HEADER = ",".join(f'"{h}"' for h in ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                                      "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
                                      "Metric Name", "Metric Unit", "Metric Value"])
# The same balanced backward-row kernel as 0cbcf60 and a later tree name it (Geo gained two arguments).
ROW_OLD = "_ZN5dfgnn15balanced_kernelINS_11BackwardRowINS_3GeoIfLi128ELi1ELi32ELi4ELb0EEENS_11TransformerEEELi16EEEvNS_6ParamsE"
ROW_NEW = ("_ZN5dfgnn15balanced_kernelINS_11BackwardRowINS_3GeoIfLi128ELi1ELi32ELi4ELb0ELi1ELb0EEENS_11TransformerEEELi16EEE"
           "vNS_6ParamsE")
PREP = "_ZN5dfgnn11prep_kernelINS_3GeoIfLi128ELi1ELi32ELi1ELb0EEENS_11TransformerELi8EEEvNS_6ParamsE"
STAGE1 = "_ZN5dfgnn19reduce_nodes_stage1IfLi128ELb1EEEvPKvPKfS4_iiiPf"


def row(kid, name, value, unit="ns", grid="(4096, 1, 1)", block="(512, 1, 1)", metric="gpu__time_duration.sum"):
    fields = [str(kid), "1", "dfgnn-bench", "host", name, "1", "7", block, grid, "0", "9.0",
              "Command line profiler metrics", metric, unit, value]
    return ",".join(f'"{f}"' for f in fields)


def write(path, rows):
    # The profiled program's own output is interleaved with ncu's CSV lines.
    path.write_text("==PROF== Connected to process\n" + HEADER + "\n" + "\n".join(rows) + "\nbench: done\n")
    return str(path)


def test_launches_match_across_template_arguments_and_units(tmp_path):
    base = write(tmp_path / "base.csv", [row(1, ROW_OLD, "1,000"), row(2, PREP, "50"), row(3, ROW_OLD, "1,200"),
                                        row(4, PREP, "70"), row(5, ROW_OLD, "1,100"), row(6, "cusparseSpMM_kernel", "9")])
    new = write(tmp_path / "new.csv", [row(1, ROW_NEW, "1.3", unit="us"), row(2, PREP, "60"),
                                       row(3, ROW_NEW, "1.1", unit="us"), row(4, PREP, "60"),
                                       row(5, ROW_NEW, "1.2", unit="us"),
                                       row(6, ROW_NEW, "1", metric="dram__bytes_read.sum", unit="byte")])
    rows = {key: rest for key, *rest in ak.compare(ak.launch_times(base), ak.launch_times(new))}
    assert set(rows) == {("balanced_kernel", "BackwardRow", "(4096, 1, 1)", "(512, 1, 1)"),
                         ("prep_kernel", "", "(4096, 1, 1)", "(512, 1, 1)")}
    nb, nn, mb, mn, ratio = rows[("balanced_kernel", "BackwardRow", "(4096, 1, 1)", "(512, 1, 1)")]
    assert (nb, nn) == (3, 3)
    assert mb == pytest.approx(1.1) and mn == pytest.approx(1.2) and ratio == pytest.approx(1.2 / 1.1)
    nb, nn, mb, mn, ratio = rows[("prep_kernel", "", "(4096, 1, 1)", "(512, 1, 1)")]
    assert (mb, mn) == (pytest.approx(0.06), pytest.approx(0.06))


def test_a_launch_of_one_build_only_is_reported(tmp_path):
    base = write(tmp_path / "base.csv", [row(1, ROW_OLD, "1000"), row(2, STAGE1, "40", grid="(64, 2, 1)")])
    new = write(tmp_path / "new.csv", [row(1, ROW_NEW, "1000", grid="(8192, 1, 1)")])
    out = tmp_path / "ab.json"
    assert ak.main([base, new, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {(r["kernel"], r["grid"]): r for r in report["launches"]}
    assert rows[("reduce_nodes_stage1", "(64, 2, 1)")]["launches_new"] == 0
    assert rows[("reduce_nodes_stage1", "(64, 2, 1)")]["ratio"] is None
    # Another grid is another launch: the plan changed, and the table shows both sides apart.
    assert rows[("balanced_kernel", "(4096, 1, 1)")]["launches_new"] == 0
    assert rows[("balanced_kernel", "(8192, 1, 1)")]["launches_base"] == 0
    # The totals pair them again: every balanced backward-row launch, whatever its grid.
    totals = {(r["kernel"], r["pass"]): r for r in report["totals"]}
    summed = totals[("balanced_kernel", "BackwardRow")]
    assert (summed["launches_base"], summed["launches_new"]) == (1, 1)
    assert summed["total_us_base"] == pytest.approx(1.0) and summed["ratio"] == pytest.approx(1.0)


def test_two_instances_under_one_key_are_flagged(tmp_path, capsys):
    other = ROW_OLD.replace("Li16EEE", "Li32EEE")  # another groups argument, the same launch shape
    base = write(tmp_path / "base.csv", [row(1, ROW_OLD, "1000"), row(2, other, "3000")])
    new = write(tmp_path / "new.csv", [row(1, ROW_NEW, "1000")])
    assert ak.main([base, new]) == 0
    assert "note: base: balanced_kernel BackwardRow (4096, 1, 1) (512, 1, 1) pools 2 kernel names" in capsys.readouterr().out


def test_a_log_without_dfgnn_launches_or_in_another_unit_is_refused(tmp_path):
    empty = write(tmp_path / "empty.csv", [row(1, "cusparseSpMM_kernel", "9")])
    with pytest.raises(SystemExit, match="no dfgnn kernel launch"):
        ak.launch_times(empty)
    odd = write(tmp_path / "odd.csv", [row(1, ROW_NEW, "9", unit="cycle")])
    with pytest.raises(SystemExit, match="unit 'cycle'"):
        ak.launch_times(odd)
    narrow = tmp_path / "narrow.csv"
    narrow.write_text('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n"1","x","gpu__time_duration.sum","ns","5"\n')
    with pytest.raises(SystemExit, match="lacks .*Grid Size"):
        ak.launch_times(str(narrow))
