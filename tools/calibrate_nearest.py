#!/usr/bin/env python3
"""Calibrates nearest-fingerprint dispatch (runtime/src/fingerprint.cpp, runtime/src/nearest.cpp) on recorded
tuning databases, by leave-one-graph-out: for every tuned graph and op, the schedule dispatch would pick for it
from the OTHER graphs' results (nearest by the fingerprint distance, within the radius) is scored by that
schedule's measured time on the left-out graph (its own candidate statistics) against its own tuned winner.

The distance is a weighted sum of fixed per-feature terms (TERMS, the same list as fingerprint.cpp); the
calibration chooses the weights and the radius:
  - the radius is the smallest one at which at least --answer-target of the left-out graphs have a neighbour;
  - the weights (a coordinate search over a small grid, from the hand-set ones) maximise the share of
    left-out cases whose answer reaches --speed-target of the graph's own tuned speed (then the geomean).
Where no neighbour lies within the radius, the default rule answers: its measured time is reported beside.

Commands
  extract DB... -o EXTRACT.json     compact extract of the databases (what tests/data holds)
  calibrate SRC... [--write-inc F] [--report MD] [--json OUT]
                                    fits weights and radius; writes the runtime's table (F, a C++ raw string
                                    holding the JSON: runtime/src/nearest_calibration.inc) and the report
  evaluate SRC... --params F --predictions OUT.json
                                    every left-out prediction under the parameters of F (an .inc or .json),
                                    for the runtime's cross-check (tests/cpu/test_nearest.cpp)
SRC is a tuning database (SQLite, e.g. bench/tune-site.sh's site.db) or an extract. Standard library only."""
import argparse
import json
import math
import os
import random
import sqlite3
import sys

# The distance terms, in the order and with the formulas of runtime/src/fingerprint.cpp (fingerprint_terms):
# L(x) = log2(1 + max(x, 0)); d(a, b) = sum_t w_t term_t(a, b).
TERMS = ["nodes", "edges", "mean", "max", "p50", "p90", "p99", "p999", "cv", "gini", "top1", "hist", "hubs"]
# The hand-set weights the runtime had before calibration (radius 2.0): the starting point.
BASELINE = {"nodes": 0.25, "edges": 0.25, "mean": 1.0, "max": 0.5, "p50": 0.0, "p90": 0.0, "p99": 0.0,
            "p999": 0.0, "cv": 0.0, "gini": 2.0, "top1": 2.0, "hist": 1.0, "hubs": 0.5}
BASELINE_RADIUS = 2.0
GRID = [0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0]

# The winner policy of stats/stats.hpp (one noise band for the tuner, the database and dispatch).
TIE_TOLERANCE, TIE_Z, NOISE_FLOOR, MEDIAN_EFFICIENCY = 0.02, 1.0, 0.005, 1.2533141373155003



def key_bits_column(conn):
    """The results column of the op key's packed bits: key_bits since schema v2, variant before."""
    cols = {row[1] for row in conn.execute("PRAGMA table_info(results)")}
    return "key_bits" if "key_bits" in cols else "variant"

def L(x):
    return math.log2(1.0 + max(float(x), 0.0))


def terms(a, b):
    d = lambda k: abs(L(a[k]) - L(b[k]))
    hist = sum(abs(x - y) for x, y in zip(a["hist"], b["hist"]))
    hubs = sum(abs(L(x) - L(y)) for x, y in zip(a["hub_rows"], b["hub_rows"])) / len(a["hub_rows"])
    return [d("num_nodes"), d("num_edges"), d("mean_degree"), d("max_degree"), d("p50"), d("p90"), d("p99"),
            d("p999"), d("cv"), abs(a["gini"] - b["gini"]), abs(a["top1pct_edge_share"] - b["top1pct_edge_share"]),
            hist, hubs]


# ------------------------------------------------------------------ the policy (mirror of stats.hpp)

