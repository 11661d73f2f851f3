"""CPU checks of bench/tuning_acceptance.py and bench/tune_twice_summary.py (issue 14's acceptance
benchmark): the leave-one-graph-out database surgery, the statistics, the interleaving and the
argument parsing. The timing itself needs the H200 (the lead runs it); --cpu-smoke runs the whole
script here on dfgnn.torch's float64 reference path."""

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

import dfgnn
from conftest import HAS_TORCH, REPO, load_bench

SOLVER_IDS = {"subwarp": 1, "block_row": 2, "hub_split": 3, "hybrid": 4, "edge_balanced": 5}
PASSES = ("forward", "backward_row", "backward_col")


acc = load_bench("tuning_acceptance")
twice = load_bench("tune_twice_summary")


def fingerprint_hash(text):
    xxhash = pytest.importorskip("xxhash", reason="xxhash (the database's fingerprint hash) is not installed")
    return xxhash.xxh64(text.encode()).hexdigest()


def empty_tuning_db(path):
    """An empty database of the library's schema: the shipped database's tables, indexes and schema
    pragmas, without rows. (The library creates a user database at its first write, a tuning result or
    a compiled module, and neither happens without a GPU.)"""
    shipped = sqlite3.connect(f"file:{REPO / 'data' / 'tuning' / 'sm90.db'}?mode=ro", uri=True)
    try:
        ddl = [sql for (sql,) in shipped.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND "
                                                 "name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        pragmas = {p: shipped.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "application_id")}
    finally:
        shipped.close()
    assert ddl and pragmas["user_version"] > 0, "the shipped database has no schema"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")  # as the library makes a user database
        for sql in ddl:
            conn.execute(sql)
        for p, v in pragmas.items():
            conn.execute(f"PRAGMA {p} = {int(v)}")
        conn.commit()
    finally:
        conn.close()
    return path


def make_site_db(path, graphs, op, medians=None):
    """A small, valid tuning database: the library's schema (empty_tuning_db), rows written by SQL as
    dfgnn-tune would store them: for each graph and pass, one run with three real candidate schedules,
    the winner the lowest median. medians(graph_index, pass, k) gives candidate k's median (default:
    1 + k/10, so candidate 0 wins)."""
    medians = medians or (lambda gi, p, k: 1.0 + k / 10)
    empty_tuning_db(path)
    ctx = dfgnn.Context()
    dfgnn.set_database(user=path, sites=[], context=ctx)
    variant = 16 // {"float32": 4, "float16": 2, "bfloat16": 2}[str(op.dtype).split(".")[-1].lower()]
    conn = sqlite3.connect(path)
    env = ("NVIDIA H200|sm_90|132", "t" * 16, dfgnn.library_version())
    with conn:
        conn.execute("INSERT INTO environments (id, env_class, gpu_name, compute_capability, sm_count, driver_version, "
                     "nvrtc_version, library_version, template_hash) VALUES (1, ?, 'NVIDIA H200', 90, 132, 12080, "
                     "12080, ?, ?)", (env[0], env[2], env[1]))
        cols = {row[1] for row in conn.execute("PRAGMA table_info(results)")}
        key_bits = "key_bits" if "key_bits" in cols else "variant"
        for gi, g in enumerate(graphs):
            text = g.fingerprint_json
            fid = conn.execute("INSERT INTO fingerprints (hash, bucket_key, text) VALUES (?, ?, ?)",
                               (fingerprint_hash(text), g.bucket_key, text)).lastrowid
            for pi, pass_ in enumerate(PASSES):
                cands = dfgnn.ops.list_schedules(g, op, pass_, context=ctx)[:3]
                times = [medians(gi, pi, k) for k in range(len(cands))]
                order = sorted(range(len(cands)), key=lambda k: (times[k], cands[k]))
                win, second = cands[order[0]], cands[order[1]]
                default = dfgnn.ops.schedule(g, op, "forward" if pi == 0 else "backward", context=ctx).split("|")[
                    0 if pi < 2 else 1]
                rid = conn.execute(
                    "INSERT INTO results (env_class, template_hash, library_version, model, dtype, heads, dim, "
                    f"direction, {key_bits}, fingerprint_id, solver_id, schedule, count, median_ms, mean_ms, variance, "
                    "min_ms, default_schedule, default_median_ms, runner_up_schedule, runner_up_median_ms, runs, host, "
                    "unix_time, tool_version, environment_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 5, ?, ?, "
                    "0.0001, ?, ?, NULL, ?, ?, 1, 'h', 0, 'test', 1)",
                    (env[0], env[1], env[2], int(op.model), int(op.dtype), op.heads, op.dim, pi, variant, fid,
                     SOLVER_IDS[win.split(":")[0]], win, times[order[0]], times[order[0]], times[order[0]], default,
                     second, times[order[1]])).lastrowid
                run = conn.execute("INSERT INTO runs (uuid, result_id, environment_id, default_schedule, host, "
                                   "unix_time, tool_version) VALUES (?, ?, 1, ?, 'h', 0, 'test')",
                                   (f"run-{gi}-{pi}", rid, default)).lastrowid
                for k, c in enumerate(cands):
                    conn.execute("INSERT INTO candidate_stats VALUES (?, ?, ?, 5, ?, ?, ?, ?)",
                                 (run, c, SOLVER_IDS[c.split(":")[0]], times[k], 4 * (0.01 * times[k]) ** 2,
                                  0.98 * times[k], times[k]))
    conn.close()
    return path


def counts(path):
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("fingerprints", "results", "runs", "candidate_stats", "environments")}
    finally:
        conn.close()


