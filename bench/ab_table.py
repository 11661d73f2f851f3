# Table of an A/B run (bench/ab-compare.sh): per configuration and direction, the base and new
# medians and new/base. Usage: python3 bench/ab_table.py OUTDIR COUNT
import json
import sys

out, count = sys.argv[1], int(sys.argv[2])
print("| model | H | D | direction | base ms | new ms | new/base | base schedule | new schedule |")
print("|---|---:|---:|---|---:|---:|---:|---|---|")
for k in range(1, count + 1):
    rows = {}
    for v in ("base", "new"):
        try:
            data = json.load(open(f"{out}/ab-{v}-{k}.json"))
        except (OSError, ValueError) as e:
            print(f"| run {k} {v}: no results ({e}) |")
            continue
        for g in data["graphs"]:
            for r in g["results"]:
                if r.get("is_default"):
                    rows.setdefault((r["model"], r["heads"], r["dim"], r["direction"]), {})[v] = r
    for (model, h, d, direction), pair in rows.items():
        if len(pair) < 2:
            continue
        b, n = pair["base"]["median_ms"], pair["new"]["median_ms"]
        print(f"| {model} | {h} | {d} | {direction} | {b:.3f} | {n:.3f} | {n / b:.3f} | "
              f"{pair['base']['schedule']} | {pair['new']['schedule']} |")