def relative_spread(c):
    """Own relative spread of a candidate [count, mean, m2, median]: s.d. / median with >= 3 samples, else 0."""
    n, _, m2, med = c
    return math.sqrt(m2 / (n - 1)) / med if n >= 3 and med > 0 else 0.0


def pooled_spread(cands):
    v = sorted(relative_spread(c) for c in cands if c[0] >= 3 and c[3] > 0)
    if not v:
        return 0.0
    k = len(v)
    return v[k // 2] if k % 2 else v[k // 2 - 1] + (v[k // 2] - v[k // 2 - 1]) / 2.0


def tied(a, best, pooled):
    floor = max(NOISE_FLOOR, pooled)
    ra, rb = max(floor, relative_spread(a)), max(floor, relative_spread(best))
    se = MEDIAN_EFFICIENCY * math.sqrt(ra * ra / max(a[0], 1) + rb * rb / max(best[0], 1))
    return a[3] <= best[3] * (1.0 + TIE_TOLERANCE + TIE_Z * se)


# ------------------------------------------------------------------ data

def pool_runs(rows):
    """rows: (schedule, count, mean, m2, median, uuid, time) -> {schedule: [count, mean, m2, median]} pooled as
    db/src/results.cpp does (Chan et al. in run-id order; the count-weighted mean of the runs' medians)."""
    out = {}
    for s, n, mean, m2, med, uuid, t in sorted(rows, key=lambda r: (r[0], r[5])):
        if s not in out:
            out[s] = [n, mean, m2, med]
            continue
        a = out[s]
        na, nb = a[0], n
        delta = mean - a[1]
        a[1] += delta * nb / (na + nb)
        a[2] += m2 + delta * delta * na * nb / (na + nb)
        a[3] += (med - a[3]) * nb / (na + nb)
        a[0] += n
    return out


def dataset_names():
    names = {}
    tsv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "datasets", "datasets.tsv")
    for path in (tsv, "/work/shared/datasets/datasets.tsv"):
        if os.path.exists(path):
            with open(path) as f:
                head = f.readline().rstrip("\n").split("\t")
                for line in f:
                    row = dict(zip(head, line.rstrip("\n").split("\t")))
                    try:
                        names[(int(row["nodes"]), int(row["edges"]))] = row["name"]
                    except (KeyError, ValueError):
                        pass
            break
    return names


def load_db(path):
    con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    rows = con.execute(
        "SELECT r.id, r.env_class, r.template_hash, r.library_version, r.model, r.dtype, r.heads, r.dim, "
        f"r.direction, r.{key_bits_column(con)}, f.hash, f.text, r.schedule, r.default_schedule FROM results r "
        "JOIN fingerprints f ON f.id = r.fingerprint_id WHERE r.schedule IS NOT NULL").fetchall()
    # One build of one GPU class: the largest group (a database may hold results of older builds).
    groups = {}
    for r in rows:
        groups.setdefault(r[1:4], []).append(r)
    if not groups:
        return {"graphs": {}, "cases": []}
    key = max(groups, key=lambda k: len(groups[k]))
    if len(groups) > 1:
        print(f"{path}: using {len(groups[key])} results of {key}, ignoring {len(rows) - len(groups[key])} of "
              "other builds", file=sys.stderr)
    names = dataset_names()
    graphs, cases = {}, []
    for r in groups[key]:
        fp = json.loads(r[11])
        if fp["num_nodes"] == 20000 and fp["max_degree"] >= 4000:
            continue  # bench/tune-site.sh's planted-hub warm-up graph
        cands = pool_runs(con.execute(
            "SELECT cs.schedule, cs.count, cs.mean_ms, cs.m2, cs.median_ms, ru.uuid, ru.unix_time "
            "FROM candidate_stats cs JOIN runs ru ON ru.id = cs.run_id WHERE ru.result_id = ?", (r[0],)).fetchall())
        cands = {s: c for s, c in cands.items() if c[0] >= 1 and c[3] > 0 and math.isfinite(c[3])}
        if not cands:
            continue
        graphs[r[10]] = {"name": names.get((fp["num_nodes"], fp["num_edges"]),
                                           f"n{fp['num_nodes']}-e{fp['num_edges']}"), "fingerprint": fp}
        cases.append({"op": list(r[4:10]), "graph": r[10], "winner": r[12], "default": r[13],
                      "pooled_spread": pooled_spread(cands.values()), "candidates": cands})
    return {"graphs": graphs, "cases": cases}


