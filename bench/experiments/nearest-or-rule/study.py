#!/usr/bin/env python3
"""Nearest answer or the default rule, for a graph nobody tuned: a leave-one-graph-out study on the
shipped databases' own measurements (no GPU). For every (graph, op, pass) of the sweeps, with that
graph left out, it replays what dispatch would run under several policies and scores each by the
tuner's median of that schedule on the left-out graph over the graph's best:

  nearest   what dispatch does now: the nearest tuned graph's answer within the radius, else the rule
  rule      the fitted default rule alone (refitted without the graph)
  oracle    the better of the two (a bound, not a policy)
  race3     the best of the rule's choice and the nearest ranking's first two (what a race of three
            schedules on the user's own graph would find, at best)
  vote      the nearest graphs vote (as nearest.cpp ranks) over the nearest's tie band together with the
            rule's schedule: the rule's choice competes on the neighbours' measurements
  near<F>   nearest only within F x the calibrated radius (and votes within F x its vote radius), else
            the rule; near_any: the nearest at any distance

Only the rule's extract's cases (--cases) are scored; every graph of the --db files may answer, so a
database of further tuned graphs added to --db shows what they would add as neighbours.

A graph's other forms (the same node count: the H100 file holds the datasets again with a self-loop
per node) leave with it, as in tools/calibrate_nearest.py.

Usage (numpy, as tools/fit_default_rule.py):
  study.py [--db data/tuning/sm90.db data/tuning/sm90-h100.db] [--cases tests/data/default_rule_cases.json]
           [--rule-cache /tmp/rule-picks.json] [--show N]
"""
import argparse
import json
import math
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))
import calibrate_nearest as cn  # noqa: E402
import fit_default_rule as fr  # noqa: E402

POLICIES = ["nearest", "rule", "oracle", "race3", "vote", "near0.25", "near0.5", "near0.75", "near1.5", "near2", "near_any"]


def key_of(op, fp):
    return (op[0], op[1], op[2], op[3], op[4], op[5], fp["num_nodes"], fp["num_edges"], fp["max_degree"])


def rule_picks(path):
    """Per case key: (graph name, the text the rule refitted without that graph runs there)."""
    cases, _ = fr.read_cases(path)
    out = {}
    for g in sorted({c["graph"] for c in cases}):
        train = [c for c in cases if c["graph"] != g]
        nodes = fr.fit_rule(train, fr.DEFAULT_PARAMS)
        domain = fr.max_log2_edges(train)
        for c in (c for c in cases if c["graph"] == g):
            o = c["op"]
            k = key_of([o["model"], o["dtype"], o["heads"], o["dim"], o["pass"], o["variant"]], c["fp"])
            texts = ([c["default"]] if fr.beyond_domain(c, domain) else
                     [t for t in fr.walk(nodes, c["fp"], c["op"])["schedules"] if t in c["times"]] or [c["default"]])
            out[k] = (g, texts[0])
    return out


def vote_rank(nb, radius, extra):
    """nearest.cpp's ranking, with extra (the rule's text) added to the nearest's tie band."""
    near = nb[0][2]
    best = min(near["candidates"].values(), key=lambda x: x[3])
    eligible = {near["winner"], extra} | {s for s, x in near["candidates"].items()
                                          if cn.tied(x, best, near["pooled_spread"])}
    votes = {s: [0.0, 0.0] for s in eligible}
    for d, _, case in nb:
        own = min(x[3] for x in case["candidates"].values())
        w = math.exp(-d / radius) if radius > 0 else 1.0
        for s in eligible:
            x = case["candidates"].get(s)
            if x is not None:
                votes[s][0] += w * x[3] / own
                votes[s][1] += w
    return [s for _, s in sorted((v[0] / v[1] if v[1] > 0 else math.inf, s) for s, v in votes.items())]


