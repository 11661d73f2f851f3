"""The configuration zoo (bench/zoo.txt): the one list of users' op shapes that the sweep, the
acceptance benchmark and the cold-start benchmark read."""

import json
import subprocess
import sys

import pytest

import dfgnn
from conftest import REPO, load_bench


zoo = load_bench("zoo")


def test_committed_zoo_holds_the_shapes_users_run():
    entries = zoo.read_zoo()
    # PyG's examples/gat.py: 8 heads x 8 channels, then one head of C classes (Cora 7, PubMed 3).
    for shape in [("gat", 8, 8, "float32"), ("gat", 1, 7, "float32"), ("gat", 1, 3, "float32")]:
        assert shape in entries
    assert {m for m, *_ in entries} == set(zoo.MODELS)
    assert {d for m, h, d, t in entries if m == "gat" and h == 1} >= {3, 7, 16, 40, 47}
    assert "bfloat16" in {t for *_, t in entries}
    for model, heads, dim, dtype in entries:  # every entry is an op the library takes
        op = dfgnn.op(model, dtype, heads, dim)
        assert (op.heads, op.dim) == (heads, dim)


def test_zoo_cli_prints_the_same_entries_for_shell_scripts():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "zoo.py")], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"{m}:{h}:{d}:{t}" for m, h, d, t in zoo.read_zoo()]


@pytest.mark.parametrize("line, needle", [
    ("gat 8 8", "expected 'model heads dim dtype'"),
    ("gcn 8 8 float32", "expected"),
    ("gat 8 x float32", "expected"),
    ("gat 8 8 float64", "expected"),
])
def test_malformed_zoo_line_is_named(tmp_path, line, needle):
    path = tmp_path / "zoo.txt"
    path.write_text("# comment\ngat 1 7 float32\n" + line + "\n")
    with pytest.raises(ValueError, match=needle) as e:
        zoo.read_zoo(path)
    assert f"{path}:3" in str(e.value)


def test_duplicate_zoo_line_is_refused(tmp_path):
    path = tmp_path / "zoo.txt"
    path.write_text("gat 1 7 float32\ngat 1 7 float32  # again\n")
    with pytest.raises(ValueError, match="listed twice"):
        zoo.read_zoo(path)


def test_cold_start_compile_only_runs_a_fresh_process_per_config(tmp_path):
    """bench/cold_start.py --compile-only (no GPU): one fresh process compiles GAT 8 x 8's default modules on
    Cora; the report names the compiles it logged (the shipped layer is off in the tests, so NVRTC runs)."""
    out = tmp_path / "cold"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "cold_start.py"), "--compile-only", "--graphs", "cora",
                          "--configs", "gat:8:8:float32", "--out", str(out), "--tag", "t"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "t-cold-start.json").read_text())
    assert report["errors"] == []
    (row,) = report["rows"]
    assert (row["model"], row["heads"], row["dim"], row["dtype"]) == ("gat", 8, 8, "float32")
    assert row["forward_compile_ms"] > 0 and row["backward_compile_ms"] > 0
    assert row["compiles"] == len(row["compiled"]) > 0  # one INFO line per NVRTC run
    assert "| cora | gat | 8 x 8 | float32 |" in (out / "t-cold-start.md").read_text()


def test_cold_start_markdown_shows_torchs_first_backward_and_the_profile():
    """--breakdown rows carry torch's own first backward and a cProfile of dfgnn's; the table and one profile
    per cache state show them (rows without them keep dashes)."""
    cold = load_bench("cold_start")
    base = dict(graph="cora", model="gat", heads=8, dim=8, dtype="float32", first_forward_ms=9.5,
                first_backward_ms=1800.0, second_step_ms=10.0, compiles=0, torch_native="auto", modules={})
    rows = [dict(base, cache="cold", torch_first_backward_ms=12.5, first_backward_profile="  1  _run_backward 1.790"),
            dict(base, cache="warm")]
    meta = dict(date="d", commit="c", host="h", compile_only=False, argv="--breakdown")
    md = cold.markdown(dict(meta=meta, rows=rows, errors=[]))
    assert "| cora | gat | 8 x 8 | float32 | cold | 9.5 | 1800.0 | 12.5 | 10.0 | 0 | auto |" in md
    assert "| cora | gat | 8 x 8 | float32 | warm | 9.5 | 1800.0 | - | 10.0 | 0 | auto |" in md
    assert "cold cache (cProfile" in md and "_run_backward 1.790" in md and "warm cache (cProfile" not in md
    # the first forward in steps, where the row has them
    rows[0]["first_forward_steps"] = {"cuda_runtime_ms": 0.75, "db_open_ms": 1.25, "dispatch_ms": 2.25,
                                      "module_ms": 1.5, "native_load_ms": 0.5, "call_ms": 5.75}
    md = cold.markdown(dict(meta=meta, rows=rows, errors=[]))
    assert "| cora | gat | 8 x 8 | float32 | cold | 0.8 | 1.2 | 2.2 | 1.5 | 0.5 | 5.8 | 9.5 |" in md
    assert "| cora | gat | 8 x 8 | float32 | warm | 2" not in md.split("First forward in steps")[1].split("cProfile")[0]