def load(paths):
    data = {"graphs": {}, "cases": []}
    seen = set()
    for p in paths:
        with open(p, "rb") as f:
            is_sqlite = f.read(16) == b"SQLite format 3\x00"
        if is_sqlite:
            part = load_db(p)
        else:
            with open(p) as f:
                part = expand(json.load(f))
        data.setdefault("sources", []).extend(part.get("sources") or [os.path.basename(p)])
        data["graphs"].update(part["graphs"])
        for c in part["cases"]:
            k = (tuple(c["op"]), c["graph"])
            if k not in seen:
                seen.add(k)
                data["cases"].append(c)
    return data


def compact(data):
    """The extract: per op only the schedules some graph could be dispatched (each graph's tie band, winner and
    default), each case's candidates as [schedule index, count, m2, median] (6 significant digits; the mean is
    not read) into the op's schedule list, and the pooled spread over every candidate kept per case."""
    keep = {}
    for c in data["cases"]:
        best = min(c["candidates"].values(), key=lambda x: x[3])
        k = keep.setdefault(tuple(c["op"]), set())
        k.update(s for s, x in c["candidates"].items() if tied(x, best, c["pooled_spread"]))
        k.update([c["winner"], c["default"]])
    r6 = lambda x: float(f"{x:.6g}")
    schedules = {json.dumps(list(op)): sorted(k) for op, k in keep.items()}
    cases = []
    for c in data["cases"]:
        texts = schedules[json.dumps(list(c["op"]))]
        cases.append({"op": c["op"], "graph": c["graph"], "winner": texts.index(c["winner"]),
                      "default": texts.index(c["default"]), "pooled_spread": r6(c["pooled_spread"]),
                      "candidates": [[texts.index(s), x[0], r6(x[2]), r6(x[3])]
                                     for s, x in sorted(c["candidates"].items()) if s in texts]})
    return {"format": 2, "sources": data.get("sources", []), "schedules": schedules, "graphs": data["graphs"],
            "cases": cases}


def expand(extract):
    """The extract's cases in the form load_db gives (mean 0: not read)."""
    if extract.get("format") != 2:
        return extract
    cases = []
    for c in extract["cases"]:
        texts = extract["schedules"][json.dumps(c["op"])]
        cases.append({"op": c["op"], "graph": c["graph"], "winner": texts[c["winner"]],
                      "default": texts[c["default"]], "pooled_spread": c["pooled_spread"],
                      "candidates": {texts[i]: [n, 0.0, m2, med] for i, n, m2, med in c["candidates"]}})
    return {"sources": extract.get("sources", []), "graphs": extract["graphs"], "cases": cases}


# ------------------------------------------------------------------ the nearest rule (mirror of nearest.cpp)

def rank(neighbours, radius, vote_radius):
    """neighbours: [(distance, graph id, case)], sorted by (distance, graph id), all within vote_radius.
    Returns the schedules to try, best first (empty: no answer)."""
    if not neighbours or neighbours[0][0] > radius:
        return []
    near = neighbours[0][2]
    best = min(near["candidates"].values(), key=lambda x: x[3])
    eligible = sorted({near["winner"]} | {s for s, x in near["candidates"].items()
                                          if tied(x, best, near["pooled_spread"])})
    votes = {s: [0.0, 0.0] for s in eligible}
    voters = 0
    for d, _, case in neighbours:
        own = min(x[3] for x in case["candidates"].values())
        w = math.exp(-d / radius) if radius > 0 else 1.0
        voted = False
        for s in eligible:
            x = case["candidates"].get(s)
            if x is not None:
                votes[s][0] += w * x[3] / own
                votes[s][1] += w
                voted = True
        voters += voted
    if voters <= 1:
        return [near["winner"]]
    return [s for _, s in sorted((v[0] / v[1] if v[1] > 0 else math.inf, s) for s, v in votes.items())]