def nearest_within(nb, radius, vote_radius, case, own):
    """The nearest ranking's first schedule measured on the case, with another radius (None: no answer)."""
    nb = [x for x in nb if x[0] <= vote_radius]
    if not nb or nb[0][0] > radius:
        return None
    s = next((s for s in cn.rank(nb, radius if math.isfinite(radius) else 1e9, vote_radius) if s in case["candidates"]), None)
    return case["candidates"][s][3] / own if s else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", nargs="+",
                    default=[str(REPO / "data/tuning/sm90.db"), str(REPO / "data/tuning/sm90-h100.db")])
    ap.add_argument("--cases", default=str(REPO / "tests/data/default_rule_cases.json"))
    ap.add_argument("--params", default=str(REPO / "runtime/src/nearest_calibration.inc"))
    ap.add_argument("--rule-cache", help="keep the rule's leave-one-out picks here (the refits take minutes)")
    ap.add_argument("--show", type=int, default=0, help="print the N worst cases of the current policy")
    args = ap.parse_args()

    cache = pathlib.Path(args.rule_cache) if args.rule_cache else None
    if cache and cache.exists():
        rule_pick = {tuple(k): tuple(v) for k, v in json.loads(cache.read_text())}
    else:
        rule_pick = rule_picks(args.cases)
        if cache:
            cache.write_text(json.dumps([[list(k), list(v)] for k, v in rule_pick.items()]))

    data = cn.load(args.db)
    p = cn.read_params(args.params)
    w, radius = p["weights"], p["radius"]
    vote_radius = radius * p.get("vote_factor", 2.0)
    prob = cn.Problem(data)
    D = prob.distances(w)
    fps = {g: data["graphs"][g]["fingerprint"] for g in data["graphs"]}
    rows = []
    for op, group in sorted(prob.by_op.items()):
        for c in group:
            fp = fps[c["graph"]]
            k = key_of(list(op), fp)
            if k not in rule_pick:
                continue
            name, rule_text = rule_pick[k]
            i = prob.index[c["graph"]]
            nb = sorted((D[i][prob.index[o["graph"]]], o["graph"], o) for o in group
                        if not prob.same[i][prob.index[o["graph"]]])  # its other forms leave with it
            nb_all = nb
            nb = [x for x in nb if x[0] <= vote_radius]
            own = min(x[3] for x in c["candidates"].values())
            t = lambda s: c["candidates"][s][3] / own if s in c["candidates"] else None
            first = lambda ranked: next((s for s in ranked if s in c["candidates"]), None)
            rule = t(rule_text)
            if rule is None:
                continue
            answered = bool(nb) and nb[0][0] <= radius
            ranked = [s for s in cn.rank(nb, radius, vote_radius) if s in c["candidates"]] if answered else []
            row = {"graph": name, "op": op, "d": nb[0][0] if nb else None, "rule": rule,
                   "nearest": t(ranked[0]) if ranked else rule}
            row["oracle"] = min(row["nearest"], rule)
            row["race3"] = min([rule] + [t(s) for s in ranked[:2]])
            v = first(vote_rank(nb, radius, rule_text)) if answered else None
            row["vote"] = t(v) if v else rule
            for f in (0.25, 0.5, 0.75, 1.5, 2):
                row[f"near{f}"] = nearest_within(nb_all, f * radius, f * vote_radius, c, own) or rule
            row["near_any"] = nearest_within(nb_all, math.inf, math.inf, c, own) or rule
            rows.append(row)

    print(f"{len(rows)} cases, {len({r['graph'] for r in rows})} graphs, radius {radius:.2f}")
    print("| policy | within 10% | geomean | worst | cases > 1.25x |")
    print("|---|---:|---:|---:|---:|")
    for pol in POLICIES:
        v = [r[pol] for r in rows]
        print(f"| {pol} | {sum(x <= 1.10 for x in v) / len(v):.1%} | {math.exp(sum(map(math.log, v)) / len(v)):.3f} | "
              f"{max(v):.2f} | {sum(x > 1.25 for x in v)} |")
    print("\n| left-out graph | cases | nearest distance | nearest within 10% | rule within 10% | race3 within 10% |")
    print("|---|---:|---:|---:|---:|---:|")
    for g in sorted({r["graph"] for r in rows}, key=lambda g: (sum(r["nearest"] <= 1.1 for r in rows if r["graph"] == g)
                    / sum(1 for r in rows if r["graph"] == g), g)):
        rs = [r for r in rows if r["graph"] == g]
        share = lambda pol: sum(r[pol] <= 1.10 for r in rs) / len(rs)
        ds = [r["d"] for r in rs if r["d"] is not None]
        print(f"| {g} | {len(rs)} | {min(ds) if ds else math.inf:.2f} | {share('nearest'):.0%} | {share('rule'):.0%} | "
              f"{share('race3'):.0%} |")
    for r in sorted(rows, key=lambda r: -r["nearest"])[:args.show]:
        print(r["graph"], r["op"], f"d={r['d']:.2f}" if r["d"] is not None else "d=-",
              {k: round(r[k], 3) for k in POLICIES})


if __name__ == "__main__":
    main()
