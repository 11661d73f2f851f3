# Tables of an A/B run (bench/ab-compare.sh): per configuration and direction, the base and new
# medians and new/base; with --dispatch, the tuned winners and the dispatch timings of each version.
# Usage: python3 bench/ab_table.py OUTDIR COUNT | python3 bench/ab_table.py --dispatch OUTDIR
import json
import statistics
import sys


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"- {path}: no results ({e})")
        return None


def found(node, name):
    """Every value of the key name in a JSON tree, in document order (a backward has one per pass)."""
    if isinstance(node, dict):
        return [str(v) for k, v in node.items() if k == name] + [x for k, v in node.items() if k != name
                                                                 for x in found(v, name)]
    if isinstance(node, list):
        return [x for v in node for x in found(v, name)]
    return []


def dispatch(out):
    """Winners of each version's tuning of Cora, then first-launch (3 fresh processes, median) and
    host time per warm call, base against new."""
    print("\n| problem | base winner | new winner |\n|---|---|---|")
    winners = {}
    for v in ("base", "new"):
        data = load(f"{out}/ab-tune-{v}.json") or []
        for p in data if isinstance(data, list) else data.get("problems", []):
            key = " ".join(str(p.get(k, "")) for k in ("graph", "model", "dtype", "direction"))
            winners.setdefault(key, {})[v] = " ; ".join(found(p.get("report"), "winner")) or p.get("status")
    for key, w in winners.items():
        print(f"| {key} | {w.get('base')} | {w.get('new')} |")
    print("\n| dispatch figure | base | new | new/base |\n|---|---:|---:|---:|")
    rows = {}
    for v in ("base", "new"):
        firsts = [d for d in (load(f"{out}/ab-first-{v}-{r}.json") for r in (1, 2, 3)) if d]
        for k in ("first_launch_added_ms", "workspace_sizing_and_buffers_ms", "steady_forward_ms", "steady_backward_ms"):
            if firsts:
                rows.setdefault(k, {})[v] = statistics.median(d[k] for d in firsts)
        over = load(f"{out}/ab-overhead-{v}.json")
        for d in ("forward", "backward"):
            if over:
                rows.setdefault(f"{d} call us (host, warm)", {})[v] = over[d]["call_us"]
                rows.setdefault(f"{d} dfgnn's own us", {})[v] = over[d]["dfgnn_us"]
    for k, r in rows.items():
        if "base" in r and "new" in r:
            ratio = r["new"] / r["base"] if r["base"] else float("nan")
            print(f"| {k} | {r['base']:.3f} | {r['new']:.3f} | {ratio:.3f} |")


if sys.argv[1] == "--dispatch":
    dispatch(sys.argv[2])
    sys.exit(0)
out, count = sys.argv[1], int(sys.argv[2])
print("| graph | model | H | D | direction | schedule | base ms | new ms | new/base |")
print("|---|---|---:|---:|---|---|---:|---:|---:|")
for k in range(1, count + 1):
    # rows paired by schedule text: dispatch's choice of each version ("default" marks it) and any named
    # schedule both timed (AB_SCHEDULES); a default the other version did not time stands alone
    rows, defaults, graph = {}, {}, ""
    for v in ("base", "new"):
        data = load(f"{out}/ab-{v}-{k}.json")
        for g in (data or {}).get("graphs", []):
            graph = g.get("name", graph)
            for r in g["results"]:
                if r.get("median_ms") is None:
                    continue
                config = (r["model"], r["heads"], r["dim"], r["direction"])
                rows.setdefault(config + (r["schedule"],), {})[v] = r["median_ms"]
                if r.get("is_default"):
                    defaults.setdefault(config, {})[v] = r["schedule"]
    for (model, h, d, direction, schedule), pair in rows.items():
        marks = "".join(f" ({v} default)" for v in ("base", "new")
                        if defaults.get((model, h, d, direction), {}).get(v) == schedule)
        b, n = pair.get("base"), pair.get("new")
        ratio = f"{n / b:.3f}" if b and n else ""
        print(f"| {graph} | {model} | {h} | {d} | {direction} | `{schedule}`{marks} | {'' if b is None else f'{b:.3f}'} | "
              f"{'' if n is None else f'{n:.3f}'} | {ratio} |")
