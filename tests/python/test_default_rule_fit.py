"""tools/fit_default_rule.py: the fit of the default rule on synthetic cases with a known answer, the
database reader, and that the committed rule is what the committed extract and script give."""
import importlib.util
import json
import math
import pathlib
import random
import sqlite3

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "fit_default_rule.py"
CASES = ROOT / "tests" / "data" / "default_rule_cases.json"
RULE = ROOT / "runtime" / "data" / "default_rule.json"

pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"{SCRIPT} is not in this checkout (installed-only run)")


@pytest.fixture(scope="module")
def fit():
    pytest.importorskip("numpy")
    spec = importlib.util.spec_from_file_location("fit_default_rule", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fingerprint(n, max_degree, long_rows):
    hist = [0.0] * 24
    hist[3] = 1.0
    return {"version": 1, "num_nodes": n, "num_edges": 8 * n, "mean_degree": 8.0, "max_degree": max_degree,
            "p50": 8.0, "p90": 12.0, "p99": 30.0, "p999": 60.0, "cv": 0.5 if long_rows == 0 else 3.0,
            "gini": 0.3, "hist": hist, "top1pct_edge_share": 0.02 if long_rows == 0 else 0.4,
            "hub_rows": [long_rows * 4, long_rows * 2, long_rows] + [0] * 7}


SUB = {128: "subwarp:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=0",
       64: "subwarp:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=0"}
HUB = {128: "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=256,chunk=256",
       64: "hub_split:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=256,chunk=256"}
EDGE = {128: "edge_balanced:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=0,chunk=512",
        64: "edge_balanced:lanes=16,groups=16,team=1,vec=4,mid=0,threshold=0,chunk=1024"}


def synthetic_cases(seed=1):
    """Graphs with long rows (>= 256 edges: many or few) and without. Truth: without long rows the
    sub-warp mapping is best; with a few long rows hub split, with many the edge-balanced one (which
    the hand rule, hub split at max degree >= 256, misses). Times carry 2% noise."""
    rng = random.Random(seed)
    cases = []
    sizes = [1000 + 37 * k for k in range(18)]
    rng.shuffle(sizes)  # sizes say nothing about the answer
    graphs = [("flat%d" % i, fingerprint(sizes[i], 40 + i, 0)) for i in range(6)]
    graphs += [("fewhubs%d" % i, fingerprint(sizes[6 + i], 900 + 100 * i, 3 + i)) for i in range(6)]
    graphs += [("manyhubs%d" % i, fingerprint(sizes[12 + i], 5000 + 100 * i, 400 + 50 * i)) for i in range(6)]
    for name, fp in graphs:
        long_rows = fp["hub_rows"][2]
        for dim in (128, 64):
            for p in (0, 1, 2):
                base = 1.0 + rng.random()
                best = SUB if long_rows == 0 else HUB if long_rows < 100 else EDGE
                times = {}
                for texts in (SUB, HUB, EDGE):
                    factor = 1.0 if texts is best else 1.3 + rng.random()
                    times[texts[dim]] = base * factor * (1 + 0.02 * rng.random())
                if long_rows == 0:
                    del times[HUB[dim]]  # hub split does not apply without long rows: never measured
                default = HUB[dim] if fp["max_degree"] >= 256 else SUB[dim]
                cases.append({"graph": name, "fp": fp,
                              "op": {"model": 2, "dtype": 0, "heads": 1 if dim == 128 else 4, "dim": dim, "pass": p,
                                     "variant": 8},
                              "default": default, "times": times})
    return cases


def test_fit_recovers_the_known_rule(fit):
    cases = synthetic_cases()
    nodes = fit.fit_rule(cases, fit.DEFAULT_PARAMS)
    for c in cases:  # every case gets its best schedule (within the 2% noise)
        assert fit.rule_regret(nodes, c, 3.0) < 1.03, (c["graph"], c["op"], fit.walk(nodes, c["fp"], c["op"]))
    rule = fit.make_rule(cases, fit.DEFAULT_PARAMS, "sha")
    assert rule["fit"]["in_sample"]["within_10pct"] == 1.0
    # The hand rule misses the many-hub graphs (a third of the cases), by 1.3x or more.
    assert rule["fit"]["hand_rule"]["within_10pct"] == pytest.approx(2 / 3, abs=1e-3)
    assert rule["fit"]["hand_rule"]["geomean_regret"] > 1.05


def test_leave_one_graph_out_generalises_and_beats_the_hand_rule(fit):
    v = fit.validate(synthetic_cases(), fit.DEFAULT_PARAMS)
    assert len(v["per_graph"]) == 18
    assert v["fitted"]["cases"] == v["hand"]["cases"] == 18 * 6
    assert v["fitted"]["within_10pct"] == 1.0
    assert v["fitted"]["geomean_regret"] < v["hand"]["geomean_regret"]
    # The figures are those of the regrets themselves.
    assert fit.summarise([1.0, 1.05, 1.2, 2.0]) == {"cases": 4, "within_10pct": 0.5,
                                                    "geomean_regret": round(math.exp(sum(map(math.log, [1.0, 1.05, 1.2, 2.0])) / 4), 4),
                                                    "worst_regret": 2.0}


def test_a_text_not_measured_in_a_case_passes_to_the_next_then_the_hand_rule(fit):
    # The tuner races only a problem's candidates, and the runtime skips a leaf text that is not one
    # of them. A is measured (and best) in a third of the cases, B in the rest; the hand rule's
    # default C is 1.5x everywhere. The list B > A serves every case with its best.
    hand, a, b = "subwarp:lanes=8", "subwarp:lanes=4", "subwarp:lanes=16"
    cases = []
    for i in range(30):
        times = {hand: 1.5, (a if i % 3 == 0 else b): 1.0}
        cases.append({"graph": f"g{i % 6}", "fp": fingerprint(1000 + i, 40, 0),
                      "op": {"model": 0, "dtype": 0, "heads": 1, "dim": 32, "pass": 0, "variant": 8},
                      "default": hand, "times": times})
    data = fit.Data(cases, 3.0)
    chosen, loss = fit.leaf_schedules(data, list(range(30)), 4)
    assert [data.texts[t] for t in chosen] == [b, a]
    assert loss == pytest.approx(0.0)
    nodes = fit.fit_rule(cases, fit.DEFAULT_PARAMS)
    assert all(fit.rule_regret(nodes, c, 3.0) == 1.0 for c in cases)
    # A case measuring neither gets the hand rule's regret.
    other = dict(cases[1], times={hand: 1.2, "subwarp:lanes=32": 1.0})
    assert fit.rule_regret(nodes, other, 3.0) == pytest.approx(1.2)
    # A measured regret counts at most the cap; a schedule measured only as slow counts the cap.
    assert fit.regret_of(cases[1], a, 3.0) is None
    assert fit.regret_of({"times": {"x": 1.0}, "slow": {"y"}}, "y", 3.0) == 3.0
    assert fit.regret_of({"times": {"x": 1.0, "y": 10.0}}, "y", 3.0) == 3.0


def test_sweeps_with_another_default_are_refused(fit, tmp_path, capsys):
    cases = synthetic_cases()[:6]
    for c in cases:
        c["default"] = EDGE[c["op"]["dim"]]  # not a choice the hand rule makes
    make_database(tmp_path / "s.db", cases)
    assert fit.main(["--db", str(tmp_path / "s.db"), "--write-cases", str(tmp_path / "c.json")]) == 2
    assert "DFGNN_DEFAULT_RULE=hand" in capsys.readouterr().err


def test_fit_is_deterministic_and_small(fit):
    cases = synthetic_cases(seed=7)
    a = fit.dump_rule(fit.make_rule(cases, fit.DEFAULT_PARAMS, "x"))
    b = fit.dump_rule(fit.make_rule(list(cases), fit.DEFAULT_PARAMS, "x"))
    assert a == b
    rule = json.loads(a)
    leaves = [n for n in rule["nodes"] if "leaf" in n]
    assert [n["leaf"] for n in leaves] == list(range(len(leaves)))
    assert all(n["cases"] >= fit.DEFAULT_PARAMS["min_leaf_cases"] for n in leaves)
    assert all(n["graphs"] >= fit.DEFAULT_PARAMS["min_leaf_graphs"] for n in leaves)
    for i, n in enumerate(rule["nodes"]):  # children after their parent, as the runtime requires
        if "feature" in n:
            assert i < n["left"] and i < n["right"]
            assert n["feature"] in fit.FEATURES


def make_database(path, cases, stale=None):
    """A tuning database holding the tables and columns the fitter reads (db/src/schema.cpp)."""
    conn = sqlite3.connect(path)
    conn.executescript("""
      CREATE TABLE fingerprints (id INTEGER PRIMARY KEY, hash TEXT, bucket_key TEXT, text TEXT NOT NULL);
      CREATE TABLE results (id INTEGER PRIMARY KEY, env_class TEXT, template_hash TEXT, library_version TEXT,
        model INTEGER, dtype INTEGER, heads INTEGER, dim INTEGER, direction INTEGER, variant INTEGER,
        fingerprint_id INTEGER);
      CREATE TABLE runs (id INTEGER PRIMARY KEY, uuid TEXT, result_id INTEGER, environment_id INTEGER,
        default_schedule TEXT, host TEXT, unix_time INTEGER, tool_version TEXT);
      CREATE TABLE candidate_stats (run_id INTEGER, schedule TEXT, solver_id INTEGER, count INTEGER,
        mean_ms REAL, m2 REAL, min_ms REAL, median_ms REAL);""")
    fps = {}
    for i, c in enumerate(cases):
        text = json.dumps(c["fp"])
        if text not in fps:
            fps[text] = len(fps) + 1
            conn.execute("INSERT INTO fingerprints VALUES (?, '', '', ?)", (fps[text], text))
        op = c["op"]
        conn.execute("INSERT INTO results VALUES (?, 'NVIDIA H200|sm_90|132', 'h', '0.3.0', ?, ?, ?, ?, ?, ?, ?)",
                     (i + 1, op["model"], op["dtype"], op["heads"], op["dim"], op["pass"], op["variant"], fps[text]))
        conn.execute("INSERT INTO runs VALUES (?, ?, ?, 1, ?, 'h', 2000, 't')", (2 * i + 1, f"u{i}", i + 1, c["default"]))
        for s, m in c["times"].items():
            conn.execute("INSERT INTO candidate_stats VALUES (?, ?, 1, 3, ?, 0, ?, ?)", (2 * i + 1, s, m, m, m))
        if stale is not None:  # an older run of the same problem: its medians are superseded
            conn.execute("INSERT INTO runs VALUES (?, ?, ?, 1, 'subwarp:lanes=4', 'h', 1000, 't')",
                         (2 * i + 2, f"old{i}", i + 1))
            for s in c["times"]:
                conn.execute("INSERT INTO candidate_stats VALUES (?, ?, 1, 3, ?, 0, ?, ?)",
                             (2 * i + 2, s, stale, stale, stale))
    conn.commit()
    conn.close()


def test_databases_to_extract_to_rule(fit, tmp_path):
    cases = synthetic_cases()
    db = tmp_path / "sweep.db"
    make_database(db, cases, stale=0.001)
    out = tmp_path / "cases.json"
    rule_path = tmp_path / "rule.json"
    report = tmp_path / "report"
    assert fit.main(["--db", str(db), "--write-cases", str(out), "--rule", str(rule_path), "--report", str(report)]) == 0
    read, doc = fit.read_cases(out)
    assert doc["sources"] == ["sweep.db"]
    assert len(read) == len(cases)
    by_key = {(c["graph"], c["op"]["dim"], c["op"]["pass"]): c for c in read}
    for c in cases:
        r = by_key[(fit.graph_label(c["fp"]), c["op"]["dim"], c["op"]["pass"])]
        assert r["default"] == c["default"]  # from the latest run, not the stale one
        best = min(c["times"].values())
        for s, m in c["times"].items():  # the latest run's medians, to 4 digits; slow ones by name
            if m <= 3.0 * best or s == c["default"]:
                assert r["times"][s] == pytest.approx(m, rel=1e-3)
            else:
                assert s in r["slow"]
    rule = json.loads(rule_path.read_text())
    assert rule["fit"]["in_sample"]["within_10pct"] == 1.0
    assert len(rule["fit"]["case_leaves"]) == len(cases)
    assert "leave-one-graph-out" in (report.with_suffix(".md")).read_text()
    assert json.loads(report.with_suffix(".json").read_text())["validation"]["fitted"]["within_10pct"] == 1.0
    # --check: the same extract gives the same rule; another rule is reported.
    assert fit.main(["--cases", str(out), "--check", str(rule_path)]) == 0
    rule_path.write_text(rule_path.read_text().replace('"leaf": 0', '"leaf": 9'))
    assert fit.main(["--cases", str(out), "--check", str(rule_path)]) == 1


def test_extracts_of_other_sweeps_pool_into_one(fit, tmp_path, capsys):
    """Sweeps of other op shapes (or GPU classes) pool: several extracts make one, case for case, slow
    schedules kept by name, sources listed; the rule is then fitted from the pooled file."""
    cases = synthetic_cases()
    for c in cases[:4]:  # one schedule per case far past the cap (kept by name only)
        slow = next(t for t in c["times"] if t != c["default"] and c["times"][t] > min(c["times"].values()))
        c["times"][slow] *= 10
    parts = []
    for name, dim in (("a", 128), ("b", 64)):
        db = tmp_path / f"{name}.db"
        make_database(db, [c for c in cases if c["op"]["dim"] == dim])
        parts.append(tmp_path / f"{name}.json")
        assert fit.main(["--db", str(db), "--write-cases", str(parts[-1])]) == 0
    whole = tmp_path / "whole.json"
    make_database(tmp_path / "whole.db", cases)
    assert fit.main(["--db", str(tmp_path / "whole.db"), "--write-cases", str(whole)]) == 0
    pooled, rule = tmp_path / "pooled.json", tmp_path / "rule.json"
    assert fit.main(["--cases", str(parts[0]), str(parts[1]), "--write-cases", str(pooled), "--rule", str(rule)]) == 0
    got, doc = fit.read_cases(pooled)
    want, _ = fit.read_cases(whole)
    assert doc["sources"] == ["a.db", "b.db"]
    key = lambda c: json.dumps(c, sort_keys=True, default=sorted)  # noqa: E731 (slow is a set)
    assert sorted(map(key, got)) == sorted(map(key, want))
    assert any(c["slow"] for c in got)  # slower than the cap: carried by name
    assert fit.main(["--cases", str(pooled), "--check", str(rule)]) == 0
    capsys.readouterr()
    assert fit.main(["--cases", str(parts[0]), str(parts[1])]) == 2
    assert "several --cases need --write-cases" in capsys.readouterr().err
    # one sweep twice would weigh double, and one graph under two names would sit on both sides of the
    # leave-one-graph-out validation: both refused
    assert fit.main(["--cases", str(parts[0]), str(parts[0]), "--write-cases", str(tmp_path / "x.json")]) == 2
    assert "also in an earlier extract" in capsys.readouterr().err
    renamed = json.loads(parts[1].read_text())
    for c in renamed["cases"]:
        c["graph"] = "other-" + c["graph"]
    parts[1].write_text(json.dumps(renamed))
    assert fit.main(["--cases", str(parts[0]), str(parts[1]), "--write-cases", str(tmp_path / "x.json")]) == 2
    assert "named other-" in capsys.readouterr().err


def test_bad_input_is_named(fit, tmp_path, capsys):
    assert fit.main(["--db", str(tmp_path / "missing.db"), "--write-cases", str(tmp_path / "c.json")]) == 2
    assert "missing.db: no such file" in capsys.readouterr().err
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"x" * 4096)
    assert fit.main(["--db", str(junk), "--write-cases", str(tmp_path / "c.json")]) == 2
    assert "not a readable dfgnn tuning database" in capsys.readouterr().err
    assert fit.main(["--cases", str(junk)]) == 2
    assert "cannot read the case extract" in capsys.readouterr().err
    if CASES.exists():
        assert fit.main(["--cases", str(CASES), "--check", str(tmp_path / "none.json")]) == 2
        assert "none.json: No such file or directory" in capsys.readouterr().err


