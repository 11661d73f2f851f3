#!/usr/bin/env python3
"""Summarises bench/dispatch.sh: host overhead per call and fresh-process first launches."""
import argparse
import glob
import json
import os


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    out = []
    out.append("### Host time per call on a warm in-process cache\n")
    out.append("| model | direction | schedule | call us | launches | as many bare launches us | dfgnn's own us (target < 2) |")
    out.append("|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(a.outdir, "overhead-*.json"))):
        r = load(path)
        for d in ("forward", "backward"):
            x = r[d]
            out.append(f"| {r['op']['model']} | {d} | {x['schedule']} | {x['call_us']:.3f} | {x['launches']} | "
                       f"{x['bare_launches_us']:.3f} | {x['dfgnn_us']:.3f} |")
    out.append("\n### Fresh process: first forward + backward over steady calls\n")
    out.append("| run | context creation ms | added by first calls ms (target < 20) | NVRTC compiles | modules from db | schedules |")
    out.append("|---|---|---|---|---|---|")
    runs = [("empty database", "first-cold.json")] + [(f"tuned database #{i}", f"first-warm-{i}.json") for i in (1, 2, 3)] \
        + [(f"concurrent #{i}", f"concurrent-{i}.json") for i in (1, 2, 3, 4)]
    schedules = set()
    for label, name in runs:
        path = os.path.join(a.outdir, name)
        if not os.path.exists(path):
            out.append(f"| {label} | missing ||||| ")
            continue
        r = load(path)
        if name.startswith("concurrent"):
            schedules.add((r["forward_schedule"], r["backward_schedule"]))
        out.append(f"| {label} | {r['context_creation_ms']:.1f} | {r['first_launch_added_ms']:.2f} | {r['nvrtc_compiles']} | "
                   f"{r['modules_from_database']} | {r['forward_schedule']} / {r['backward_schedule']} |")
    out.append(f"\nConcurrent dispatchers chose {len(schedules)} distinct schedule pair(s) (1 = identical decisions)\n")
    text = "\n".join(out)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
