# Table of bench/experiments/empty-run/run.sh: per case, schedule and direction, the median over rounds of each
# variant's median ms, and each variant's ratio to the first.
import glob, json, statistics, sys, collections
out, variants = sys.argv[1], sys.argv[2:]
cases = {}
for line in open(f"{out}/cases.tsv"):
    k, graph, config, sched = line.rstrip("\n").split("\t")
    cases[k] = (graph.replace("--graph .bench-data/", ""), config)
t = collections.defaultdict(list)
for path in glob.glob(f"{out}/r*-*-*.json"):
    name = path.rsplit("/", 1)[1][:-5]
    r, k, v = name.split("-", 2)
    try:
        data = json.load(open(path))
    except ValueError:
        continue
    for g in data.get("graphs", []):
        for row in g["results"]:
            if row.get("median_ms") is not None:
                t[(k, row["schedule"], row["direction"], v)].append(row["median_ms"])
print("| graph | op | schedule | dir | " + " | ".join(f"{v} ms" for v in variants) + " | " +
      " | ".join(f"{v}/{variants[0]}" for v in variants[1:]) + " |")
print("|---|---|---|---|" + "---:|" * (2 * len(variants) - 1))
keys = sorted({(k, s, d) for (k, s, d, v) in t}, key=lambda x: (int(x[0]), x[1], x[2]))
for k, s, d in keys:
    med = [statistics.median(t[(k, s, d, v)]) if t.get((k, s, d, v)) else None for v in variants]
    ratio = [f"{m / med[0]:.3f}" if m and med[0] else "" for m in med[1:]]
    cells = [f"{m:.4f}" if m else "" for m in med]
    print(f"| {cases[k][0]} | {cases[k][1]} | `{s}` | {d} | " + " | ".join(cells) + " | " + " | ".join(ratio) + " |")
