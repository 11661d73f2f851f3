"""The H100's answers from the shipped files before the self-loop sweep (old_answers.sh: nearest, for
the datasets with self-loops) timed by that sweep's own dfgnn-tune reports (tune-*.json, not
committed: 30 MB), against its winners. Usage: old_answers_regret.py old-answers.jsonl [passes.json]"""
import json, glob, statistics, collections, sys
models = {"0": "gat", "1": "gatv2", "2": "transformer", "3": "agnn"}
timed = {}   # (config, graph, pass) -> {schedule: ms}, winner
for path in glob.glob("" + (sys.argv[3] if len(sys.argv) > 3 else "/tmp/sw") + "/s[12]/tune-*-float32-*.json"):
    d = json.load(open(path))
    for p in d["problems"]:
        g = p["graph"].split("/")[-1].replace("+loops", "")
        cfg = f'{p["model"]}:{p["heads"]}:{p["dim"]}'
        for r in p["report"] or []:
            ms = {t["schedule"]: t["median_ms"] for t in r["timed"] if t.get("status") == "measured"}
            timed[(cfg, g, r["pass"])] = (ms, r["winner"], r["winner_median_ms"], r["default"], r["default_median_ms"])
rows = []
for line in open(sys.argv[1]):
    j = json.loads(line)
    m, h, dim = j["config"].split()
    cfg = f"{models[m]}:{h}:{dim}"
    for a in j["answers"]:
        k = (cfg, j["graph"], a["pass"])
        if k not in timed: continue
        ms, win, win_ms, dflt, dflt_ms = timed[k]
        old = ms.get(a["schedule"])
        rows.append((cfg, j["graph"], a["pass"], a["origin"], old / win_ms if old else None, dflt_ms / win_ms,
                     a["schedule"], old, win, win_ms))
known = [r for r in rows if r[4] is not None]
print(f"{len(rows)} passes; old answer timed in the new sweep: {len(known)}")
print(f"old answer within 10% of the self-loop winner: {sum(r[4] <= 1.10 for r in known)}/{len(known)} "
      f"({100*sum(r[4] <= 1.10 for r in known)/len(known):.0f}%), geomean {statistics.geometric_mean([r[4] for r in known]):.3f}, "
      f"worst {max(r[4] for r in known):.2f}")
print("origins:", collections.Counter(r[3] for r in rows))
byc = collections.defaultdict(list)
for r in known: byc[r[0]].append(r[4])
print("| config | passes | within 10% | geomean old/new | worst |\n|---|---:|---:|---:|---:|")
for c, v in sorted(byc.items()):
    print(f"| {c} | {len(v)} | {sum(x <= 1.1 for x in v)} | {statistics.geometric_mean(v):.3f} | {max(v):.2f} |")
worst = sorted(known, key=lambda r: -r[4])[:8]
print("worst:", [(r[0], r[1], r[2], round(r[4], 2)) for r in worst])
if len(sys.argv) > 2:
    keys = ("config", "graph", "pass", "old_origin", "old_over_winner", "hand_rule_over_winner", "old_schedule",
            "old_ms", "winner", "winner_ms")
    json.dump([dict(zip(keys, r)) for r in rows], open(sys.argv[2], "w"), indent=0)
