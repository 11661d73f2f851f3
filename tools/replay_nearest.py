#!/usr/bin/env python3
"""Replays nearest-fingerprint dispatch offline on measured data: the candidate statistics a tuning run
stored (tuned-candidates.json, exported from its database) and an exhaustive dfgnn-bench sweep of other
graphs (tune-sweep.json.gz). For every swept graph that was not tuned, it picks a forward schedule with
(a) the nearest tuned graph's winner and (b) the vote of runtime/src/dispatch.cpp (eligible: the nearest
graph's winner and its candidates within 4% of its best; the tuned graphs within twice the radius rate
them by slowdown over their own best, weighted by exp(-distance); the lowest weighted mean wins; with a
single voter its winner stands), and prints each choice's swept time over the swept best. Needs the dfgnn package (fingerprints) and the graphs' files.

Usage: tools/replay_nearest.py RESULTS_DIR [--radius 2.0] [--data .bench-data]"""
import argparse
import gzip
import json
import math
import os

import dfgnn


def graph_of(name, data, repo):
    if name.startswith("rmat-s"):
        scale = int(name.split("-s")[1].split("-")[0])
        edges = int(name.split("-e")[1].split("-")[0])
        seed = int(name.split("seed")[1])
        return dfgnn.Graph.rmat(scale, edges, seed=seed, permute=True)
    path = name if os.path.isabs(name) else os.path.join(repo, name)
    if not os.path.exists(path):
        path = os.path.join(data, os.path.basename(name))
    return dfgnn.Graph.from_file(path)


def choose(fp, tuned, radius, vote):
    near = sorted((dfgnn.fingerprint_distance(fp, t["fingerprint"]), i) for i, t in enumerate(tuned))
    near = [(d, tuned[i]) for d, i in near if d <= 2 * radius]
    if not near or near[0][0] > radius:
        return None, None
    if not vote:
        return near[0][1]["winner"], near[0][0]

    def slowdowns(t):
        best = min(c["median_ms"] for c in t["candidates"] if c["median_ms"] > 0)
        return {c["schedule"]: c["median_ms"] / best for c in t["candidates"] if c["median_ms"] > 0}

    nearest = slowdowns(near[0][1])
    eligible = {near[0][1]["winner"]} | {s for s, x in nearest.items() if x <= 1.04}
    score, weight, voters = {}, {}, 0
    for d, t in near:
        rated = slowdowns(t)
        voted = False
        for s in eligible:
            if s in rated:
                score[s] = score.get(s, 0.0) + math.exp(-d) * rated[s]
                weight[s] = weight.get(s, 0.0) + math.exp(-d)
                voted = True
        voters += voted
    if voters <= 1:
        return near[0][1]["winner"], near[0][0]
    return min((score[s] / weight[s], s) for s in score)[1], near[0][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--radius", type=float, default=2.0)
    ap.add_argument("--data", default=".bench-data")
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tuned = [t for t in json.load(open(os.path.join(a.results, "tuned-candidates.json"))) if t["direction"] == 0]
    sweep = json.load(gzip.open(os.path.join(a.results, "tune-sweep.json.gz")))
    tuned_sizes = {(t["fingerprint"]["num_nodes"], t["fingerprint"]["num_edges"]) for t in tuned}
    print(f"{'graph':28} {'distance':>8} {'nearest winner':>15} {'vote':>6}   (swept best / chosen, forward)")
    for g in sweep["graphs"]:
        if (g["nodes"], g["edges"]) in tuned_sizes:
            continue
        fp = graph_of(g["name"], a.data, repo).fingerprint
        times = {}
        for r in g["results"]:
            if r["direction"] == "forward" and r.get("median_ms"):
                times.setdefault(r["schedule"], r["median_ms"])
        best = min(times.values())
        cells = []
        for vote in (False, True):
            s, d = choose(fp, tuned, a.radius, vote)
            cells.append("default" if s is None else f"{best / times[s]:.3f}" if s in times else "n/a")
        print(f"{g['name'][-28:]:28} {d if d is not None else float('nan'):8.3f} {cells[0]:>15} {cells[1]:>6}")


if __name__ == "__main__":
    main()