def test_cold_start_sums_the_librarys_spans_per_phase():
    """A --breakdown child's stderr: the library's debug "span" lines are summed by name between the
    child's phase markers, and the table lists them, largest first."""
    cold = load_bench("cold_start")
    stderr = "\n".join([
        "[2026-12-06 18:00:00.001] [dfgnn] [debug] span GPU identity read: 900 us",  # before any phase
        "phase first forward",
        "[2026-12-06 18:00:00.002] [dfgnn] [debug] span database layers opened: 1500 us",
        "[2026-12-06 18:00:00.003] [dfgnn] [debug] span module loaded onto the GPU: 250 us",
        "[2026-12-06 18:00:00.004] [dfgnn] [info] compiled 2 kernels for sm_90 in 120 ms",
        "[2026-12-06 18:00:00.005] [dfgnn] [debug] span module loaded onto the GPU: 350 us",
        "phase first backward",
        "[2026-12-06 18:00:00.006] [dfgnn] [debug] span plan built and uploaded: 40 us",
    ])
    spans = cold.spans_by_phase(stderr)
    assert spans == {"before": {"GPU identity read": [1, 0.9]},
                     "first forward": {"database layers opened": [1, 1.5], "module loaded onto the GPU": [2, 0.6]},
                     "first backward": {"plan built and uploaded": [1, 0.04]}}
    row = dict(graph="cora", model="gat", heads=8, dim=8, dtype="float32", cache="warm", first_forward_ms=9.5,
               first_backward_ms=12.0, compiles=0, modules={}, spans=spans)
    md = cold.markdown(dict(meta=dict(date="d", commit="c", host="h", compile_only=False, argv="--breakdown"),
                            rows=[row], errors=[]))
    assert ("| cora | gat | 8 x 8 | float32 | warm | first forward | database layers opened 1x 1.50; "
            "module loaded onto the GPU 2x 0.60 |") in md


def test_shapes_smoke_runs_every_section(tmp_path):
    """bench/shapes.py --smoke (CPU, float64, a tiny graph): every section runs without an error, and each
    case names the schedule dispatch explains for the GPU op and times it."""
    pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    out = tmp_path / "shapes"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "shapes.py"), "--smoke", "--out", str(out),
                          "--tag", "t"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((out / "t-shapes.json").read_text())
    assert report["errors"] == []
    sections = {r["section"] for r in report["rows"]}
    assert {"heads", "dropout", "classes"} <= sections
    for r in report["rows"]:
        assert set(r["schedules"]["default"]) == {"forward", "backward_row", "backward_col"}
        assert all(us > 0 for us in r["us"]["default"].values()), r


def test_cold_start_says_whether_the_native_ops_ran(tmp_path):
    """Each row says whether the native eager ops ran its calls, beside the mode asked for; --native none
    turns them off in every child instead of letting each start its own background build."""
    cold = load_bench("cold_start")
    assert cold.native_setup("none", tmp_path) == {"DFGNN_TORCH_NATIVE": "0"}
    base = dict(graph="cora", model="gat", heads=8, dim=8, dtype="float32", cache="warm", first_forward_ms=9.5,
                first_backward_ms=12.0, compiles=0, modules={})
    rows = [dict(base, torch_native="1", native_used=True), dict(base, cache="cold", torch_native="0", native_used=False),
            dict(base, cache="cold", torch_native="auto")]  # a row from before native_used was recorded
    md = cold.markdown(dict(meta=dict(date="d", commit="c", host="h", compile_only=False, argv="", native="prebuilt"),
                            rows=rows, errors=[]))
    assert "| 0 | 1, used |" in md and "| 0 | 0, not used |" in md and "| 0 | auto |" in md
    assert "Native eager ops: prebuilt." in md
