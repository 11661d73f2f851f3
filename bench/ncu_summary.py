# Summarises an Nsight Compute --csv report (one row per kernel x metric, possibly interleaved with the
# profiled program's own output): per kernel launch, its metrics on one line, warp-stall metrics left out.
# Usage: python3 bench/ncu_summary.py REPORT.csv
import csv, sys, collections
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.reader(lines))
head = rows[0]; col = {n: i for i, n in enumerate(head)}
by = collections.OrderedDict()
for r in rows[1:]:
    key = (r[col["ID"]], r[col["Kernel Name"]][:100])
    by.setdefault(key, {})[(r[col["Metric Name"]], r[col["Metric Unit"]])] = r[col["Metric Value"]]
for (kid, name), m in by.items():
    print(kid, name)
    plain = {k[0].split("__",1)[-1][:38]+("["+k[1]+"]" if k[1] else ""): v for k, v in m.items() if "stall" not in k[0].lower() and "Warp Cycles" not in k[0] and not k[0].startswith("smsp__pcsamp")}
    print("   ", plain)