class Problem:
    """Leave-one-graph-out evaluation, with the per-pair distance terms precomputed."""

    def __init__(self, data):
        self.data = data
        self.ids = sorted(data["graphs"])
        fps = [data["graphs"][g]["fingerprint"] for g in self.ids]
        self.index = {g: i for i, g in enumerate(self.ids)}
        self.t = [[terms(a, b) for b in fps] for a in fps]
        # A graph's other forms (the H100 file holds the datasets again with a self-loop per node) share its
        # node count: they leave with it, or the graph would answer for itself.
        nodes = [fp["num_nodes"] for fp in fps]
        self.same = [[x == y for y in nodes] for x in nodes]
        self.by_op = {}
        for c in data["cases"]:
            self.by_op.setdefault(tuple(c["op"]), []).append(c)

    def distances(self, w):
        wv = [w[t] for t in TERMS]
        return [[sum(x * y for x, y in zip(wv, row)) for row in line] for line in self.t]

    def nearest_distances(self, D, exclude=()):
        """Per graph, the distance to its nearest other graph (over graphs sharing an op with it)."""
        out = {}
        for cases in self.by_op.values():
            gs = [self.index[c["graph"]] for c in cases if c["graph"] not in exclude]
            for i in gs:
                others = [D[i][j] for j in gs if not self.same[i][j]]
                if others:
                    out[i] = min(out.get(i, math.inf), min(others))
        return out

    def evaluate(self, w, radius, vote_radius, exclude=(), only=None):
        """Per left-out case: (case, chosen schedule or None, speed vs own winner, default's speed, skipped)."""
        D = self.distances(w)
        results = []
        for op, cases in sorted(self.by_op.items()):
            pool = [c for c in cases if c["graph"] not in exclude]
            for c in pool:
                if only is not None and c["graph"] not in only:
                    continue
                i = self.index[c["graph"]]
                nb = sorted((D[i][self.index[o["graph"]]], o["graph"], o) for o in pool
                            if not self.same[i][self.index[o["graph"]]])
                nb = [x for x in nb if x[0] <= vote_radius]
                own = c["candidates"].get(c["winner"], min(c["candidates"].values(), key=lambda x: x[3]))[3]
                default = c["candidates"].get(c["default"])
                default_speed = own / default[3] if default else None
                chosen, skipped = None, 0
                for s in rank(nb, radius, vote_radius):
                    if s in c["candidates"]:
                        chosen = s
                        break
                    skipped += 1  # not measured on this graph: dispatch would try it, the replay cannot
                speed = own / c["candidates"][chosen][3] if chosen else None
                results.append((c, chosen, speed, default_speed, skipped, nb[0][0] if nb else None))
        return results


def radius_for(problem, w, target, exclude=()):
    near = sorted(problem.nearest_distances(problem.distances(w), exclude).values())
    if not near:
        return 0.0
    k = max(0, math.ceil(target * len(near)) - 1)
    return near[k] * 1.0001 + 1e-12  # just above the k-th nearest distance, so that graph answers


def score(results, speed_target):
    n = len(results)
    good = sum(1 for r in results if r[2] is not None and r[2] >= speed_target)
    combined = [r[2] if r[2] is not None else (r[3] or 1.0) for r in results]
    geo = math.exp(sum(math.log(x) for x in combined) / n) if n else 0.0
    return (good / n if n else 0.0, geo)


