#!/usr/bin/env python3
"""Fits dfgnn's default schedule rule (what dispatch runs for a graph nobody tuned) on sweep data.

Input: tuning databases (SQLite, db/src/schema.cpp) written by the tuner, or a case extract written
by this script (--write-cases). A *case* is one tuned problem: (graph, op, pass), with the median
time of every candidate schedule the tuner measured. The regret of a schedule in a case is its time
over the case's best time.

The rule is a small decision tree over fingerprint and op features (FEATURES below; the runtime,
runtime/src/default_rule.cpp, computes the same ones). Every leaf holds an ordered list of schedule
texts, best first: the runtime takes the first one that is usable for the problem (valid and among
the tuner's candidates there), and falls back to the hand rule if none is. The fit minimises the
geometric-mean regret over the training cases and models that walk: a text not measured in a case
(the tuner did not race it there, so the runtime would skip it) passes to the next one, and a case
where no text of its leaf was measured gets the hand rule's regret, which is the default the tuner
recorded (so the sweep must be made with the hand rule as the default: DFGNN_DEFAULT_RULE=hand, or a
build before the fitted rule; a recorded default the hand rule cannot give is refused). Regrets
count at most regret_cap (a measurement slower than that is kept by name only in the extract).

Output: the rule (JSON, runtime/data/default_rule.json, embedded into the library at build time) and
a leave-one-graph-out validation (for each graph: fit on the others, score its cases) against the
hand rule (the default recorded in the databases), as Markdown and JSON.

  fit_default_rule.py --db /work/sweep/*.db --write-cases tests/data/default_rule_cases.json \\
      --rule runtime/data/default_rule.json --report bench/results/2026-12-01b-default-rule
  fit_default_rule.py --cases tests/data/default_rule_cases.json --check runtime/data/default_rule.json
  fit_default_rule.py --cases tests/data/default_rule_cases.json --variants base per-pass [--nested]

The rule is always fitted from the extract (the databases are first reduced to it), so the
committed rule can be regenerated from the committed extract, and --check does so.
--variants prints a table comparing other ways to fit (VARIANTS: more features, another leaf cost,
one tree per pass) by the same validation; the committed rule is always the default variant's.
Needs numpy (the Python package's own dependency).
"""
import argparse
import hashlib
import json
import math
import os
import sqlite3
import sys

import numpy as np

RULE_FORMAT = "dfgnn-default-rule"
RULE_VERSION = 1
CASES_FORMAT = "dfgnn-default-rule-cases"
# The solvers the hand rule picks: a recorded default of another one was not made by the hand rule.
HAND_RULE_SOLVERS = ("subwarp", "hub_split")

DTYPE_BYTES = {0: 4, 1: 2, 2: 2, 3: 8}  # dfgnn_dtype_t: float32, float16, bfloat16, float64
PASS_NAMES = ("forward", "backward_row", "backward_col")
MODEL_NAMES = ("gat", "gatv2", "transformer", "agnn")



def key_bits_column(conn):
    """The results column of the op key's packed bits: key_bits since schema v2, variant before."""
    cols = {row[1] for row in conn.execute("PRAGMA table_info(results)")}
    return "key_bits" if "key_bits" in cols else "variant"

def _log2_at_least_1(x):
    return math.log2(max(x, 1))


# name -> value from (fingerprint dict, op dict). The runtime's table (default_rule.cpp,
# kFeatures) must compute exactly the same: same names, same formulas.
FEATURES = {
    "log2_nodes": lambda fp, op: _log2_at_least_1(fp["num_nodes"]),
    "log2_edges": lambda fp, op: _log2_at_least_1(fp["num_edges"]),
    "mean_degree": lambda fp, op: float(fp["mean_degree"]),
    "log2_max_degree": lambda fp, op: math.log2(fp["max_degree"] + 1),
    "p50": lambda fp, op: float(fp["p50"]),
    "p90": lambda fp, op: float(fp["p90"]),
    "p99": lambda fp, op: float(fp["p99"]),
    "p999": lambda fp, op: float(fp["p999"]),
    "cv": lambda fp, op: float(fp["cv"]),
    "gini": lambda fp, op: float(fp["gini"]),
    "top1pct_edge_share": lambda fp, op: float(fp["top1pct_edge_share"]),
    # rows of degree >= 64 per row, and the number of rows of degree >= 256 (log2(1 + count))
    "hub_row_share": lambda fp, op: fp["hub_rows"][0] / max(fp["num_nodes"], 1),
    "log2_long_rows": lambda fp, op: math.log2(fp["hub_rows"][2] + 1),
    "model": lambda fp, op: float(op["model"]),
    "pass": lambda fp, op: float(op["pass"]),
    "heads": lambda fp, op: float(op["heads"]),
    "dim": lambda fp, op: float(op["dim"]),
    "dtype_bytes": lambda fp, op: float(DTYPE_BYTES[op["dtype"]]),
}
FEATURE_NAMES = list(FEATURES)


def _bytes_per_row(op):
    return op["heads"] * op["dim"] * DTYPE_BYTES[op["dtype"]]


