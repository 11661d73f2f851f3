#!/usr/bin/env python3
"""Issue 14 item 6: does the tuner pick the same winner twice? Compares two tuning databases made by
separate dfgnn-tune processes on the same graphs (bench/tune-twice.sh) problem by problem (graph
fingerprint, op, pass):

  same            both runs stored the same winner;
  within noise    the winners differ, but every run that measured both calls them tied: in run X, the
                  other run's winner is at most (1 + band) times X's own winner, with the tuner's tie
                  band (search.hpp: 2% + one standard error of the difference of the two medians,
                  1.2533 * sqrt(r1^2/n1 + r2^2/n2), r = max(0.5%, relative standard deviation));
  differ          some run measured the other's winner clearly slower than its own;
  not comparable  neither run measured the other's winner;
  only in one run the problem was tuned in one database only.

Candidate statistics come from the latest run of each result row (candidate_stats). The relative
standard deviation is sqrt(m2 / (count - 1)) / median, close to but not the tuner's robust pairwise
spread. sqlite3 only; names come from dfgnn-tune's --json reports when given.

Usage: bench/tune_twice_summary.py A.db B.db [--names A.json B.json] [--markdown OUT.md] [--json OUT.json]
"""

import argparse
import json
import math
import sqlite3
import sys

PASSES = ("forward", "backward_row", "backward_col")
MODELS = ("gat", "gatv2", "transformer", "agnn")
DTYPES = ("float32", "float16", "bfloat16", "float64")
TIE_TOLERANCE = 0.02   # tuner SearchOptions.tie_tolerance
TIE_Z = 1.0            # tuner SearchOptions.tie_z
NOISE_FLOOR = 0.005    # tuner SearchOptions.noise_floor
MEDIAN_EFFICIENCY = 1.2533



def key_bits_column(conn):
    """The results column of the op key's packed bits: key_bits since schema v2, variant before."""
    cols = {row[1] for row in conn.execute("PRAGMA table_info(results)")}
    return "key_bits" if "key_bits" in cols else "variant"