@pytest.mark.skipif(not CASES.exists(), reason=f"{CASES} is not committed yet")
def test_committed_rule_is_generated_from_the_committed_extract(fit):
    assert fit.main(["--cases", str(CASES), "--check", str(RULE)]) == 0


def test_candidate_features_are_their_formulas(fit):
    fp = fingerprint(1000, 900, 3)  # 8000 edges, hub rows [12, 6, 3, 0, ...]
    fp["hist"] = [0.0] * 24
    fp["hist"][3], fp["hist"][6], fp["hist"][9] = 0.9, 0.06, 0.04  # 10% of rows have degree >= 32
    op = {"model": 2, "dtype": 2, "heads": 4, "dim": 64, "pass": 0, "variant": 8}  # bf16: 512 bytes a row
    value = {name: fit.feature_value(name, fp, op) for name in fit.CANDIDATE_FEATURES}
    assert value["log2_max_over_mean"] == pytest.approx(math.log2(901 / 9))
    assert value["log2_p99_over_mean"] == pytest.approx(math.log2(31 / 9))
    assert value["row_share_degree_ge_32"] == pytest.approx(0.10)
    # 6 rows of degree in [64, 128), 3 in [128, 256), 3 at >= 256, each counted at its lower edge
    assert value["hub_edge_share"] == pytest.approx((6 * 64 + 3 * 128 + 3 * 256) / 8000)
    assert value["log2_row_bytes"] == pytest.approx(9.0)
    assert value["log2_edge_bytes"] == pytest.approx(math.log2(8000 * 512))
    assert value["log2_node_bytes"] == pytest.approx(math.log2(1000 * 512))
    assert fit.feature_value("log2_nodes", fp, op) == pytest.approx(math.log2(1000))  # the rule's own too


