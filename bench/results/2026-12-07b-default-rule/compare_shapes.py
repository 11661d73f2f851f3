#!/usr/bin/env python3
"""The op shapes a sweep added to the fit (here the H100's three), scored leave-one-graph-out by a rule
fitted without them (the other shapes' cases of the other graphs: the rule before pooling) and by
the pooled fit (the report's own validation). Usage, from the repository root:
  python3 bench/results/2026-12-07b-default-rule/compare_shapes.py tests/data/default_rule_cases.json \\
      bench/results/2026-12-07b-default-rule.json "gat H4 D16 fp32" "gat H1 D64 fp32" "transformer H2 D64 fp32"
Prints a Markdown table (about 5 minutes on two cores: one fit per left-out graph)."""
import collections
import importlib.util
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("fit", ROOT / "tools" / "fit_default_rule.py")
fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fit)

cases, _ = fit.read_cases(sys.argv[1])
pooled = {r["shape"]: r["fitted"] for r in json.load(open(sys.argv[2]))["validation"]["per_shape"]}
added = set(sys.argv[3:])
params = dict(fit.DEFAULT_PARAMS)
old = [c for c in cases if fit.shape_label(c["op"]) not in added]
new = [c for c in cases if fit.shape_label(c["op"]) in added]
without = collections.defaultdict(list)
for g in sorted({c["graph"] for c in new}):
    train = [c for c in old if c["graph"] != g]
    nodes = fit.fit_rule(train, params, fit.DEFAULT_VARIANT)
    domain = fit.max_log2_edges(train)
    for c in new:
        if c["graph"] == g:
            r = fit.rule_regret(nodes, c, params["regret_cap"], domain)
            without[fit.shape_label(c["op"])].append(r)
            without["all added shapes"].append(r)
print("| shape | cases | fitted without them: within 10% | geomean | pooled fit: within 10% | geomean |")
print("|---|---:|---:|---:|---:|---:|")
for shape in sorted(without):
    w = fit.summarise(without[shape])
    if shape in pooled:
        p = pooled[shape]
    else:  # all added shapes: weighted over them
        rows = [pooled[s] for s in added]
        n = sum(r["cases"] for r in rows)
        p = {"within_10pct": sum(r["within_10pct"] * r["cases"] for r in rows) / n,
             "geomean_regret": math.exp(sum(math.log(r["geomean_regret"]) * r["cases"] for r in rows) / n)}
    print(f"| {shape} | {w['cases']} | {100 * w['within_10pct']:.1f}% | {w['geomean_regret']:.3f} | "
          f"{100 * p['within_10pct']:.1f}% | {p['geomean_regret']:.3f} |")
