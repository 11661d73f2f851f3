#!/usr/bin/env python3
"""Summarises bench/tune-quality.sh: tuning time, default vs tuned (from dfgnn-tune's own
measurements), and dispatch (exact for tuned graphs, nearest for held-out ones) against the
exhaustive best of one dfgnn-bench sweep where every candidate was timed in the same run."""
import argparse
import json


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}")
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tune_rmat")
    ap.add_argument("tune_set")
    ap.add_argument("sweep")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    lines = []
    tuned_graphs = set()
    lines.append("### Tuning (dfgnn-tune): default rule vs tuned winner, measured by the tuner\n")
    lines.append("| graph | edges | direction | pass | default ms | tuned ms | speedup | candidates | timings | search s | budget hit |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in (a.tune_rmat, a.tune_set):
        doc = load(path)
        if not doc:
            continue
        for p in doc.get("problems", []):
            tuned_graphs.add(p["graph"])
            for r in p.get("report") or []:
                lines.append(f"| {p['graph']} | {p['edges']} | {p['direction']} | {r['pass']} | "
                             f"{r['default_median_ms']:.4f} | {r['winner_median_ms']:.4f} | "
                             f"{r['speedup_over_default']:.3f} | {r['candidates']} | {r['timings']} | "
                             f"{r['elapsed_s']:.1f} | {r['budget_exhausted']} |")
            if p.get("status") != "tuned":
                lines.append(f"| {p['graph']} | {p['edges']} | {p['direction']} | - | status {p.get('status')}: "
                             f"{p.get('error', '')} |||||||")
    doc = load(a.tune_rmat)
    if doc:
        total = sum(p.get("elapsed_s", 0) for p in doc.get("problems", []))
        lines.append(f"\nR-MAT 2^20 tuning time, forward + backward problems: {total:.1f} s (target < 60 s)\n")

    sweep = load(a.sweep)
    lines.append("### Dispatch vs exhaustive best (one dfgnn-bench run, every candidate timed)\n")
    lines.append("| graph | tuned? | direction | dispatch level | dispatch ms | exhaustive best ms | dispatch / best |")
    lines.append("|---|---|---|---|---|---|---|")
    worst = {"tuned": 0.0, "held-out": 0.0}
    for g in (sweep or {}).get("graphs", []):
        kind = "tuned" if g["name"] in tuned_graphs else "held-out"
        for s in g.get("summaries", []):
            d, b = s.get("default_ms"), s.get("best_ms")
            ratio = d / b if d and b else float("nan")
            worst[kind] = max(worst[kind], ratio) if ratio == ratio else worst[kind]
            lines.append(f"| {g['name']} | {kind} | {s['direction']} | {s.get('dispatch', '?')} | "
                         f"{d if d is None else f'{d:.4f}'} | {b if b is None else f'{b:.4f}'} | {ratio:.3f} |")
    lines.append(f"\nWorst dispatch/best: tuned graphs {worst['tuned']:.3f} (target <= 1.03), "
                 f"held-out graphs {worst['held-out']:.3f} (target <= 1/0.9 = 1.111)\n")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