def test_forced_splits_come_first_and_are_skipped_where_they_do_not_divide(fit):
    cases = synthetic_cases()
    nodes = fit.fit_rule(cases, fit.DEFAULT_PARAMS, fit.VARIANTS["per-pass"])
    assert (nodes[0]["feature"], nodes[0]["threshold"]) == ("pass", 0.5)
    right = nodes[nodes[0]["right"]]
    assert (right["feature"], right["threshold"]) == ("pass", 1.5)
    left = nodes[nodes[0]["left"]]  # forward only: pass <= 1.5 does not divide it
    assert left.get("feature") != "pass"
    for c in cases:  # below the forced splits, each pass's tree still finds the known answer
        assert fit.rule_regret(nodes, c, 3.0) < 1.03
    forward = [c for c in cases if c["op"]["pass"] == 0]
    assert fit.fit_rule(forward, fit.DEFAULT_PARAMS, fit.VARIANTS["per-pass"]) == fit.fit_rule(forward, fit.DEFAULT_PARAMS)


def test_band_cost_prefers_more_cases_within_10_percent(fit):
    # A is best in 6 rows and 1.5x in 4 (where C is best); B is 1.12x everywhere; the hand rule 2x.
    # The geomean prefers B (no case within 10%), the band cost A (6 within 10%).
    hand, a, b, c_ = "subwarp:lanes=4", "subwarp:lanes=8", "subwarp:lanes=16", "subwarp:lanes=32"
    cases = []
    for i in range(10):
        times = {hand: 2.0, b: 1.12, a: 1.0 if i < 6 else 1.5}
        if i >= 6:
            times[c_] = 1.0
        cases.append({"graph": f"g{i % 5}", "fp": fingerprint(1000 + i, 40, 0),
                      "op": {"model": 0, "dtype": 0, "heads": 1, "dim": 32, "pass": 0, "variant": 8},
                      "default": hand, "times": times})
    rows = list(range(10))
    for variant, expected in ((fit.DEFAULT_VARIANT, b), (fit.VARIANTS["band-cost"], a)):
        data = fit.Data(cases, 3.0, variant)
        chosen, _ = fit.leaf_schedules(data, rows, 1)
        assert [data.texts[t] for t in chosen] == [expected]
    # The leaf's recorded geomean is the regret's, whatever the cost.
    data = fit.Data(cases, 3.0, fit.VARIANTS["band-cost"])
    assert fit.served_log_regret(data, rows, [data.texts.index(a)]) == pytest.approx(4 * math.log(1.5))