def summary(results, speed_target, names=None):
    """names: fingerprint id -> graph name (a directed graph's row and column fingerprints are one graph)."""
    n = len(results)
    name = (lambda g: names[g]) if names else (lambda g: g)
    graphs = {name(r[0]["graph"]) for r in results}
    # A graph is answered when every one of its (op, pass) cases is.
    answered_graphs = graphs - {name(r[0]["graph"]) for r in results if r[1] is None}
    ans = [r for r in results if r[1] is not None]
    speeds = [r[2] for r in ans]
    geo = lambda v: math.exp(sum(math.log(x) for x in v) / len(v)) if v else None
    combined = [r[2] if r[2] is not None else (r[3] or 1.0) for r in results]
    defaults = [r[3] for r in results if r[3]]
    return {"cases": n, "graphs": len(graphs), "answered_graphs": len(answered_graphs),
            "answered_cases": len(ans), "answer_rate": len(ans) / n if n else 0.0,
            "answers_reaching_speed_target": sum(1 for s in speeds if s >= speed_target),
            "share_reaching_speed_target": (sum(1 for s in speeds if s >= speed_target) / len(ans)) if ans else 0.0,
            "geomean_answer_speed": geo(speeds), "min_answer_speed": min(speeds) if speeds else None,
            "geomean_dispatch_speed": geo(combined), "geomean_default_speed": geo(defaults),
            "skipped_unmeasured": sum(r[4] for r in results)}


def fit(problem, args, exclude=()):
    """Coordinate search over GRID per term, from the baseline; the radius follows the weights."""
    w = dict(BASELINE)

    def objective(w):
        if all(w[t] == 0 for t in TERMS):
            return (-1.0, 0.0), 0.0
        r = radius_for(problem, w, args.answer_target, exclude)
        return score(problem.evaluate(w, r, args.vote_factor * r, exclude), args.speed_target), r

    best, radius = objective(w)
    for _ in range(args.passes):
        improved = False
        for t in TERMS:
            for v in GRID:
                if v == w[t]:
                    continue
                trial = dict(w, **{t: v})
                s, r = objective(trial)
                if s > best:
                    best, radius, w, improved = s, r, trial, True
        if not improved:
            break
    return w, radius, best


# ------------------------------------------------------------------ output

def inc_text(params):
    body = json.dumps(params, indent=1, sort_keys=False)
    return ("// Generated by tools/calibrate_nearest.py (rerun it to change): the nearest-fingerprint calibration,\n"
            "// a JSON document read by runtime/src/fingerprint.cpp. Data, not code.\n"
            f'R"json({body})json"\n')


def read_params(path):
    with open(path) as f:
        text = f.read()
    if path.endswith(".inc"):
        text = text[text.index('R"json(') + 7:text.rindex(')json"')]
    return json.loads(text)


def op_name(op):
    models = {0: "gat", 1: "gatv2", 2: "transformer", 3: "agnn"}
    dtypes = {0: "fp32", 1: "fp16", 2: "bf16", 3: "fp64"}
    passes = {0: "forward", 1: "backward-row", 2: "backward-col"}
    return f"{models.get(op[0], op[0])} {dtypes.get(op[1], op[1])} H{op[2]} D{op[3]} {passes.get(op[4], op[4])}"


