#!/usr/bin/env python3
"""Tests of tools/calibrate_nearest.py (ctest: calibrate_nearest.script). Standard library only.
- Reading a tuning database: runs are pooled as db/src/results.cpp pools them.
- On a synthetic database whose families each have their own best schedule, the fitted distance and radius
  answer every left-out graph with its family's schedule.
- The committed data is reproducible: the committed extract (tests/data/nearest_extract.json) refits to the
  committed calibration (runtime/src/nearest_calibration.inc) when that was fitted on recorded data, and its
  replay under it is tests/data/nearest_predictions.json (which tests/cpu/test_nearest.cpp checks against
  the runtime's own distance and rule)."""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "tools", "calibrate_nearest.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))
import calibrate_nearest as cn  # noqa: E402
import synthetic_tuning_db  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], check=True, capture_output=True, text=True).stdout


class CalibrateNearest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db = os.path.join(self.tmp.name, "t.db")
        synthetic_tuning_db.make(self.db)

    def tearDown(self):
        self.tmp.cleanup()

    def test_runs_are_pooled_like_the_database(self):
        # Two runs of one schedule: Chan's pooled moments, the count-weighted mean of the medians.
        a = [1.0, 2.0, 4.0]
        b = [3.0, 5.0]
        def moments(x):
            m = sum(x) / len(x)
            return len(x), m, sum((v - m) ** 2 for v in x)
        (na, ma, m2a), (nb, mb, m2b) = moments(a), moments(b)
        rows = [("s", na, ma, m2a, 2.0, "b-run", 20), ("s", nb, mb, m2b, 4.0, "a-run", 10)]
        n, mean, m2, med = cn.pool_runs(rows)["s"]
        self.assertEqual(n, 5)
        self.assertAlmostEqual(mean, 3.0)
        self.assertAlmostEqual(m2, sum((v - 3.0) ** 2 for v in a + b))
        self.assertAlmostEqual(med, (2.0 * 3 + 4.0 * 2) / 5)

    def test_policy_mirror(self):
        tight = [5, 1.0, 0.0, 1.0]
        self.assertTrue(cn.tied([5, 1.02, 0.0, 1.02], tight, 0.0))   # inside 2% + 1 s.e.
        self.assertFalse(cn.tied([5, 1.05, 0.0, 1.05], tight, 0.0))
        self.assertTrue(cn.tied([5, 1.05, 0.0, 1.05], tight, 0.1))   # a noisy machine widens the band

    def test_synthetic_families_are_found(self):
        out = os.path.join(self.tmp.name, "fit.json")
        inc = os.path.join(self.tmp.name, "fit.inc")
        run("calibrate", self.db, "--json", out, "--write-inc", inc, "--report", os.path.join(self.tmp.name, "r.md"))
        with open(out) as f:
            doc = json.load(f)
        v = doc["params"]["validation"]
        self.assertEqual(v["graphs"], 18)
        self.assertGreaterEqual(v["answer_rate"], 0.9)
        self.assertGreaterEqual(v["share_reaching_speed_target"], 0.9)
        self.assertGreater(v["geomean_dispatch_speed"], v["geomean_default_speed"])
        p = cn.read_params(inc)
        self.assertEqual(p["terms"], cn.TERMS)
        self.assertEqual(p["weights"], doc["params"]["weights"])

    def test_a_graphs_other_form_does_not_answer_for_it(self):
        # A dataset and its self-loop form (one more edge per node: the same node count) are one graph to
        # leave out: the left-out graph is answered by the other graph, though its own other form is nearer.
        op = [0, 0, 1, 8, 0, 4]
        def case(graph, winner):
            times = {"s_fast": 1.0, "s_slow": 1.5} if winner == "s_fast" else {"s_fast": 1.5, "s_slow": 1.0}
            return {"op": op, "graph": graph, "winner": winner, "default": "s_slow", "pooled_spread": 0.0,
                    "candidates": {s: [5, t, 0.0, t] for s, t in times.items()}}
        a = [2] * 500 + [40] * 20
        fps = {"a": synthetic_tuning_db.fingerprint(a), "a_loops": synthetic_tuning_db.fingerprint([x + 1 for x in a]),
               "b": synthetic_tuning_db.fingerprint([3] * 900 + [50] * 30)}
        data = {"graphs": {g: {"name": g, "fingerprint": fp} for g, fp in fps.items()},
                "cases": [case("a", "s_fast"), case("a_loops", "s_fast"), case("b", "s_slow")]}
        problem = cn.Problem(data)
        d = problem.distances(cn.BASELINE)
        i = problem.index
        self.assertLess(d[i["a"]][i["a_loops"]], d[i["a"]][i["b"]])
        chosen = {r[0]["graph"]: r[1] for r in problem.evaluate(cn.BASELINE, 1e9, 1e9)}
        self.assertEqual(chosen["a"], "s_slow")        # b's winner: a_loops left out with a
        self.assertEqual(chosen["a_loops"], "s_slow")
        self.assertEqual(chosen["b"], "s_fast")        # b's nearest other graph

    def test_extract_keeps_what_the_replay_reads(self):
        ex = os.path.join(self.tmp.name, "x.json")
        run("extract", self.db, "-o", ex)
        full, compact = cn.Problem(cn.load([self.db])), cn.Problem(cn.load([ex]))
        for w in (cn.BASELINE, dict(cn.BASELINE, hist=4.0, gini=0.0)):
            a = [(r[0]["graph"], r[1]) for r in full.evaluate(w, 1.0, 2.0)]
            b = [(r[0]["graph"], r[1]) for r in compact.evaluate(w, 1.0, 2.0)]
            self.assertEqual(a, b)

    def test_committed_data_is_reproducible(self):
        extract = os.path.join(REPO, "tests", "data", "nearest_extract.json")
        inc = os.path.join(REPO, "runtime", "src", "nearest_calibration.inc")
        committed = cn.read_params(inc)
        pred = os.path.join(self.tmp.name, "p.json")
        run("evaluate", extract, "--params", inc, "--predictions", pred)
        with open(pred) as f, open(os.path.join(REPO, "tests", "data", "nearest_predictions.json")) as g:
            self.assertEqual(json.load(f), json.load(g))
        if isinstance(committed.get("fitted_on"), dict):  # fitted by the script (not the hand-set start)
            out = os.path.join(self.tmp.name, "refit.json")
            run("calibrate", extract, "--json", out)
            with open(out) as f:
                refit = json.load(f)["params"]
            self.assertEqual(refit["weights"], committed["weights"])
            self.assertAlmostEqual(refit["radius"], committed["radius"], delta=1e-6 * committed["radius"])


if __name__ == "__main__":
    unittest.main()