def dfgnn_db():
    exe = shutil.which("dfgnn-db", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return exe


@pytest.fixture
def graphs(cora_path):
    return [dfgnn.Graph.from_file(cora_path), dfgnn.Graph.rmat(9, 3000, seed=1, permute=True),
            dfgnn.Graph.planted_hubs(400, 4, 2, 150, seed=3)]


@pytest.fixture
def op():
    return dfgnn.op("gat", "float32", 1, 8)


# ---------------------------------------------------------------- database surgery

def test_leave_out_copy_removes_only_that_graph(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    before = counts(site)
    assert before == {"fingerprints": 3, "results": 9, "runs": 9, "candidate_stats": 27, "environments": 1}
    out = tmp_path / "without.db"
    removed = acc.leave_out_copy(site, out, graphs[1].fingerprint_json)
    assert removed == {"candidate_stats": 9, "runs": 3, "results": 3, "fingerprints": 1}
    after = counts(out)
    assert after == {"fingerprints": 2, "results": 6, "runs": 6, "candidate_stats": 18, "environments": 1}
    assert counts(site) == before  # the original is untouched
    conn = sqlite3.connect(out)
    texts = [t for (t,) in conn.execute("SELECT text FROM fingerprints")]
    conn.close()
    assert graphs[1].fingerprint_json not in texts
    assert {graphs[0].fingerprint_json, graphs[2].fingerprint_json} == set(texts)


def test_leave_out_copy_is_a_valid_database_for_the_library(tmp_path, graphs, op):
    exe = dfgnn_db()
    if exe is None:
        pytest.skip("dfgnn-db is not installed beside this Python")
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    ok = subprocess.run([exe, "--db", site, "verify"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the fixture itself is a clean database
    out = tmp_path / "without.db"
    acc.leave_out_copy(site, out, graphs[0].fingerprint_json)
    verify = subprocess.run([exe, "--db", str(out), "verify"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    stats = subprocess.run([exe, "--db", str(out), "stats"], capture_output=True, text=True, check=True).stdout
    assert any(line.split()[:2] == ["results", "6"] for line in stats.splitlines()), stats
    assert any(line.split()[:2] == ["fingerprints", "2"] for line in stats.splitlines()), stats


def test_leave_out_of_an_untuned_graph_removes_nothing(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs[:2], op)
    other = dfgnn.Graph.rmat(8, 1000, seed=7)
    assert acc.leave_out_copy(site, tmp_path / "w.db", other.fingerprint_json) == {
        "candidate_stats": 0, "runs": 0, "results": 0, "fingerprints": 0}
    assert counts(tmp_path / "w.db") == counts(site)


def test_matching_accepts_equal_values_in_another_spelling(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    conn = sqlite3.connect(site)
    respelled = json.dumps(json.loads(graphs[2].fingerprint_json), indent=2)
    assert respelled != graphs[2].fingerprint_json
    with conn:
        conn.execute("UPDATE fingerprints SET text = ? WHERE text = ?", (respelled, graphs[2].fingerprint_json))
    assert len(acc.matching_fingerprint_ids(conn, graphs[2].fingerprint_json)) == 1
    assert acc.matching_fingerprint_ids(conn, dfgnn.Graph.rmat(8, 999, seed=5).fingerprint_json) == []
    conn.close()


def test_graph_fingerprints_include_the_column_pass_of_a_directed_graph(cora_path):
    import numpy as np
    sym = dfgnn.Graph.from_file(cora_path)  # symmetrized: in- and out-degrees agree
    assert acc.graph_fingerprints(sym) == [sym.fingerprint_json]
    # a star: every node sends to node 0, so in-degrees are (n-1, 0, ...) and out-degrees (0, 1, 1, ...)
    n = 50
    star = dfgnn.Graph(np.stack([np.arange(1, n), np.zeros(n - 1, dtype=np.int64)]), num_nodes=n)
    texts = acc.graph_fingerprints(star)
    assert len(texts) == 2 and star.fingerprint_json in texts
    out = json.loads(next(t for t in texts if t != star.fingerprint_json))
    assert out["max_degree"] == 1 and out["num_edges"] == n - 1 and star.fingerprint["max_degree"] == n - 1


def test_leave_out_copy_removes_every_fingerprint_given(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    removed = acc.leave_out_copy(site, tmp_path / "w.db", [graphs[0].fingerprint_json, graphs[2].fingerprint_json])
    assert removed["fingerprints"] == 2 and removed["results"] == 6
    assert counts(tmp_path / "w.db")["results"] == 3


def test_copy_folds_in_the_write_ahead_log(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    holder = sqlite3.connect(site)  # keeps the WAL from being checkpointed away at close
    holder.execute("PRAGMA wal_autocheckpoint=0")
    with holder:
        holder.execute("DELETE FROM candidate_stats WHERE run_id = 1")
    assert os.path.getsize(site + "-wal") > 0
    acc.copy_database(site, tmp_path / "copy.db")
    holder.close()
    assert counts(tmp_path / "copy.db")["candidate_stats"] == 24


# ---------------------------------------------------------------- statistics

def passes(*levels, schedule="s"):
    return [{"pass": f"p{i}", "level": "cache", "origin": lv, "schedule": schedule} for i, lv in enumerate(levels)]


def record(graph, default, tuned, nearest, *, skewed=False, tuned_by=("exact",), nearest_by=("nearest",),
           config="gat:H1:D8:float32", direction="forward"):
    ch = {"default": {"median_ms": default, "passes": passes(*["default"] * len(tuned_by))},
          "tuned": {"median_ms": tuned, "passes": passes(*tuned_by)},
          "nearest": {"median_ms": nearest, "passes": passes(*nearest_by)}}
    return acc.case_ratios({"graph": graph, "config": config, "direction": direction, "skewed": skewed,
                            "choices": ch})


def test_summary_figures_on_synthetic_records():
    cases = [
        record("a", 1.00, 0.50, 0.52, skewed=True),                      # tuned 2x faster, nearest at 96%
        record("b", 1.00, 1.05, 1.05),                                   # tuned 5% slower: a violation
        record("c", 1.00, 0.98, 1.30, nearest_by=("default",)),          # no neighbour
        record("d", 2.00, 1.00, 1.20, skewed=True),                      # nearest at 83% of tuned speed
        record("e", 1.00, 0.90, 0.90, tuned_by=("nearest",)),            # tuned not exact: left out
        {"graph": "f", "config": "x", "direction": "forward", "skipped": "time budget", "choices": {}},
    ]
    s = acc.summarize(cases)
    g = s["goals"]
    assert (s["cases"], s["measured"], s["tuned_exact"], s["skipped"]) == (6, 5, 4, 1)
    assert s["tuned_not_exact"] == ["e gat:H1:D8:float32 forward"]
    assert g["tuned_slower"]["value"] == pytest.approx(1 / 4) and g["tuned_slower"]["met"] is False
    assert s["slower_cases"] == [["b gat:H1:D8:float32 forward", pytest.approx(1.05)]]
    assert g["skewed_geomean"]["value"] == pytest.approx(0.5) and g["skewed_geomean"]["met"] is True
    # default/tuned: 2.0, 0.952, 1.020, 2.0 -> within 10% in 2 of 4
    assert g["default_within"]["value"] == pytest.approx(0.5) and g["default_within"]["met"] is False
    # neighbour answers per (graph, config, pass), all measured cases: a, b, d, e yes; c no
    assert g["neighbour_answers"]["value"] == pytest.approx(4 / 5)
    # neighbour-answered valid cases a, b, d: speeds 0.96, 1.0, 0.83 -> 2 of 3 reach 90%
    assert g["nearest_speed"]["value"] == pytest.approx(2 / 3)
    assert s["nearest_speed_all_cases"] == pytest.approx(2 / 4)
    assert s["geomean_tuned_over_default_all"] == pytest.approx((0.5 * 1.05 * 0.98 * 0.5) ** 0.25)
    assert s["worst_tuned_over_default"] == pytest.approx(1.05)


def test_summary_goals_met():
    cases = [record(str(i), 1.0, 0.8, 0.82, skewed=True) for i in range(5)]
    s = acc.summarize(cases)
    per_pass = ("default_within_per_pass", "default_worst_pass")
    assert all(g["met"] for name, g in s["goals"].items() if name not in ("default_within",) + per_pass)
    assert all(s["goals"][n]["met"] is None for n in per_pass)  # no kernel times: no per-pass verdicts
    assert s["goals"]["default_within"]["met"] is False  # default/tuned = 1.25 everywhere


def test_default_answered_by_a_database_row_is_left_out():
    ok = record("a", 1.0, 0.9, 0.9)
    shipped = record("b", 1.0, 2.0, 0.9)  # e.g. a site database the process added answered 'default'
    shipped["choices"]["default"]["passes"] = passes("exact")
    s = acc.summarize([ok, shipped])
    assert s["tuned_exact"] == 1 and s["tuned_not_exact"] == ["b gat:H1:D8:float32 forward"]
    assert s["goals"]["tuned_slower"]["value"] == 0


def test_default_answered_by_a_shipped_row_counts_and_a_site_row_does_not():
    shipped = record("a", 1.0, 0.9, 0.9)
    shipped["choices"]["default"]["passes"] = [{**p, "layer": "shipped"} for p in passes("nearest")]
    site = record("b", 1.0, 0.9, 0.9)
    site["choices"]["default"]["passes"] = [{**p, "layer": "site"} for p in passes("exact")]
    tuned_from_shipped = record("c", 1.0, 0.9, 0.9)
    tuned_from_shipped["choices"]["tuned"]["passes"] = [{**p, "layer": "shipped"} for p in passes("exact")]
    rule_from_row = record("d", 1.0, 0.9, 0.9)
    rule_from_row["choices"]["rule"] = {"median_ms": 1.0, "passes": [{**p, "layer": "shipped"} for p in passes("exact")]}
    assert [acc.comparable(c) for c in (shipped, site, tuned_from_shipped, rule_from_row)] == [True, False, False, False]


def gpu_record(graph, config, direction, kernels):
    """A case with kernel times: kernels = {choice: {pass: us}}; every pass answered by the rule
    (default, rule) or an exact site row (tuned)."""
    ch = {n: {"median_ms": 1.0, "kernel_us": k, "kernel_total_us": sum(k.values()),
              "passes": passes("exact" if n == "tuned" else "default")} for n, k in kernels.items()}
    return acc.case_ratios({"graph": graph, "config": config, "direction": direction, "skewed": False, "choices": ch})


def test_gpu_clock_ratios_and_per_pass_goals():
    f = gpu_record("g", "gat", "forward", {"default": {"forward": 11.0}, "tuned": {"forward": 10.0},
                                           "rule": {"forward": 20.0}})
    assert f["clock"] == "gpu" and f["ratios"]["default_over_tuned"] == pytest.approx(1.1)
    assert f["host_ratios"]["default_over_tuned"] == pytest.approx(1.0)  # the events' times, beside
    assert f["pass_ratios"] == {"forward": {"default_over_tuned": pytest.approx(1.1),
                                            "rule_over_tuned": pytest.approx(2.0)}}
    # forward+backward: its forward pass is not counted again; the backward passes are
    fb = gpu_record("g", "gat", "forward+backward",
                    {"default": {"forward": 30.0, "backward_row": 13.0, "backward_col": 10.0},
                     "tuned": {"forward": 10.0, "backward_row": 10.0, "backward_col": 10.0},
                     "rule": {"forward": 10.0, "backward_row": 10.0, "backward_col": 10.0}})
    s = acc.summarize([f, fb])
    g = s["goals"]
    assert s["clock"] == ["gpu"]
    assert g["default_within_per_pass"]["value"] == pytest.approx(2 / 3)  # 1.1, 1.3, 1.0
    assert g["default_worst_pass"]["value"] == pytest.approx(1.3) and g["default_worst_pass"]["met"] is False
    assert s["worst_passes"] == [["g gat backward_row", pytest.approx(1.3)]]
    assert s["rule_within_per_pass"] == pytest.approx(2 / 3)
    # one choice without kernel times: the whole case falls back to the host clock
    host = gpu_record("h", "gat", "forward", {"default": {"forward": 11.0}, "tuned": {"forward": 10.0}})
    del host["choices"]["default"]["kernel_us"]
    assert acc.case_ratios(host)["clock"] == "host" and "pass_ratios" not in host


def test_split_blocks_counts_dfgnn_kernels_between_fences():
    k = [("spin_kernel", 0, 1), ("dfgnn_Forward_x", 1, 4.0), ("elementwise", 2, 9.0), ("spin_kernel", 3, 1),
         ("dfgnn_Forward_x", 4, 100.0),  # a warm-up between blocks: not counted
         ("spin_kernel", 5, 1), ("dfgnn_BackwardRow_y", 6, 6.0), ("dfgnn_reduce_nodes_stage2", 7, 2.0),
         ("dfgnn_BackwardCol_z", 8, 4.0), ("spin_kernel", 9, 1)]
    assert acc.split_blocks(list(reversed(k)), 2, 2) == [{"forward": 2.0}, {"backward_row": 4.0, "backward_col": 2.0}]
    with pytest.raises(RuntimeError, match="marker kernels"):
        acc.split_blocks(k[:-1], 2, 2)
    summary = acc.kernel_summary([{"forward": 1.0}, {"forward": 3.0, "backward_row": 1.0}, {"forward": 2.0}])
    assert summary == {"kernel_us": {"backward_row": 0.0, "forward": 2.0}, "kernel_total_us": 2.0}
    assert acc.block_order(["a", "b"], 2) == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]


def test_graph_names(tmp_path):
    assert acc.graph_name("cora") == "cora" and acc.graph_name("rmat-20") == "rmat-20"
    assert acc.graph_name(str(tmp_path / "x" / "pubmed")) == "pubmed"


def test_neighbour_share_counts_each_pass_once_over_directions():
    fwd = record("g", 1, 1, 1, nearest_by=("nearest",))
    both = record("g", 1, 1, 1, nearest_by=("nearest", "default", "default"), tuned_by=("exact",) * 3,
                  direction="forward+backward")
    both["choices"]["nearest"]["passes"] = [{"pass": "p0", "origin": "nearest"}, {"pass": "p1", "origin": "default"},
                                            {"pass": "p2", "origin": "default"}]
    s = acc.summarize([fwd, both])
    assert s["goals"]["neighbour_answers"]["value"] == pytest.approx(1 / 3)
    assert s["graphs_all_passes_from_neighbour"] == 0 and s["graphs_any_pass_from_neighbour"] == 1


def test_empty_summary_has_no_verdicts():
    s = acc.summarize([{"graph": "a", "config": "c", "direction": "forward", "skipped": "x", "choices": {}}])
    assert all(g["value"] is None and g["met"] is None for g in s["goals"].values())


def test_hand_ratios_use_the_child_tuned_time():
    c = record("a", 1.2, 1.0, 1.0)
    c["choices"]["hand"] = {"median_ms": 3.0, "tuned_median_ms": 1.5, "schedules": ["x"]}
    c["choices"]["default"]["schedules"] = ["y"]
    acc.case_ratios(c)
    assert c["ratios"]["hand_over_tuned"] == pytest.approx(2.0)
    h = acc.summarize([c])["hand"]
    assert h["geomean_default_over_hand"] == pytest.approx(1.2 / 2.0)
    assert h["within_share"] == 0 and h["schedules_differ"] == 1
    # with the rule alone timed, hand is judged against it (the child runs hand without the shipped layer)
    c["choices"]["rule"] = {"median_ms": 1.5, "passes": passes("default"), "schedules": ["x"]}
    acc.case_ratios(c)
    h = acc.summarize([c])["hand"]
    assert h["geomean_default_over_hand"] == pytest.approx(1.5 / 2.0) and h["schedules_differ"] == 0


def test_merge_hand():
    cases = [record("a", 1.0, 1.0, 1.0), record("b", 1.0, 1.0, 1.0)]
    child = [{"graph": "a", "config": "gat:H1:D8:float32", "direction": "forward",
              "choices": {"hand": {"median_ms": 1.5}, "tuned": {"median_ms": 1.0}}}]
    acc.merge_hand(cases, child)
    assert cases[0]["ratios"]["hand_over_tuned"] == pytest.approx(1.5)
    assert "hand" not in cases[1]["choices"]


def test_small_statistics():
    assert acc.geomean([2, 8, None, 0]) == pytest.approx(4)
    assert acc.geomean([]) is None
    assert acc.quantile([1, 2, 3, 4], 0.5) == pytest.approx(2.5)
    s = acc.sample_summary([5, 1, 3, 2, 4])
    assert (s["median_ms"], s["p25_ms"], s["p75_ms"], s["min_ms"], s["count"]) == (3, 2, 4, 1, 5)
    fp = {"max_degree": 300, "mean_degree": 10.0}
    assert acc.skew_of(fp) == 30 and acc.is_skewed(fp, 20, 256)
    assert not acc.is_skewed(fp, 40, 256) and not acc.is_skewed(fp, 20, 512)
    assert acc.skew_of({"max_degree": 0, "mean_degree": 0.0}) == 0


# ---------------------------------------------------------------- interleaving and planning

def test_rotation():
    assert [acc.rotation("abc", r) for r in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]


def test_interleave_order_switches_and_stability():
    log = []
    answers = {"a": ["x"], "b": ["y"]}
    calls = {"n": 0}

    def check(choice):
        if choice == "b" and calls["n"] > 3:  # b's answer changes in the last round
            return [{"schedule": "z"}]
        return [{"schedule": s} for s in answers[choice]]

    def call():
        calls["n"] += 1

    out = acc.interleave(["a", "b"], 3, 2, 1, lambda c: log.append(c), call, lambda n: [float(len(log))] * n, check)
    assert log == ["a", "b", "b", "a", "a", "b"]
    assert out["a"]["samples"] == [1.0, 1.0, 4.0, 4.0, 5.0, 5.0] and out["a"]["stable"]
    assert out["b"]["passes"] == [{"schedule": "y"}] and not out["b"]["stable"]
    assert [c["round"] for c in out["b"]["changes"]] == [2]
    assert calls["n"] == 6  # warm-up calls only (timing is time_calls's job)
    fences = []
    acc.interleave(["a", "b"], 2, 1, 0, lambda c: fences.append(c), call,
                   lambda n: fences.append("t") or [0.0] * n, check, mark=lambda: fences.append("|"))
    assert fences == ["a", "|", "t", "|", "b", "|", "t", "|", "b", "|", "t", "|", "a", "|", "t", "|"]


def test_plan_calls():
    assert acc.plan_calls(None, None, 3, 4, 40) == 10
    assert acc.plan_calls(0.01, 100, 3, 4, 40) == 10        # fits easily
    assert acc.plan_calls(100.0, 6, 3, 4, 40) == 3          # 6 s / (1.5 * 0.1 s * 12) = 3.3 -> 3
    assert acc.plan_calls(1000.0, 1, 3, 4, 40) == 2         # never below the minimum


def test_precompile_fills_the_module_cache(cora_path):
    ctx = dfgnn.default_context()
    dfgnn.set_database(user="", sites=[])
    g = dfgnn.Graph.from_file(cora_path)
    switched = []
    before = dfgnn.ops.cache_counters()["compiles"]
    n, _ = acc.precompile(g, [acc.parse_config("agnn:H1:D8:float16")], ["forward", "forward+backward"],
                          ["default", "tuned"], switched.append, 90)
    assert switched == ["default", "tuned"]
    assert n == 2  # the forward's and the backward's schedules (both choices answer alike here)
    compiled = dfgnn.ops.cache_counters()["compiles"]
    assert compiled > before
    acc.precompile(g, [acc.parse_config("agnn:H1:D8:float16")], ["forward+backward"], ["default"], switched.append, 90)
    assert dfgnn.ops.cache_counters()["compiles"] == compiled  # nothing new: served from the cache
    dfgnn.set_database(context=ctx)


# ---------------------------------------------------------------- arguments

def test_parse_config():
    c = acc.parse_config(" transformer:H4:D64:bfloat16 ")
    assert c == acc.Config("transformer", 4, 64, "bfloat16") and c.label == "transformer:H4:D64:bfloat16"
    assert acc.parse_config("gat:D128:H1").dtype == "float32"
    assert acc.parse_config("gatv2:h1:d32:bf16").dtype == "bfloat16"
    for bad in ("gcn:H1:D8", "gat:H1", "gat:H0:D8", "gat:H1:D8:int8", ""):
        with pytest.raises(ValueError):
            acc.parse_config(bad)


def test_module_cache_must_hold_no_results(tmp_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    args = ["--db", site, "--graphs", "cora", "--configs", "gat:H1:D8", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):
        acc.parse_args(args + ["--module-cache", site])
    assert acc.tuning_rows(site) == 9 and acc.tuning_rows(tmp_path / "none.db") == 0
    empty = str(tmp_path / "cache.db")
    make_site_db(empty, graphs[:1], op)
    acc.leave_out_copy(empty, tmp_path / "cache2.db", graphs[0].fingerprint_json)
    assert acc.parse_args(args + ["--module-cache", str(tmp_path / "cache2.db")]).module_cache == tmp_path / "cache2.db"


def test_parse_args(tmp_path):
    db = tmp_path / "s.db"
    db.write_bytes(b"")
    a = acc.parse_args(["--db", str(db), "--graphs", "cora, pubmed", "--out", str(tmp_path / "o"),
                        "--configs", "transformer:H1:D128:float32, gat:H1:D128:float32", "--iters", "12"])
    assert a.graph_list == ["cora", "pubmed"] and [c.label for c in a.config_list] == [
        "transformer:H1:D128:float32", "gat:H1:D128:float32"]
    assert a.direction_list == ["forward", "forward+backward"] and a.choice_list == ["default", "tuned", "nearest",
                                                                                    "rule"]
    assert a.iters == 12 and a.rounds == 5 and a.budget_s == 300.0 and not a.hand
    assert a.module_cache == tmp_path / "o" / "work" / "modules.db"
    base = ["--db", str(db), "--graphs", "cora", "--configs", "gat:H1:D8", "--out", str(tmp_path)]
    for extra in (["--iters", "2"], ["--directions", "backward"], ["--budget-s", "0"], ["--graphs", "cora,cora"],
                  ["--configs", "gat:H1"], ["--db", str(tmp_path / "missing.db")], ["--choices", "best"]):
        with pytest.raises(SystemExit):
            acc.parse_args(base + extra)


# ---------------------------------------------------------------- the whole script on the CPU

@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (the script calls dfgnn.torch)")
def test_cpu_smoke_run(tmp_path, cora_path, graphs, op):
    site = make_site_db(str(tmp_path / "site.db"), graphs, op)
    out = tmp_path / "out"
    env = {**os.environ, "DFGNN_LOG_LEVEL": "error"}
    run = subprocess.run([sys.executable, str(REPO / "bench" / "tuning_acceptance.py"), "--cpu-smoke", "--db", site,
                          "--graphs", f"{cora_path},rmat-9-3000,nope-graph", "--configs", "gat:H1:D8:float32",
                          "--out", str(out), "--iters", "4", "--rounds", "2", "--warmup", "1", "--budget-s", "150",
                          "--hand", "--hand-share", "0.4"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "acceptance.json").read_text())
    cases = report["cases"]
    assert len(cases) == 6 and {c["graph"] for c in cases} == {"cora", "rmat-9-3000", "nope-graph"}
    measured = [c for c in cases if c.get("ratios")]
    assert len(measured) == 4
    assert all(c.get("skipped", "").startswith("graph not loaded") for c in cases if c["graph"] == "nope-graph")
    hand_differs = []
    for c in measured:
        assert set(c["choices"]) == {"default", "tuned", "nearest", "rule", "hand"}
        hand = c["choices"].pop("hand")  # from the child process, which timed hand beside its own tuned
        hand_differs.append(hand["schedules"] != c["choices"]["rule"]["schedules"])
        assert c["clock"] == "host"  # no GPU: no kernel times
        assert hand["count"] == 4 and hand["tuned_median_ms"] > 0 and hand["process"].startswith("child")
        assert c["ratios"]["hand_over_tuned"] == pytest.approx(hand["median_ms"] / hand["tuned_median_ms"])
        for ch in c["choices"].values():
            assert ch["count"] == 4 and ch["median_ms"] > 0 and ch["stable"]
            # without a GPU dispatch never reads the database: every answer is the default rule's
            assert ch["origins"] and set(ch["origins"]) == {"default"}
            assert len(ch["schedules"]) == (1 if c["direction"] == "forward" else 3)
        assert c["ratios"]["tuned_over_default"] == pytest.approx(
            c["choices"]["tuned"]["median_ms"] / c["choices"]["default"]["median_ms"])
    rmat = next(c for c in measured if c["graph"] == "rmat-9-3000")
    assert rmat["left_out_rows"]["results"] == 3  # it is in the fixture database
    assert report["summary"]["tuned_exact"] == 0  # no GPU, no exact hits: the tuned figures stay empty
    # the child reads DFGNN_DEFAULT_RULE=hand: where the fitted rule answers (GAT D = 8 takes a leaf's
    # edge-balanced schedule on these graphs) the hand rule's schedules differ, and no note doubts it
    assert any(hand_differs)
    assert not any("changed no schedule" in n for n in report["notes"])
    assert (out / "hand" / "acceptance.json").exists()
    md = (out / "acceptance.md").read_text()
    assert "| graph | skew | config |" in md and "nope-graph" in md
    assert not list((out / "work").glob("without-*.db"))  # leave-one-out copies are removed


# ---------------------------------------------------------------- tune-twice summary

def test_tune_twice_same_and_noise(tmp_path, graphs, op):
    # Candidate 0 wins everywhere in both runs but on two forward passes. Graph 1: A has candidate 0
    # ahead of 1 by 0.5%, B has 1 ahead of 0 by 0.5%: a tie in both runs (within noise). Graph 2: B's
    # winner is candidate 2, which run A measured 20% slower than its own winner (differ).
    def medians_a(gi, pi, k):
        return [1.0, 1.005, 1.2][k] if (gi, pi) == (1, 0) else 1.0 + k / 10

    def medians_b(gi, pi, k):
        if (gi, pi) == (1, 0):
            return [1.0, 0.995, 1.2][k]
        if (gi, pi) == (2, 0):
            return [1.0, 1.1, 0.7][k]
        return 1.0 + k / 10

    a = make_site_db(str(tmp_path / "a.db"), graphs, op, medians_a)
    b = make_site_db(str(tmp_path / "b.db"), graphs, op, medians_b)
    rows = twice.compare(twice.read_winners(a), twice.read_winners(b))
    assert len(rows) == 9
    verdict = {(r["fingerprint"]["num_nodes"], r["pass"]): r for r in rows}
    n = [g.num_nodes for g in graphs]
    assert verdict[(n[0], "forward")]["verdict"] == "same"
    tie = verdict[(n[1], "forward")]
    assert tie["verdict"] == "within noise"
    assert tie["slowdown_in_a"] == pytest.approx(1.005) and tie["slowdown_in_b"] == pytest.approx(1 / 0.995)
    # fixture spread: relative sd 1% over 5 samples each -> band 2% + 1.2533 * sqrt(2 * 0.01^2 / 5)
    assert tie["band_in_a"] == pytest.approx(0.02 + 1.2533 * math.sqrt(2 * 0.01 ** 2 / 5))
    clear = verdict[(n[2], "forward")]
    assert clear["verdict"] == "differ" and clear["slowdown_in_a"] == pytest.approx(1.2)
    assert sum(1 for r in rows if r["verdict"] == "same") == 7


def test_tune_twice_script_output(tmp_path, graphs, op):
    a = make_site_db(str(tmp_path / "a.db"), graphs, op)
    report = tmp_path / "a.json"
    report.write_text(json.dumps({"problems": [{"graph": "cora", "fingerprint": json.loads(graphs[0].fingerprint_json)}]}))
    run = subprocess.run([sys.executable, str(REPO / "bench" / "tune_twice_summary.py"), a, a, "--names", str(report),
                          "--json", str(tmp_path / "t.json"), "--markdown", str(tmp_path / "t.md")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "same or within noise: 9 of 9" in run.stdout
    rows = json.loads((tmp_path / "t.json").read_text())
    assert {r["graph"] for r in rows} >= {"cora"} and all(r["verdict"] == "same" for r in rows)
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "tune_twice_summary.py"), str(tmp_path / "no.db"), a],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "cannot read" in bad.stderr


def test_tune_twice_missing_problem(tmp_path, graphs, op):
    a = make_site_db(str(tmp_path / "a.db"), graphs, op)
    b = make_site_db(str(tmp_path / "b.db"), graphs[:2], op)
    rows = twice.compare(twice.read_winners(a), twice.read_winners(b))
    assert sum(1 for r in rows if r["verdict"] == "only in one run") == 3


def test_noise_band():
    tight = {"median_ms": 1.0, "mean_ms": 1.0, "m2": 0.0, "count": 10}
    assert twice.band(tight, tight) == pytest.approx(0.02 + 1.2533 * math.sqrt(2 * 0.005 ** 2 / 10))
    wide = {"median_ms": 1.0, "mean_ms": 1.0, "m2": 9 * 0.1 ** 2, "count": 10}  # relative sd 0.1
    assert twice.band(wide, wide) == pytest.approx(0.02 + 1.2533 * math.sqrt(2 * 0.1 ** 2 / 10))