def _hub_edge_share(fp):
    """A floor on the share of edges in rows of degree >= 64: each hub row counted at its
    threshold bin's lower edge (hub_rows[k] = rows of degree >= 2^(k+6))."""
    h = fp["hub_rows"]
    floor = sum((h[k] - (h[k + 1] if k + 1 < len(h) else 0)) * 2 ** (k + 6) for k in range(len(h)))
    return floor / max(fp["num_edges"], 1)


# Features the runtime does not compute, for the --variants experiment only (computed from the
# fingerprint and op alone, as FEATURES; a variant adopted moves its features into FEATURES and
# the runtime's kFeatures).
CANDIDATE_FEATURES = {
    # the degree distribution's shape, free of its scale
    "log2_max_over_mean": lambda fp, op: math.log2((fp["max_degree"] + 1) / (fp["mean_degree"] + 1)),
    "log2_p99_over_mean": lambda fp, op: math.log2((fp["p99"] + 1) / (fp["mean_degree"] + 1)),
    "row_share_degree_ge_32": lambda fp, op: float(sum(fp["hist"][6:])),  # hist[b]: degree in [2^(b-1), 2^b)
    "hub_edge_share": lambda fp, op: _hub_edge_share(fp),
    # the work: bytes of one row's features, and those of all edges' / all nodes' gathers
    "log2_row_bytes": lambda fp, op: math.log2(_bytes_per_row(op)),
    "log2_edge_bytes": lambda fp, op: math.log2(max(fp["num_edges"], 1) * _bytes_per_row(op)),
    "log2_node_bytes": lambda fp, op: math.log2(max(fp["num_nodes"], 1) * _bytes_per_row(op)),
}
SHAPE_FEATURES = ["log2_max_over_mean", "log2_p99_over_mean", "row_share_degree_ge_32", "hub_edge_share"]
WORK_FEATURES = ["log2_row_bytes", "log2_edge_bytes", "log2_node_bytes"]


def feature_value(name, fp, op):
    return (FEATURES[name] if name in FEATURES else CANDIDATE_FEATURES[name])(fp, op)


# What a fit is, besides its params: the features it may split on, the cost a leaf's list
# minimises per case ("log": log regret, so the geomean; "band": log regret plus log 1.1 for a
# case outside 10% of its best, the figure the goal counts), and splits made first, whatever
# their gain, not counted in the depth (("pass", 0.5), ("pass", 1.5): one tree per pass).
DEFAULT_VARIANT = {"features": FEATURE_NAMES, "cost": "log", "forced": ()}
# The --variants experiment (bench/results/2026-12-01e-default-rule.md): a few principled
# alternatives, all scored by the same leave-one-graph-out validation.
VARIANTS = {
    "base": DEFAULT_VARIANT,
    "shape": dict(DEFAULT_VARIANT, features=FEATURE_NAMES + SHAPE_FEATURES),
    "work": dict(DEFAULT_VARIANT, features=FEATURE_NAMES + WORK_FEATURES),
    "shape+work": dict(DEFAULT_VARIANT, features=FEATURE_NAMES + SHAPE_FEATURES + WORK_FEATURES),
    "band-cost": dict(DEFAULT_VARIANT, cost="band"),
    "per-pass": dict(DEFAULT_VARIANT, forced=(("pass", 0.5), ("pass", 1.5))),
}

DEFAULT_PARAMS = {
    "max_depth": 4,        # levels of splits
    "min_leaf_cases": 12,  # cases in every leaf
    "min_leaf_graphs": 3,  # distinct graphs in every leaf (a leaf learnt from one graph does not generalise)
    "min_gain": 0.005,     # a split must lower the node's mean log regret by this much (per case)
    "regret_cap": 3.0,     # regret of a missing measurement, and the most one measured regret counts
    "max_schedules": 4,    # schedule texts per leaf
    "max_thresholds": 16,  # split points tried per feature and node
}


class FitError(Exception):
    pass


# ------------------------------------------------------------------------------------------ input

def graph_label(fp):
    # The databases key results by the traversed structure's fingerprint (CSR for the forward and
    # the backward row pass, CSC for the column pass), so a graph is known by its size alone.
    return f"n{fp['num_nodes']}.e{fp['num_edges']}"