def report_md(problem, params, results, base_results, nested, args, names):
    s, b = params["validation"], summary(base_results, args.speed_target, names)
    pct = lambda x: "n/a" if x is None else f"{100 * x:.0f}%"
    f3 = lambda x: "n/a" if x is None else f"{x:.3f}"
    lines = [f"# Nearest-fingerprint dispatch, calibrated by leave-one-graph-out\n",
             f"Made by `tools/calibrate_nearest.py calibrate {' '.join(args.sources)}`. "
             f"{s['graphs']} tuned graphs, {s['cases']} (graph, op, pass) cases. For each left-out graph the "
             "schedule dispatch picks from the other graphs is scored by its measured median on the left-out graph "
             "(its own candidate statistics) against the graph's own tuned winner: speed = own winner ms / chosen ms.\n",
             "| | radius | cases answered by a neighbour (graphs answered in every case) | answers >= "
             f"{args.speed_target:.0%} of own speed | geomean answer speed | min | geomean dispatch speed (default "
             "where no answer) | default rule alone |", "|---|---|---|---|---|---|---|---|"]
    for name, r, x in (("hand-set weights (before)", BASELINE_RADIUS, b), ("calibrated", params["radius"], s)):
        lines.append(f"| {name} | {r:.3f} | {x['answered_cases']}/{x['cases']} ({pct(x['answer_rate'])}; "
                     f"{x['answered_graphs']}/{x['graphs']}) | "
                     f"{x['answers_reaching_speed_target']}/{x['answered_cases']} "
                     f"({pct(x['share_reaching_speed_target'])}) | {f3(x['geomean_answer_speed'])} | "
                     f"{f3(x['min_answer_speed'])} | {f3(x['geomean_dispatch_speed'])} | "
                     f"{f3(x['geomean_default_speed'])} |")
    if nested:
        lines.append(f"| nested (weights and radius refitted without the left-out graph) | per graph | "
                     f"{nested['answered_cases']}/{nested['cases']} ({pct(nested['answer_rate'])}; "
                     f"{nested['answered_graphs']}/{nested['graphs']}) | "
                     f"{nested['answers_reaching_speed_target']}/{nested['answered_cases']} "
                     f"({pct(nested['share_reaching_speed_target'])}) | {f3(nested['geomean_answer_speed'])} | "
                     f"{f3(nested['min_answer_speed'])} | {f3(nested['geomean_dispatch_speed'])} | "
                     f"{f3(nested['geomean_default_speed'])} |")
    lines += ["", "Weights (distance = sum of weight x term; L(x) = log2(1 + x)):", "",
              "| term | before | calibrated |", "|---|---|---|"]
    lines += [f"| {t} | {BASELINE[t]} | {params['weights'][t]} |" for t in TERMS]
    lines += ["", "## Per case (calibrated)", "",
              "| graph | op | nearest distance | chosen | speed | default's speed |", "|---|---|---|---|---|---|"]
    for c, chosen, speed, dspeed, _, d in sorted(results, key=lambda r: (problem.data["graphs"][r[0]["graph"]]["name"],
                                                                          r[0]["op"])):
        lines.append(f"| {problem.data['graphs'][c['graph']]['name']} | {op_name(c['op'])} | {f3(d)} | "
                     f"{'default rule' if chosen is None else chosen} | {f3(speed)} | {f3(dspeed)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract")
    e.add_argument("sources", nargs="+")
    e.add_argument("-o", "--output", required=True)
    e.add_argument("--label", help="what the databases are (recorded as the extract's source)")
    c = sub.add_parser("calibrate")
    c.add_argument("sources", nargs="+")
    c.add_argument("--answer-target", type=float, default=0.9)
    c.add_argument("--speed-target", type=float, default=0.9)
    c.add_argument("--vote-factor", type=float, default=2.0, help="neighbours voting: within this x radius")
    c.add_argument("--passes", type=int, default=3)
    c.add_argument("--nested", action="store_true", help="also refit without each graph (slow)")
    c.add_argument("--subsets", type=int, default=0, help="also evaluate on this many random smaller databases")
    c.add_argument("--subset-size", type=int, default=16)
    c.add_argument("--write-inc")
    c.add_argument("--report")
    c.add_argument("--json")
    v = sub.add_parser("evaluate")
    v.add_argument("sources", nargs="+")
    v.add_argument("--params", required=True)
    v.add_argument("--predictions", required=True)
    args = ap.parse_args()

    data = load(args.sources)
    if args.cmd == "extract":
        if args.label:
            data["sources"] = [args.label]
        with open(args.output, "w") as f:
            json.dump(compact(data), f, separators=(",", ":"))
            f.write("\n")
        print(f"{args.output}: {len(data['graphs'])} graphs, {len(data['cases'])} cases")
        return 0
    problem = Problem(data)
    if args.cmd == "evaluate":
        p = read_params(args.params)
        D = problem.distances(p["weights"])
        out = {"distances": [[problem.ids[i], problem.ids[j], D[i][j]] for i in range(len(problem.ids))
                             for j in range(i + 1, len(problem.ids))],
               "predictions": [{"op": r[0]["op"], "graph": r[0]["graph"], "chosen": r[1]}
                               for r in problem.evaluate(p["weights"], p["radius"], p["vote_factor"] * p["radius"])]}
        with open(args.predictions, "w") as f:  # one entry a line
            f.write("{\n")
            for i, key in enumerate(("distances", "predictions")):
                rows = ",\n  ".join(json.dumps(x, sort_keys=True) for x in out[key])
                f.write(f' "{key}": [\n  {rows}\n ]{"," if i == 0 else ""}\n')
            f.write("}\n")
        return 0
    if len(problem.ids) < 2:
        print("calibrate: need at least two tuned graphs", file=sys.stderr)
        return 1
    names = {g: data["graphs"][g]["name"] for g in problem.ids}
    w, radius, best = fit(problem, args)
    results = problem.evaluate(w, radius, args.vote_factor * radius)
    base = problem.evaluate(BASELINE, BASELINE_RADIUS, args.vote_factor * BASELINE_RADIUS)
    subsets = None
    if args.subsets:
        # Smaller databases: random subsets of --subset-size graphs (so each left-out graph sees one fewer),
        # under the fitted parameters.
        rng = random.Random(1)
        all_names = sorted(set(names.values()))
        rows = []
        for _ in range(args.subsets):
            keep = set(rng.sample(all_names, min(args.subset_size, len(all_names))))
            ex = {g for g in problem.ids if names[g] not in keep}
            rows.append(summary(problem.evaluate(w, radius, args.vote_factor * radius, exclude=ex),
                                args.speed_target, names))
        subsets = {"subsets": args.subsets, "graphs_each": args.subset_size,
                   "answer_rate_mean": sum(r["answer_rate"] for r in rows) / len(rows),
                   "answer_rate_min": min(r["answer_rate"] for r in rows),
                   "share_reaching_speed_target_mean": sum(r["share_reaching_speed_target"] for r in rows) / len(rows),
                   "share_reaching_speed_target_min": min(r["share_reaching_speed_target"] for r in rows),
                   "geomean_dispatch_speed_mean": sum(r["geomean_dispatch_speed"] for r in rows) / len(rows)}
    nested = None
    if args.nested:
        rows = []
        for name in sorted(set(names.values())):
            ids = {g for g in problem.ids if names[g] == name}  # a directed graph: both its fingerprints
            wg, rg, _ = fit(problem, args, exclude=ids)
            rows += problem.evaluate(wg, rg, args.vote_factor * rg, only=ids)
        nested = summary(rows, args.speed_target, names)
    params = {"format": 1, "terms": TERMS, "weights": w, "radius": radius, "vote_factor": args.vote_factor,
              "fitted_on": {"sources": data["sources"],
                            "graphs": len(set(names.values())), "fingerprints": len(problem.ids),
                            "cases": len(data["cases"]), "answer_target": args.answer_target,
                            "speed_target": args.speed_target},
              "validation": summary(results, args.speed_target, names)}
    if nested:
        params["validation_nested"] = nested
    if subsets:
        params["validation_subsets"] = subsets
    print(json.dumps({k: params[k] for k in ("weights", "radius", "validation")}, indent=1))
    if args.write_inc:
        with open(args.write_inc, "w") as f:
            f.write(inc_text(params))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"params": params, "baseline": summary(base, args.speed_target, names),
                       "cases": [{"graph": problem.data["graphs"][r[0]["graph"]]["name"], "op": r[0]["op"],
                                  "chosen": r[1], "speed": r[2], "default_speed": r[3], "nearest_distance": r[5]}
                                 for r in results]}, f, indent=1)
            f.write("\n")
    if args.report:
        with open(args.report, "w") as f:
            f.write(report_md(problem, params, results, base, nested, args, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