def test_variants_are_compared_by_the_same_validation(fit, tmp_path, capsys):
    cases = synthetic_cases()
    result = fit.compare_variants(cases, fit.DEFAULT_PARAMS, ["base", "per-pass"])
    assert result["base"]["leave_one_graph_out"] == fit.validate(cases, fit.DEFAULT_PARAMS)["fitted"]
    assert result["base"]["in_sample"]["within_10pct"] == 1.0
    table = fit.variants_markdown(result, ["base", "per-pass"])
    assert "| base | base | log | - | 100.0% |" in table
    assert "| per-pass | base | log | pass <= 0.5, pass <= 1.5 |" in table
    # Nested: each left-out graph's variant is chosen on the others. With 12 graphs, 24 cases a pass
    # are too few for per-pass trees to split (12 cases a leaf), so base is chosen everywhere and
    # the nested figure is its own leave-one-graph-out.
    few = [c for c in cases if c["graph"][-1] in "0123"]
    nested = fit.compare_variants(few, fit.DEFAULT_PARAMS, ["per-pass", "base"], nested=True)
    assert nested["per-pass"]["leave_one_graph_out"]["within_10pct"] < 0.9
    assert nested["nested"]["picks"] == {g: "base" for g in {c["graph"] for c in few}}
    assert nested["nested"]["leave_one_graph_out"] == nested["base"]["leave_one_graph_out"] == fit.summarise([1.0] * 72)


def test_carry_over_scores_one_shapes_winner_in_anothers_cases(fit):
    """A GAT copy of the synthetic Transformer cases, with the same winners, carries over at regret
    1 (a winner of the other model is measured there); the other (H, D) shape's winner is not
    measured in these cases (its texts differ), so that pair has no rows."""
    cases = synthetic_cases()
    gat = [dict(c, op=dict(c["op"], model=0)) for c in cases]
    rows = {(a, b): (n, gm, w) for a, b, n, gm, w in fit.carry_over(cases + gat, 3.0)}
    n, gm, within = rows[("gat H1 D128 fp32", "transformer H1 D128 fp32")]
    assert n == 18 * 3 and gm == pytest.approx(1.0) and within == 1.0
    assert ("gat H1 D128 fp32", "gat H4 D64 fp32") not in rows
    assert fit.shape_label({"model": 3, "heads": 8, "dim": 7, "dtype": 2}) == "agnn H8 D7 bf16"
