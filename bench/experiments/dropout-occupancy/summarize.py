"""Tables of run.sh's output: per case, schedule and direction, each tree's time without and with
dropout 0.6 (dfgnn-bench medians, CUDA events), dropout's cost in each tree, and the new tree's time
with dropout over the base's; medians over the A/B rounds. Then ncu's rows kernels, if any (tree new0:
this tree without dropout).
Usage: python3 summarize.py OUTDIR [--json FILE]"""
import csv
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
cases = [line.split("|") for line in open("bench/ab-dropout.txt") if line.strip() and not line.startswith("#")]
times = {}  # (k, schedule, direction, tree, p) -> [ms]
for p in ("0", "6"):
    for rnd in sorted(glob.glob(f"{out}/p{p}?")):
        for path in glob.glob(f"{rnd}/ab-*-*.json"):
            tree, k = os.path.basename(path)[3:-5].split("-")
            doc = json.load(open(path))
            for g in doc.get("graphs", []):
                for row in g.get("results", []):  # dfgnn-bench's JSON
                    key = (int(k), row["schedule"], row["direction"], tree, p)
                    times.setdefault(key, []).append(row["median_ms"])
med = {k: statistics.median(v) for k, v in times.items()}
number = lambda text: float(str(text).replace(",", ""))  # ncu's CSV groups thousands
rows = []
print("| graph | op | schedule | pass | base ms | +dropout | cost | new ms | +dropout | cost | new/base with dropout |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for (k, sched, direction) in sorted({key[:3] for key in med}):
    g = lambda tree, p: med.get((k, sched, direction, tree, p), float("nan"))
    b0, b6, n0, n6 = g("base", "0"), g("base", "6"), g("new", "0"), g("new", "6")
    if any(x != x for x in (b0, b6, n0, n6)):
        continue  # a default pair that only one tree chose
    graph, op = cases[k - 1][0].strip(), cases[k - 1][1].strip()
    short = sched.split(",threshold")[0].replace(",team=1", "")
    print(f"| {graph} | {op} | `{short}` | {direction} | {b0:.4f} | {b6:.4f} | {b6 / b0:.2f} | {n0:.4f} | {n6:.4f} | "
          f"{n6 / n0:.2f} | {n6 / b6:.2f} |")
    rows.append(dict(graph=graph, op=op, schedule=sched, direction=direction, base_ms=b0, base_dropout_ms=b6,
                     new_ms=n0, new_dropout_ms=n6, rounds=len(times.get((k, sched, direction, "new", "6"), []))))
ncu = []
for path in sorted(glob.glob(f"{out}/ncu-*.csv")):
    tree, shape = os.path.basename(path)[4:-4].split("-")
    lines = [l for l in open(path) if l.startswith('"')]
    by = {}
    for r in csv.DictReader(lines):
        by.setdefault((r["ID"], r["Kernel Name"]), {})[r["Metric Name"]] = r["Metric Value"]
    for (i, name), m in by.items():
        ncu.append(dict(tree=tree, shape=shape, launch=int(i), kernel=name[:90], **m))
if ncu:
    print("\n| tree | shape | launch | kernel | us | registers | warps active % | instructions | issue active % | DRAM MB |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in ncu:
        print(f"| {r['tree']} | {r['shape']} | {r['launch']} | `{r['kernel'][:60]}` | "
              f"{number(r.get('gpu__time_duration.sum', 'nan')) / 1e3:.1f} | {r.get('launch__registers_per_thread')} | "
              f"{r.get('sm__warps_active.avg.pct_of_peak_sustained_active')} | {r.get('smsp__inst_executed.sum')} | "
              f"{r.get('smsp__issue_active.avg.pct_of_peak_sustained_active', '')} | "
              f"{number(r['dram__bytes.sum']) / 1e6 if 'dram__bytes.sum' in r else float('nan'):.1f} |")
if len(sys.argv) > 3 and sys.argv[2] == "--json":
    json.dump({"ab": rows, "ncu": ncu}, open(sys.argv[3], "w"), indent=1)