def load_databases(paths, env_class=None, names=None):
    """Cases from tuning databases: per (problem), each candidate's median from the latest run that
    measured it (as the database pools them)."""
    raw = {}  # case key -> {"fp", "op", "default", "stats": {text: (time, uuid, median)}}
    env_classes = set()
    for path in paths:
        if not os.path.exists(path):
            raise FitError(f"{path}: no such file")
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = conn.execute(
                "SELECT r.env_class, r.template_hash, r.library_version, r.model, r.dtype, r.heads, r.dim, "
                f"r.direction, r.{key_bits_column(conn)}, f.text, ru.uuid, ru.unix_time, ru.default_schedule, cs.schedule, "
                "cs.median_ms FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id "
                "JOIN runs ru ON ru.result_id = r.id JOIN candidate_stats cs ON cs.run_id = ru.id").fetchall()
            conn.close()
        except sqlite3.Error as e:
            raise FitError(f"{path}: not a readable dfgnn tuning database: {e}") from e
        for (env, thash, libv, model, dtype, heads, dim, direction, variant, fp_text, uuid, unix_time,
             default, schedule, median) in rows:
            if env_class is not None and env != env_class:
                continue
            env_classes.add(env)
            if direction not in (0, 1, 2) or dtype not in DTYPE_BYTES:
                raise FitError(f"{path}: result with pass {direction} / dtype {dtype} is not one this script knows")
            key = (env, thash, libv, model, dtype, heads, dim, direction, variant, fp_text)
            case = raw.setdefault(key, {"fp": json.loads(fp_text), "stats": {}, "latest": (-1, "")})
            case["op"] = {"model": model, "dtype": dtype, "heads": heads, "dim": dim, "pass": direction,
                          "variant": variant}
            stamp = (unix_time, uuid)
            if stamp > case["latest"]:
                case["latest"], case["default"] = stamp, default
            if not (median > 0 and math.isfinite(median)):
                continue
            old = case["stats"].get(schedule)
            if old is None or stamp > old[0]:
                case["stats"][schedule] = (stamp, median)
    if len(env_classes) > 1:
        raise FitError(f"the databases hold several GPU classes ({', '.join(sorted(env_classes))}); "
                       "choose one with --env-class")
    cases = []
    for key in sorted(raw, key=repr):
        c = raw[key]
        times = {s: m for s, (_, m) in c["stats"].items()}
        if c["default"] not in times:
            continue  # the tuner always times its default first; without it there is no baseline
        if c["default"].split(":")[0] not in HAND_RULE_SOLVERS:
            raise FitError(f"a recorded default ({c['default']}) is not the hand rule's (sub-warp or hub split): "
                           "the sweep must be tuned with DFGNN_DEFAULT_RULE=hand")
        label = graph_label(c["fp"])
        cases.append({"graph": (names or {}).get(label, label), "fp": c["fp"], "op": c["op"],
                      "default": c["default"], "times": times})
    if not cases:
        raise FitError("no usable case (a tuned problem with its default measured) in " + ", ".join(paths))
    return cases


def write_cases(cases, path, cap, sources):
    """The compact extract: schedule texts and fingerprints once, times within the cap to 4
    significant digits, measured-but-slower-than-the-cap schedules by index only."""
    # A case read from an extract names its slow schedules apart (they have no time): kept as such.
    texts = sorted({s for c in cases for s in c["times"]} | {s for c in cases for s in c.get("slow", ())})
    index = {t: i for i, t in enumerate(texts)}
    fps, fp_index = [], {}
    out_cases = []
    for c in sorted(cases, key=lambda c: (c["graph"], sorted(c["op"].items()))):
        fp_key = json.dumps(c["fp"], sort_keys=True)
        if fp_key not in fp_index:
            fp_index[fp_key] = len(fps)
            fps.append(c["fp"])
        best = min(c["times"].values())
        kept = {s: float(f"{m:.4g}") for s, m in c["times"].items() if m <= best * cap or s == c["default"]}
        slow = sorted(index[s] for s in (set(c["times"]) - kept.keys()) | set(c.get("slow", ())))
        out_cases.append({"graph": c["graph"], "fp": fp_index[fp_key], "op": c["op"], "default": index[c["default"]],
                          "times": sorted([index[s], m] for s, m in kept.items()), "slow": slow,
                          "complete": c.get("complete")})
    doc = {"format": CASES_FORMAT, "version": 1, "sources": sources, "regret_cap": cap, "schedules": texts,
           "fingerprints": fps, "cases": out_cases}
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


