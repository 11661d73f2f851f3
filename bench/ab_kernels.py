#!/usr/bin/env python3
"""Per-kernel GPU time of the same op calls in two builds, side by side: the median of ncu's
gpu__time_duration.sum over every launch of each dfgnn kernel, from two `ncu --csv --print-units
base --print-kernel-base mangled` logs (bench/shapes-gpu.sh ab-kernels).

Launches are matched by kernel (its base name and pass), grid and block, not by the full name: the
template arguments differ between versions (Geo gained its head-span arguments). A key found in one
build only is listed with an empty side; that is itself a finding (a launch added or dropped, or a
plan that now makes another grid). A second table sums each kernel and pass over all its launches,
whatever their grids: both runs make the same calls, so those totals compare even where a plan
changed. A key that pools several full names (e.g. two template instances with equal launches) is
flagged. Kernels that are not dfgnn's (the benchmark's own) are left out.

Usage: bench/ab_kernels.py BASE.csv NEW.csv [--json OUT.json]   (Markdown on stdout)"""
import argparse
import csv
import json
import re
import statistics
import sys

KERNEL = re.compile(r"_ZN5dfgnn\d+([a-z_0-9]+?)(?:I|E)")
PASS = re.compile(r"(Forward|BackwardRow|BackwardCol)I")


def kernel_key(mangled, grid, block):
    """(kernel, pass, grid, block) of a dfgnn launch, or None for another library's kernel."""
    m = KERNEL.match(mangled)
    if m is None:
        return None
    p = PASS.search(mangled)
    return m.group(1), p.group(1) if p else "", grid, block


COLUMNS = {"Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Unit", "Metric Value"}


def launch_times(path, names=None):
    """{key: [microseconds of each launch]} from one ncu CSV log (lines that are not CSV skipped);
    names, when given, collects {key: {full mangled names}}."""
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if line.startswith('"')))
    if rows and not COLUMNS <= set(rows[0]):
        raise SystemExit(f"{path}: not an ncu --csv log (lacks {sorted(COLUMNS - set(rows[0]))})")
    out = {}
    for r in rows:
        if r["Metric Name"] != "gpu__time_duration.sum":
            continue
        key = kernel_key(r["Kernel Name"], r["Grid Size"], r["Block Size"])
        if key is None:
            continue
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(r["Metric Unit"])
        if scale is None:
            raise SystemExit(f"{path}: gpu__time_duration.sum in unit {r['Metric Unit']!r}")
        out.setdefault(key, []).append(float(r["Metric Value"].replace(",", "")) * scale)
        if names is not None:
            names.setdefault(key, set()).add(r["Kernel Name"])
    if not out:
        raise SystemExit(f"{path}: no dfgnn kernel launch with gpu__time_duration.sum")
    return out


def compare(base, new):
    """Rows (key, launches base, launches new, median us base, median us new, ratio or None)."""
    rows = []
    for key in sorted(set(base) | set(new)):
        b, n = base.get(key, []), new.get(key, [])
        mb = statistics.median(b) if b else None
        mn = statistics.median(n) if n else None
        rows.append((key, len(b), len(n), mb, mn, mn / mb if mb and mn else None))
    return rows


def totals(base, new):
    """Rows ((kernel, pass), launches base, launches new, total us base, total us new, ratio or None):
    every launch of a kernel and pass summed, whatever its grid."""
    def by_kernel(times):
        out = {}
        for (kernel, pas, _, _), t in times.items():
            n, s = out.get((kernel, pas), (0, 0.0))
            out[(kernel, pas)] = (n + len(t), s + sum(t))
        return out
    b, n = by_kernel(base), by_kernel(new)
    rows = []
    for key in sorted(set(b) | set(n)):
        (nb, sb), (nn, sn) = b.get(key, (0, None)), n.get(key, (0, None))
        rows.append((key, nb, nn, sb, sn, sn / sb if sb and sn else None))
    return rows


def markdown(rows):
    fmt = lambda x: "" if x is None else f"{x:.1f}"
    out = ["| kernel | pass | grid | block | launches base / new | median us, base | new | new / base |",
           "|---|---|---|---|---|---:|---:|---:|"]
    for (kernel, pas, grid, block), nb, nn, mb, mn, ratio in rows:
        out.append(f"| {kernel} | {pas} | {grid} | {block} | {nb} / {nn} | {fmt(mb)} | {fmt(mn)} | "
                   f"{'' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(out) + "\n"


def totals_markdown(rows):
    fmt = lambda x: "" if x is None else f"{x:.1f}"
    out = ["| kernel | pass | launches base / new | total us, base | new | new / base |", "|---|---|---|---:|---:|---:|"]
    for (kernel, pas), nb, nn, sb, sn, ratio in rows:
        out.append(f"| {kernel} | {pas} | {nb} / {nn} | {fmt(sb)} | {fmt(sn)} | {'' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    base_names, new_names = {}, {}
    base, new = launch_times(a.base, base_names), launch_times(a.new, new_names)
    rows, sums = compare(base, new), totals(base, new)
    sys.stdout.write(markdown(rows) + "\nEvery launch of a kernel and pass, summed over both runs' calls:\n\n" +
                     totals_markdown(sums))
    for which, names in (("base", base_names), ("new", new_names)):
        for (kernel, pas, grid, block), full in sorted(names.items()):
            if len(full) > 1:
                sys.stdout.write(f"\nnote: {which}: {kernel} {pas} {grid} {block} pools {len(full)} kernel names\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launches": [{"kernel": k[0], "pass": k[1], "grid": k[2], "block": k[3], "launches_base": nb,
                                     "launches_new": nn, "median_us_base": mb, "median_us_new": mn, "ratio": r}
                                    for k, nb, nn, mb, mn, r in rows],
                       "totals": [{"kernel": k[0], "pass": k[1], "launches_base": nb, "launches_new": nn,
                                   "total_us_base": sb, "total_us_new": sn, "ratio": r}
                                  for k, nb, nn, sb, sn, r in sums]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