def read_winners(path):
    """{problem key: {"winner", "fingerprint" (dict), "op", "pass", "candidates": {schedule: stats}}}."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            f"SELECT r.id, f.text, r.model, r.dtype, r.heads, r.dim, r.direction, r.{key_bits_column(conn)}, r.schedule "
            "FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id").fetchall()
        out = {}
        for rid, text, model, dtype, heads, dim, direction, variant, winner in rows:
            run = conn.execute("SELECT id FROM runs WHERE result_id = ? ORDER BY unix_time DESC, id DESC LIMIT 1",
                               (rid,)).fetchone()
            cands = {}
            if run is not None:
                for s, count, mean, m2, median in conn.execute(
                        "SELECT schedule, count, mean_ms, m2, median_ms FROM candidate_stats WHERE run_id = ?", run):
                    cands[s] = {"count": count, "mean_ms": mean, "m2": m2, "median_ms": median}
            fp = json.loads(text)
            key = (json.dumps(fp, sort_keys=True), model, dtype, heads, dim, direction, variant)
            out[key] = {"winner": winner, "fingerprint": fp, "candidates": cands,
                        "op": f"{MODELS[model] if 0 <= model < len(MODELS) else model}:H{heads}:D{dim}:"
                              f"{DTYPES[dtype] if 0 <= dtype < len(DTYPES) else dtype}",
                        "pass": PASSES[direction] if 0 <= direction < len(PASSES) else str(direction)}
        return out
    finally:
        conn.close()


def relative_sd(stats):
    n, median = stats.get("count") or 0, stats.get("median_ms") or 0
    if n < 2 or median <= 0:
        return NOISE_FLOOR
    return max(NOISE_FLOOR, math.sqrt(max(stats["m2"], 0.0) / (n - 1)) / median)


def band(a, b):
    """The tuner's tie band between two candidates' statistics (a relative slowdown)."""
    se = MEDIAN_EFFICIENCY * math.sqrt(relative_sd(a) ** 2 / max(a.get("count") or 1, 1)
                                       + relative_sd(b) ** 2 / max(b.get("count") or 1, 1))
    return TIE_TOLERANCE + TIE_Z * se


def slowdown(run, own, other):
    """(other winner's median / own winner's median, tie band) in one run, or (None, None) when the run
    did not measure both."""
    c = run["candidates"]
    if own not in c or other not in c or not c[own]["median_ms"] > 0:
        return None, None
    return c[other]["median_ms"] / c[own]["median_ms"], band(c[own], c[other])


def compare(a, b):
    rows = []
    for key in sorted(set(a) | set(b)):
        ra, rb = a.get(key), b.get(key)
        base = ra or rb
        row = {"fingerprint": base["fingerprint"], "op": base["op"], "pass": base["pass"],
               "winner_a": ra and ra["winner"], "winner_b": rb and rb["winner"]}
        if ra is None or rb is None:
            row["verdict"] = "only in one run"
        elif ra["winner"] == rb["winner"]:
            row["verdict"] = "same"
        else:
            row["slowdown_in_a"], row["band_in_a"] = slowdown(ra, ra["winner"], rb["winner"])
            row["slowdown_in_b"], row["band_in_b"] = slowdown(rb, rb["winner"], ra["winner"])
            judged = [(row[f"slowdown_in_{x}"], row[f"band_in_{x}"]) for x in "ab" if row[f"slowdown_in_{x}"]]
            if not judged:
                row["verdict"] = "not comparable"
            elif all(s <= 1 + bnd for s, bnd in judged):
                row["verdict"] = "within noise"
            else:
                row["verdict"] = "differ"
        rows.append(row)
    return rows


def names_from(reports):
    """{canonical fingerprint JSON: graph name} from dfgnn-tune --json reports."""
    names = {}
    for path in reports or []:
        try:
            with open(path) as f:
                problems = json.load(f).get("problems", [])
        except (OSError, ValueError):
            continue  # a run that failed wrote no report: its graphs go by their sizes
        for p in problems:
            if isinstance(p.get("fingerprint"), dict):
                names[json.dumps(p["fingerprint"], sort_keys=True)] = p.get("graph")
    return names


def label(row, names):
    fp = row["fingerprint"]
    return names.get(json.dumps(fp, sort_keys=True)) or f"N={fp.get('num_nodes')} E={fp.get('num_edges')}"


def markdown(rows, names, a, b):
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    graphs = {label(r, names) for r in rows}
    lines = [f"# Tuning twice: {a} vs {b}", "",
             f"{len(rows)} problems (graph, op, pass) on {len(graphs)} graphs: "
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "",
             "| graph | op | pass | verdict | winner A | winner B | B's winner in A | A's winner in B |",
             "|---|---|---|---|---|---|---:|---:|"]

    def cell(s, bnd):
        return "-" if s is None else f"{s:.3f} (band {1 + bnd:.3f})"

    for r in rows:
        same = r["verdict"] == "same"
        lines.append(f"| {label(r, names)} | {r['op']} | {r['pass']} | {r['verdict']} | `{r['winner_a']}` | "
                     f"{'=' if same else '`%s`' % r['winner_b']} | {cell(r.get('slowdown_in_a'), r.get('band_in_a'))} | "
                     f"{cell(r.get('slowdown_in_b'), r.get('band_in_b'))} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", nargs="*", help="dfgnn-tune --json reports (graph names)")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        rows = compare(read_winners(args.a), read_winners(args.b))
    except sqlite3.Error as e:
        sys.exit(f"tune_twice_summary: cannot read the databases: {e}")
    names = names_from(args.names)
    text = markdown(rows, names, args.a, args.b)
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**r, "graph": label(r, names)} for r in rows], f, indent=1)
    bad = sum(1 for r in rows if r["verdict"] in ("differ", "not comparable"))
    print(f"same or within noise: {sum(1 for r in rows if r['verdict'] in ('same', 'within noise'))} of "
          f"{len(rows)}; differ or not comparable: {bad}")


if __name__ == "__main__":
    main()