def read_cases(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise FitError(f"{path}: cannot read the case extract: {e}") from e
    if doc.get("format") != CASES_FORMAT or doc.get("version") != 1:
        raise FitError(f"{path}: not a {CASES_FORMAT} version 1 file")
    texts, fps = doc["schedules"], doc["fingerprints"]
    cases = []
    for c in doc["cases"]:
        times = {texts[i]: m for i, m in c["times"]}
        cases.append({"graph": c["graph"], "fp": fps[c["fp"]], "op": c["op"], "default": texts[c["default"]],
                      "times": times, "slow": {texts[i] for i in c["slow"]}, "complete": c.get("complete")})
    return cases, doc


# ------------------------------------------------------------------------------------------ fit

class Data:
    """The cases as matrices: X (cases x features), L (cases x texts: log of the capped regret),
    M (measured), C (the cost the fit minimises: L, or L with the band's step)."""

    def __init__(self, cases, cap, variant=DEFAULT_VARIANT):
        self.cases = cases
        self.cap = cap
        self.features = list(variant["features"])
        self.texts = sorted({s for c in cases for s in c["times"]} | {s for c in cases for s in c.get("slow", ())})
        col = {t: i for i, t in enumerate(self.texts)}
        n, t = len(cases), len(self.texts)
        self.X = np.array([[feature_value(f, c["fp"], c["op"]) for f in self.features] for c in cases], dtype=float)
        self.L = np.full((n, t), math.log(cap))
        self.M = np.zeros((n, t), dtype=bool)
        self.hand = np.zeros(n)  # log regret of the hand rule, which answers where no leaf text is usable
        for i, c in enumerate(cases):
            best = min(c["times"].values())
            for s, m in c["times"].items():
                self.L[i, col[s]] = math.log(min(m / best, cap))
                self.M[i, col[s]] = True
            for s in c.get("slow", ()):
                self.M[i, col[s]] = True
            self.hand[i] = math.log(min(c["times"][c["default"]] / best, cap))
        self.graphs = np.array([c["graph"] for c in cases])
        if variant["cost"] == "log":
            self.C, self.hand_cost = self.L, self.hand
        elif variant["cost"] == "band":
            band = math.log(1.10) + 1e-12
            self.C = self.L + np.where(self.L > band, math.log(1.10), 0.0)
            self.hand_cost = self.hand + np.where(self.hand > band, math.log(1.10), 0.0)
        else:
            raise FitError(f"unknown leaf cost {variant['cost']!r}")


def leaf_schedules(data, rows, max_schedules):
    """Greedy ordered list: each next text is the one that most lowers the summed cost (log regret
    unless the variant says otherwise) of the rows, where a row takes the first text of the list
    measured there (the hand rule if none is). Returns (text columns, summed cost). (Insertions
    anywhere in the list, tried too, fitted the training graphs better and the left-out ones worse.)"""
    rows = np.asarray(rows)
    cols = np.flatnonzero(data.M[rows].any(axis=0))  # texts measured in none of the rows cannot help
    C, M = data.C[np.ix_(rows, cols)], data.M[np.ix_(rows, cols)]
    current = data.hand_cost[rows].copy()
    open_rows = np.ones(len(rows), dtype=bool)
    chosen = []
    for _ in range(max_schedules):
        if not open_rows.any() or len(cols) == 0:
            break
        # The gain if text t were appended: open rows measuring t take its cost instead of the hand rule's.
        gain = np.where(M & open_rows[:, None], current[:, None] - C, 0.0).sum(axis=0)
        gain[chosen] = -np.inf
        t = int(np.argmax(gain))  # the first maximum: the smallest text on ties
        if gain[t] <= 1e-12:
            break
        chosen.append(t)
        hit = open_rows & M[:, t]
        current[hit] = C[hit, t]
        open_rows &= ~M[:, t]
    return [int(cols[t]) for t in chosen], float(current.sum())


def served_log_regret(data, rows, chosen):
    """Summed log regret of rows served by the text columns chosen (first measured one, else the hand rule)."""
    total = 0.0
    for i in rows:
        total += next((data.L[i, t] for t in chosen if data.M[i, t]), data.hand[i])
    return float(total)


def best_split(data, rows, params):
    """(gain, feature, threshold) of the best split of rows, scored by the leaf lists the two sides
    would get, or None. Thresholds: midpoints between distinct values, at most max_thresholds per
    feature (evenly spaced in rank)."""
    n = len(rows)
    _, base = leaf_schedules(data, rows, params["max_schedules"])
    best = None
    lo = params["min_leaf_cases"]
    for f in range(len(data.features)):
        values = data.X[rows, f]
        order = np.argsort(values, kind="stable")
        v, sorted_rows = values[order], rows[order]
        graphs = data.graphs[sorted_rows]
        ks = [k for k in range(lo, n - lo + 1) if v[k - 1] != v[k]
              and len(set(graphs[:k])) >= params["min_leaf_graphs"] and len(set(graphs[k:])) >= params["min_leaf_graphs"]]
        if len(ks) > params["max_thresholds"]:
            ks = [ks[round(i * (len(ks) - 1) / (params["max_thresholds"] - 1))] for i in range(params["max_thresholds"])]
        for k in ks:
            loss = (leaf_schedules(data, sorted_rows[:k], params["max_schedules"])[1]
                    + leaf_schedules(data, sorted_rows[k:], params["max_schedules"])[1])
            gain = base - loss
            if best is None or gain > best[0] + 1e-9:
                best = (gain, f, (v[k - 1] + v[k]) / 2)
    if best is None or best[0] < params["min_gain"] * n:
        return None
    return best


def fit_tree(data, rows, params, forced=()):
    """The tree as a list of nodes (index 0 the root; children after their parent). forced: splits
    (feature, threshold) made first where they divide the rows, not counted in the depth."""
    nodes = []

    def grow(rows, depth, forced):
        at = len(nodes)
        nodes.append(None)
        def divides(split):
            return 0 < int((data.X[rows, data.features.index(split[0])] <= split[1]).sum()) < len(rows)

        while forced and not divides(forced[0]):  # a forced split that leaves one side empty is skipped
            forced = forced[1:]
        if forced:
            (name, threshold), forced = forced[0], forced[1:]
            split, depth = (None, data.features.index(name), threshold), depth - 1  # not counted in the depth
        else:
            split = best_split(data, rows, params) if depth < params["max_depth"] else None
        if split is None:
            chosen, _ = leaf_schedules(data, rows, params["max_schedules"])
            nodes[at] = {"leaf": None, "schedules": [data.texts[t] for t in chosen], "cases": int(len(rows)),
                         "graphs": int(len(set(data.graphs[rows]))),
                         "geomean_regret": round(math.exp(served_log_regret(data, rows, chosen) / len(rows)), 4)}
            return at
        _, f, threshold = split
        go_left = data.X[rows, f] <= threshold
        node = {"feature": data.features[f], "threshold": float(threshold)}
        nodes[at] = node
        node["left"] = grow(rows[go_left], depth + 1, forced)
        node["right"] = grow(rows[~go_left], depth + 1, forced)
        return at

    grow(np.asarray(rows), 0, tuple(forced))
    leaf_id = 0
    for node in nodes:
        if "leaf" in node:
            node["leaf"] = leaf_id
            leaf_id += 1
    return nodes


def walk(nodes, fp, op):
    """The answering leaf node, as the runtime walks it (value <= threshold goes left)."""
    node = nodes[0]
    while "leaf" not in node:
        node = nodes[node["left"] if feature_value(node["feature"], fp, op) <= node["threshold"] else node["right"]]
    return node


def regret_of(case, text, cap):
    """The capped regret of running text in the case, or None when it was not measured there."""
    best = min(case["times"].values())
    if text in case["times"]:
        return min(case["times"][text] / best, cap)
    if text in case.get("slow", ()):
        return cap
    return None


def max_log2_edges(cases):
    """The largest graph (log2 of its edges) among cases the tuner measured completely: the rule's
    domain. A large graph whose search the budget cut (R-MAT 2^20 measured 13 of ~180 candidates at
    1 s) says little about which texts win there, and the runtime would run leaf texts on it that the
    fit never saw timed; past twice the domain's edges the hand rule answers (as beyond_domain)."""
    complete = [c for c in cases if c.get("complete") is not False] or cases
    return max(FEATURES["log2_edges"](c["fp"], c["op"]) for c in complete)


def beyond_domain(case, domain):
    return domain is not None and FEATURES["log2_edges"](case["fp"], case["op"]) > domain + 1


def rule_regret(nodes, case, cap, domain=None):
    """Regret of the rule in a case: the leaf's first text measured there (as the runtime takes the
    first usable one); the hand rule's (the recorded default) if none was measured, or if the case's
    graph lies past the domain (max_log2_edges)."""
    if beyond_domain(case, domain):
        return regret_of(case, case["default"], cap)
    for text in walk(nodes, case["fp"], case["op"])["schedules"]:
        r = regret_of(case, text, cap)
        if r is not None:
            return r
    return regret_of(case, case["default"], cap)


def summarise(regrets):
    r = np.asarray(regrets, dtype=float)
    return {"cases": int(len(r)), "within_10pct": round(float((r <= 1.10).mean()), 4) if len(r) else None,
            "geomean_regret": round(float(np.exp(np.log(r).mean())), 4) if len(r) else None,
            "worst_regret": round(float(r.max()), 4) if len(r) else None}


def fit_rule(cases, params, variant=DEFAULT_VARIANT):
    data = Data(cases, params["regret_cap"], variant)
    return fit_tree(data, np.arange(len(cases)), params, variant["forced"])


def validate(cases, params, variant=DEFAULT_VARIANT, folds=None):
    """Leave one graph out: fit on the other graphs, score this graph's cases. folds: instead, hold
    out each of that many groups of graphs (every folds-th graph in name order) in turn."""
    cap = params["regret_cap"]
    per_graph, fitted_all, hand_all, shapes = [], [], [], []
    graphs = sorted({c["graph"] for c in cases})
    for held in ([[g] for g in graphs] if folds is None else [graphs[i::folds] for i in range(folds)]):
        train = [c for c in cases if c["graph"] not in held]
        test = [c for c in cases if c["graph"] in held]
        g = held[0] if folds is None else ", ".join(held)
        nodes = fit_rule(train, params, variant)
        domain = max_log2_edges(train)
        fitted = [rule_regret(nodes, c, cap, domain) for c in test]
        hand = [regret_of(c, c["default"], cap) for c in test]
        fitted_all += fitted
        hand_all += hand
        shapes += [shape_label(c["op"]) for c in test]
        per_graph.append({"graph": g, "fitted": summarise(fitted), "hand": summarise(hand)})
    per_shape = [{"shape": s, "fitted": summarise([f for f, t in zip(fitted_all, shapes) if t == s]),
                  "hand": summarise([h for h, t in zip(hand_all, shapes) if t == s])} for s in sorted(set(shapes))]
    return {"per_graph": per_graph, "per_shape": per_shape, "fitted": summarise(fitted_all), "hand": summarise(hand_all)}


def shape_label(op):
    return f"{MODEL_NAMES[op['model']]} H{op['heads']} D{op['dim']} { {0: 'fp32', 1: 'fp16', 2: 'bf16', 3: 'fp64'}[op['dtype']] }"


def carry_over(cases, cap):
    """Whether one op shape's winner may answer for another's (issue 24, item 4): for each ordered
    pair of op shapes (A, B), the capped regret in A's cases of B's winner on the same graph and pass,
    where B's winner was measured in A's case. Returns rows (A, B, cases, geomean, within 10%) for
    every pair with at least 20 such cases."""
    by_key = {(shape_label(c["op"]), c["graph"], c["op"]["pass"]): c for c in cases}
    shapes = sorted({k[0] for k in by_key})
    rows = []
    for a in shapes:
        for b in shapes:
            if a == b:
                continue
            regrets = []
            for (s, g, p), case in by_key.items():
                other = by_key.get((b, g, p)) if s == a else None
                if other is None:
                    continue
                r = regret_of(case, min(other["times"], key=other["times"].get), cap)
                if r is not None:
                    regrets.append(r)
            if len(regrets) >= 20:
                r = np.asarray(regrets)
                rows.append((a, b, len(r), float(np.exp(np.log(r).mean())), float((r <= 1.10).mean())))
    return rows


NESTED_FOLDS = 5  # the inner validation of --nested: 5 groups of graphs (a leave-one-graph-out there costs 5x)


def compare_variants(cases, params, names, nested=False):
    """Each variant's leave-one-graph-out and in-sample figures. nested: also the figure of choosing
    the variant without the left-out graph (by the best within-10% share of a validation by
    NESTED_FOLDS groups of the other graphs, ties to the earlier variant), which the choice of one
    variant cannot flatter."""
    cap = params["regret_cap"]
    out = {}
    for name in names:
        v = VARIANTS[name]
        nodes = fit_rule(cases, params, v)
        domain = max_log2_edges(cases)
        out[name] = {"leave_one_graph_out": validate(cases, params, v)["fitted"],
                     "in_sample": summarise([rule_regret(nodes, c, cap, domain) for c in cases]),
                     "leaves": sum(1 for n in nodes if "leaf" in n)}
    if nested:
        regrets, picks = [], {}
        for g in sorted({c["graph"] for c in cases}):
            train = [c for c in cases if c["graph"] != g]
            inner = {n: validate(train, params, VARIANTS[n], NESTED_FOLDS)["fitted"]["within_10pct"] for n in names}
            pick = max(names, key=lambda n: (inner[n], -names.index(n)))
            picks[g] = pick
            nodes = fit_rule(train, params, VARIANTS[pick])
            domain = max_log2_edges(train)
            regrets += [rule_regret(nodes, c, cap, domain) for c in cases if c["graph"] == g]
        out["nested"] = {"leave_one_graph_out": summarise(regrets), "picks": picks}
    return out


def variants_markdown(result, names):
    lines = ["| variant | features | leaf cost | forced splits | LOGO within 10% | LOGO geomean | LOGO worst | "
             "in-sample within 10% | in-sample geomean | leaves |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        v, r = VARIANTS[name], result[name]
        extra = [f for f in v["features"] if f not in FEATURE_NAMES]
        lo, ins = r["leave_one_graph_out"], r["in_sample"]
        lines.append(f"| {name} | {'base' + (' + ' + ', '.join(extra) if extra else '')} | {v['cost']} | "
                     f"{', '.join(f'{f} <= {t:g}' for f, t in v['forced']) or '-'} | "
                     f"{100 * lo['within_10pct']:.1f}% | {lo['geomean_regret']:.3f} | {lo['worst_regret']:.2f} | "
                     f"{100 * ins['within_10pct']:.1f}% | {ins['geomean_regret']:.3f} | {r['leaves']} |")
    if "nested" in result:
        n = result["nested"]
        lo = n["leave_one_graph_out"]
        counts = {k: list(n["picks"].values()).count(k) for k in names}
        lines += ["", f"Nested (the variant chosen without the left-out graph, by a validation on {NESTED_FOLDS} "
                  "groups of the other graphs): "
                  f"{100 * lo['within_10pct']:.1f}% within 10%, geomean {lo['geomean_regret']:.3f}; picks: "
                  + ", ".join(f"{k} {c}" for k, c in counts.items() if c) + "."]
    return "\n".join(lines) + "\n"


def make_rule(cases, params, cases_doc_sha):
    nodes = fit_rule(cases, params)
    cap = params["regret_cap"]
    domain = max_log2_edges(cases)
    return {
        "format": RULE_FORMAT,
        "version": RULE_VERSION,
        "generated_by": "tools/fit_default_rule.py",
        "features": sorted({n["feature"] for n in nodes if "feature" in n}),
        "nodes": nodes,
        "fit": {"params": params, "cases": len(cases), "graphs": len({c["graph"] for c in cases}),
                "cases_sha256": cases_doc_sha,
                # the graph sizes the rule saw: dispatch does not extrapolate it far past them
                "domain": {"max_log2_edges": round(domain, 3),
                           # the op shapes measured: on these the runtime takes a leaf's text as the fit
                           # scored it (raced there, else the hand rule) and fits no text to the shape
                           "op_shapes": sorted({(c["op"]["model"], c["op"]["dtype"], c["op"]["heads"], c["op"]["dim"],
                                                 c["op"]["variant"]) for c in cases})},
                # cases the tuner's budget cut before every candidate was measured (None: not known)
                "partly_measured_cases": (None if any(c.get("complete") is None for c in cases)
                                          else sum(1 for c in cases if not c["complete"])),
                "in_sample": summarise([rule_regret(nodes, c, cap, domain) for c in cases]),
                "hand_rule": summarise([regret_of(c, c["default"], cap) for c in cases]),
                # the leaf of every extract case, in extract order: the runtime's walk is checked against it
                "case_leaves": [walk(nodes, c["fp"], c["op"])["leaf"] for c in cases]},
    }


def dump_rule(rule):
    return json.dumps(rule, indent=1) + "\n"


# ------------------------------------------------------------------------------------------ report

def op_label(op):
    return (f"{MODEL_NAMES[op['model']]} H{op['heads']} D{op['dim']} "
            f"{ {0: 'fp32', 1: 'fp16', 2: 'bf16', 3: 'fp64'}[op['dtype']] } {PASS_NAMES[op['pass']]}")


def report_markdown(rule, validation, sources, carry=None):
    fit = rule["fit"]
    lines = ["# The fitted default rule: leave-one-graph-out validation", "",
             f"Made by `tools/fit_default_rule.py` from {fit['cases']} cases (graph, op, pass) on {fit['graphs']} "
             f"graphs ({', '.join(sources)}). Regret = the schedule's tuner-measured median over the case's best; "
             f"a schedule not measured in a case, or slower than {fit['params']['regret_cap']}x, counts as "
             f"{fit['params']['regret_cap']}x. The hand rule is the default the tuner recorded with each case.", "",
             f"The fit takes a leaf text the tuner did not measure in a case for one the runtime skips there (not "
             f"among its candidates). That holds where the tuner measured every candidate; in "
             f"{fit['partly_measured_cases']} cases its budget ran out first, and there the runtime may run a "
             f"text the fit saw no time for.", "",
             "## Summary", "",
             "| rule | cases | within 10% of best | geomean regret | worst |", "|---|---|---|---|---|"]

    def row(name, s):
        return f"| {name} | {s['cases']} | {100 * s['within_10pct']:.1f}% | {s['geomean_regret']:.3f} | {s['worst_regret']:.2f} |"

    lines += [row("fitted, leave one graph out", validation["fitted"]), row("hand rule", validation["hand"]),
              row("fitted, in sample (all graphs)", fit["in_sample"]), "",
              "## Per left-out graph", "",
              "| graph | cases | fitted within 10% | fitted geomean | hand within 10% | hand geomean |",
              "|---|---|---|---|---|---|"]
    for g in validation["per_graph"]:
        f, h = g["fitted"], g["hand"]
        lines.append(f"| {g['graph']} | {f['cases']} | {100 * f['within_10pct']:.0f}% | {f['geomean_regret']:.3f} | "
                     f"{100 * h['within_10pct']:.0f}% | {h['geomean_regret']:.3f} |")
    lines += ["", "## Per op shape (leave one graph out)", "",
              "| op shape | cases | fitted within 10% | fitted geomean | hand within 10% | hand geomean |",
              "|---|---|---|---|---|---|"]
    for g in validation.get("per_shape", []):
        f, h = g["fitted"], g["hand"]
        lines.append(f"| {g['shape']} | {f['cases']} | {100 * f['within_10pct']:.0f}% | {f['geomean_regret']:.3f} | "
                     f"{100 * h['within_10pct']:.0f}% | {h['geomean_regret']:.3f} |")
    if carry is not None:
        lines += ["", "## Whose winners carry over (issue 24, item 4)", "",
                  "For op shape A, the regret of op shape B's winner on the same graph and pass, where the tuner "
                  "measured it in A's case (pairs with at least 20 such cases): for each A, the best B of "
                  "another model on the same (H, D, dtype), and the best B of another (H, D).", "",
                  "| A | B | cases | geomean regret | within 10% |", "|---|---|---|---|---|"]
        def heads_dim(label):
            return label.split(" ")[1:3]
        for a in sorted({r[0] for r in carry}):
            for same in (True, False):  # another model on the same (H, D, dtype); another (H, D)
                pick = sorted((r for r in carry if r[0] == a and (r[1].split(" ", 1)[1] == a.split(" ", 1)[1] if same
                                                                  else heads_dim(r[1]) != heads_dim(a))),
                              key=lambda r: r[3])
                if pick:
                    _, b, n, gm, w = pick[0]
                    lines.append(f"| {a} | {b} | {n} | {gm:.3f} | {100 * w:.0f}% |")
    lines += ["", "## The rule (all graphs)", "", "```"]

    def show(i, depth):
        n = rule["nodes"][i]
        pad = "  " * depth
        if "leaf" in n:
            lines.append(f"{pad}leaf {n['leaf']} ({n['cases']} cases, {n['graphs']} graphs, geomean "
                         f"{n['geomean_regret']:.3f}): " + " > ".join(n["schedules"]))
        else:
            lines.append(f"{pad}{n['feature']} <= {n['threshold']:.6g}:")
            show(n["left"], depth + 1)
            lines.append(f"{pad}else:")
            show(n["right"], depth + 1)

    show(0, 0)
    lines += ["```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main

def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_reports(report_paths):
    """From dfgnn-tune --json reports: {"n<N>.e<E>": graph name} (the databases hold fingerprints
    only) and, per case key, whether the tuner measured every candidate (a budget cut leaves some
    unmeasured: there the runtime may take a leaf text the fit saw no time for)."""
    names, complete = {}, {}
    dtypes = {"float32": 0, "float16": 1, "bfloat16": 2}
    for path in report_paths:
        try:
            with open(path) as f:
                problems = json.load(f)["problems"]
            for p in problems:
                label = f"n{p['nodes']}.e{p['edges']}"
                names[label] = os.path.basename(p["graph"].rstrip("/"))
                for r in p["report"]:
                    key = (label, MODEL_NAMES.index(p["model"]), dtypes[p["dtype"]], p["heads"], p["dim"],
                           PASS_NAMES.index(r["pass"]))
                    complete[key] = len(r["timed"]) >= r["candidates"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FitError(f"{path}: not a dfgnn-tune report with problems[].graph/nodes/edges/report: {e}") from e
    return names, complete


def case_key(label, op):
    return (label, op["model"], op["dtype"], op["heads"], op["dim"], op["pass"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--db", nargs="+", help="tuning databases (SQLite)")
    src.add_argument("--cases", nargs="+",
                     help="a case extract written by --write-cases; several (sweeps of other op shapes or GPU "
                          "classes) are pooled, and need --write-cases: the rule is fitted from that one file")
    ap.add_argument("--env-class", help="the GPU class to use when the databases hold several")
    ap.add_argument("--names-from", nargs="+", default=[],
                    help="dfgnn-tune --json reports (problems[].graph, nodes, edges) naming the graphs")
    ap.add_argument("--write-cases", help="with --db, or several --cases: write the extract here (the rule is "
                                          "fitted from it)")
    ap.add_argument("--rule", help="write the fitted rule here")
    ap.add_argument("--check", help="fit and compare with this committed rule; exit 1 if it differs")
    ap.add_argument("--report", help="write the validation as REPORT.md and REPORT.json")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), metavar="VARIANT",
                    help=f"compare these fit variants ({', '.join(VARIANTS)}) by leave-one-graph-out validation "
                         "and print the table (Markdown); the rule itself is always fitted with the default")
    ap.add_argument("--nested", action="store_true",
                    help="with --variants: also choose the variant without each left-out graph (slow)")
    for k, v in DEFAULT_PARAMS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = ap.parse_args(argv)
    params = {k: getattr(a, k) for k in DEFAULT_PARAMS}
    try:
        if a.db:
            names, complete = read_reports(a.names_from)
            if not a.write_cases:
                raise FitError("--db needs --write-cases (the rule is fitted from the extract)")
            sources = [os.path.basename(p) for p in a.db]
            cases = load_databases(a.db, a.env_class, names)
            for c in cases:
                c["complete"] = complete.get(case_key(graph_label(c["fp"]), c["op"]))
            write_cases(cases, a.write_cases, params["regret_cap"], sources)
            cases_path = a.write_cases
        elif len(a.cases) > 1:
            if not a.write_cases:
                raise FitError("several --cases need --write-cases (the rule is fitted from the pooled extract)")
            pooled, sources, cap = [], [], None
            seen, names = set(), {}  # case keys; graph name by fingerprint label
            for path in a.cases:
                part, part_doc = read_cases(path)
                for c in part:
                    key = case_key(c["graph"], c["op"])
                    if key in seen:  # it would weigh twice, and sit on both sides of a left-out graph
                        raise FitError(f"{path}: the case {key} is also in an earlier extract (one sweep given twice?)")
                    seen.add(key)
                    label = graph_label(c["fp"])
                    if names.setdefault(label, c["graph"]) != c["graph"]:
                        raise FitError(f"{path}: graph {label} is named {c['graph']} here and {names[label]} in an "
                                       "earlier extract (name both with --names-from)")
                pooled += part
                sources += part_doc["sources"]
                cap = part_doc["regret_cap"] if cap is None else min(cap, part_doc["regret_cap"])
            write_cases(pooled, a.write_cases, cap, sources)
            cases_path = a.write_cases
        else:
            cases_path = a.cases[0]
        cases, doc = read_cases(cases_path)
        if doc["regret_cap"] < params["regret_cap"]:
            raise FitError(f"{cases_path} keeps times up to {doc['regret_cap']}x; --regret-cap must not exceed it")
        rule = make_rule(cases, params, sha256_of(cases_path))
        text = dump_rule(rule)
        if a.rule:
            with open(a.rule, "w") as f:
                f.write(text)
        if a.check:
            with open(a.check) as f:
                committed = f.read()
            if committed != text:
                print(f"{a.check} differs from the rule fitted on {cases_path}: regenerate it with "
                      f"tools/fit_default_rule.py --cases {cases_path} --rule {a.check}", file=sys.stderr)
                return 1
            print(f"{a.check} matches the rule fitted on {cases_path}")
        if a.variants:
            names = list(dict.fromkeys(a.variants))
            print(variants_markdown(compare_variants(cases, params, names, a.nested), names), end="")
        if a.report:
            validation = validate(cases, params)
            carry = carry_over(cases, params["regret_cap"])
            with open(a.report + ".json", "w") as f:
                json.dump({"params": params, "validation": validation, "in_sample": rule["fit"]["in_sample"],
                           "carry_over": [dict(zip(("shape", "from", "cases", "geomean_regret", "within_10pct"), r))
                                          for r in carry]}, f, indent=1)
            with open(a.report + ".md", "w") as f:
                f.write(report_markdown(rule, validation, doc["sources"], carry))
            v = validation
            print(f"leave one graph out: fitted {100 * v['fitted']['within_10pct']:.1f}% within 10%, geomean "
                  f"{v['fitted']['geomean_regret']:.3f}; hand rule {100 * v['hand']['within_10pct']:.1f}%, "
                  f"{v['hand']['geomean_regret']:.3f}")
    except FitError as e:
        print(f"fit_default_rule: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output or --check path that cannot be written or read
        print(f"fit_default_rule: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
