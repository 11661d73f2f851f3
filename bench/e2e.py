#!/usr/bin/env python3
"""End-to-end benchmark of what a dfgnn.torch user runs, with PyG 2.8's layers in the same run.

Sections (each a table in e2e.md and a key in e2e.json):
  build      dfgnn.Graph from a CUDA edge_index (built on the GPU) against edges, beside the same edges
             from host memory (the host build), median wall time (the build returns when it is done).
  minibatch  a 2-layer GAT training step (GATConv 8 heads x 8, then 1 x C) on a new edge-sampled,
             relabelled batch every step: R-MAT 2^20 samples at 5% and 25% and two real graphs'
             batches. Medians of CUDA-event step times over distinct batches after warm-up; the first
             step of each batch shape (kernel compiles, plans) in its own column.
  cora       the full-graph Cora GAT training step of PyG's examples/gat.py, eager.
  host       host microseconds per call (un-synchronised loop) and CUDA-event medians of
             dfgnn.torch.transformer on a PubMed-sized graph, forward and forward+backward.
Plots: e2e-steps.png (step time against batch edges) and e2e-build.png (build time against edges).

Usage: bench/e2e.py OUTDIR [--datasets DIR] [--quick] [--smoke]
  --smoke runs tiny sizes on the CPU (float64 reference path) to check the script itself.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import dfgnn
import dfgnn.torch as dt

try:
    import torch_geometric.nn as pnn
except ImportError:  # the PyG columns are then empty
    pnn = None

ROOT = Path(__file__).resolve().parent.parent


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, reps, warmup=3):
    """Median of per-call times in ms: CUDA events on the GPU, perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ---------------------------------------------------------------- graphs

def rmat_edges(scale, num_edges, device, seed=0, a=0.57, b=0.19, c=0.19):
    """R-MAT (Graph500 quadrant probabilities) drawn with torch on the device: [2, E] int64."""
    gen = torch.Generator(device=device).manual_seed(seed)
    src = torch.zeros(num_edges, dtype=torch.int64, device=device)
    dst = torch.zeros(num_edges, dtype=torch.int64, device=device)
    for level in range(scale):
        r = torch.rand(num_edges, generator=gen, device=device)
        right = (r >= a) & (r < a + b) | (r >= a + b + c)  # quadrants b and d: destination bit
        down = r >= a + b                                   # quadrants c and d: source bit
        src |= down.long() << level
        dst |= right.long() << level
    keep = src != dst
    return torch.stack([src[keep], dst[keep]])


def read_edges(path, device):
    g = dfgnn.Graph.from_file(str(path))
    return torch.from_numpy(np.ascontiguousarray(g.edge_index())).to(device), g.num_nodes


def edge_batch(edge_index, fraction, gen):
    """An edge-sampled batch relabelled to 0..n-1 (GraphSAINT's edge sampler, without weights)."""
    keep = torch.rand(edge_index.shape[1], generator=gen, device=edge_index.device) < fraction
    ei = edge_index[:, keep]
    nodes, inverse = torch.unique(ei, return_inverse=True)
    return inverse.view(2, -1).contiguous(), nodes.numel()


# ---------------------------------------------------------------- models

class GAT(torch.nn.Module):
    """PyG's examples/gat.py model on a layer module (torch_geometric.nn or dfgnn.torch)."""

    def __init__(self, nn, in_channels, hidden, heads, out_channels, dropout=0.6):
        super().__init__()
        self.dropout = dropout
        self.conv1 = nn.GATConv(in_channels, hidden, heads, dropout=dropout)
        self.conv2 = nn.GATConv(hidden * heads, out_channels, heads=1, concat=False, dropout=dropout)

    def forward(self, x, edge_index):
        x = torch.nn.functional.dropout(x, p=self.dropout, training=self.training)
        x = torch.nn.functional.elu(self.conv1(x, edge_index))
        x = torch.nn.functional.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def model_pair(in_channels, classes, device, dtype, dropout=0.6):
    """(dfgnn model, PyG model or None) with identical weights."""
    ours = GAT(dt, in_channels, 8, 8, classes, dropout).to(device, dtype)
    theirs = None
    if pnn is not None:
        theirs = GAT(pnn, in_channels, 8, 8, classes, dropout).to(device, dtype)
        ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def train_step(model, opt, x, edge_index, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x, edge_index), y)
    loss.backward()
    opt.step()
    return loss


# ---------------------------------------------------------------- sections

def section_build(device, sizes, reps):
    rows = []
    base = rmat_edges(20, max(sizes) * 2 if device.type == "cuda" else max(sizes) * 2, device, seed=1)
    gen = torch.Generator(device=device).manual_seed(2)
    for e in sizes:
        fraction = min(1.0, e / base.shape[1])
        ei, n = edge_batch(base, fraction, gen)
        ei_cpu = ei.cpu()

        def build_device():
            dfgnn.Graph(ei, n)

        def build_host():
            dfgnn.Graph(ei_cpu.numpy(), n)

        row = {"edges": int(ei.shape[1]), "nodes": int(n)}
        t = []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            build_device()
            t.append((time.perf_counter() - t0) * 1e3)
        row["device_build_ms"] = statistics.median(t[1:] if len(t) > 2 else t)
        t = []
        for _ in range(max(3, reps // 4)):
            t0 = time.perf_counter()
            build_host()
            t.append((time.perf_counter() - t0) * 1e3)
        row["host_build_ms"] = statistics.median(t)
        rows.append(row)
        print(f"build {row}", flush=True)
    return rows


def section_minibatch(device, dtype, configs, steps, features=128, classes=7):
    rows = []
    for name, edge_index, num_nodes, fraction in configs:
        gen = torch.Generator(device=device).manual_seed(3)
        batches = []
        for _ in range(steps + 2):
            ei, n = edge_batch(edge_index, fraction, gen)
            batches.append((ei, n, torch.randn(n, features, device=device, dtype=dtype),
                            torch.randint(0, classes, (n,), device=device)))
        row = {"batches": name, "fraction": fraction, "edges": statistics.median([b[0].shape[1] for b in batches]),
               "nodes": statistics.median([b[1] for b in batches])}
        ours, theirs = model_pair(features, classes, device, dtype)
        for label, model in (("dfgnn", ours), ("pyg", theirs)):
            if model is None:
                continue
            opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
            model.train()
            ei, n, x, y = batches[0]
            sync(device)
            t0 = time.perf_counter()
            train_step(model, opt, x, ei, y)
            sync(device)
            row[f"{label}_first_step_ms"] = (time.perf_counter() - t0) * 1e3
            train_step(model, opt, *batches[1][2:3], batches[1][0], batches[1][3])  # warm-up: a second shape
            times = []
            for ei, n, x, y in batches[2:]:
                if device.type == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    train_step(model, opt, x, ei, y)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    train_step(model, opt, x, ei, y)
                    times.append((time.perf_counter() - t0) * 1e3)
            row[f"{label}_step_ms"] = statistics.median(times)
        if "pyg_step_ms" in row:
            row["speedup"] = row["pyg_step_ms"] / row["dfgnn_step_ms"]
        rows.append(row)
        print(f"minibatch {row}", flush=True)
    return rows


def section_cora(device, dtype, reps):
    path = ROOT / "data" / "cora"
    ei, n = read_edges(path, device)
    x = torch.randn(n, 1433, device=device, dtype=dtype)
    y = torch.randint(0, 7, (n,), device=device)
    ours, theirs = model_pair(1433, 7, device, dtype)
    row = {"nodes": n, "edges": int(ei.shape[1])}
    for label, model in (("dfgnn", ours), ("pyg", theirs)):
        if model is None:
            continue
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        row[f"{label}_step_ms"] = median_ms(lambda: train_step(model, opt, x, ei, y), device, reps, warmup=10)
    if "pyg_step_ms" in row:
        row["speedup"] = row["pyg_step_ms"] / row["dfgnn_step_ms"]
    print(f"cora {row}", flush=True)
    return row


def section_host(device, dtype, reps, n=19717, e=88648):
    """dfgnn.torch.transformer H=1 D=128 on a PubMed-sized random graph: host us per call (a loop of
    un-synchronised calls) and CUDA-event medians (PyG's TransformerConv-free: the op alone)."""
    gen = torch.Generator(device=device).manual_seed(4)
    ei = torch.randint(0, n, (2, e), generator=gen, device=device)
    g = dt.graph(ei, n)
    q, k, v = (torch.randn(n, 1, 128, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    fwd = lambda: dt.transformer(g, q, k, v)  # noqa: E731

    def fwd_bwd():
        dt.transformer(g, q, k, v).sum().backward()

    row = {}
    for label, fn in (("forward", fwd), ("forward_backward", fwd_bwd)):
        for _ in range(20):
            fn()
        sync(device)
        calls = max(20, reps)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - t0) / calls * 1e6
        sync(device)
        row[f"{label}_host_us_per_call"] = host
        row[f"{label}_ms"] = median_ms(fn, device, reps)
    # A new graph of a bucket seen before (a sampler's next batch): host time of its first forward
    # (dispatch from the bucket cache, plans, launch recipe; kernels already loaded), beside a warm call.
    firsts = []
    for i in range(max(5, reps // 5)):
        ei2 = torch.randint(0, n, (2, e), generator=gen, device=device)
        g2 = dt.graph(ei2, n)
        sync(device)
        t0 = time.perf_counter()
        dt.transformer(g2, q, k, v)
        firsts.append((time.perf_counter() - t0) * 1e6)
        sync(device)
    row["new_graph_first_forward_host_us"] = statistics.median(firsts)
    print(f"host {row}", flush=True)
    return row


# ---------------------------------------------------------------- report

def write_report(out, result):
    (out / "e2e.json").write_text(json.dumps(result, indent=1))
    lines = [f"# End-to-end benchmark ({result['date']})", "",
             f"commit `{result['commit']}`, device {result['device']}, torch {result['torch']}, "
             f"torch_geometric {result['pyg']}, dtype {result['dtype']}", ""]
    if result.get("build"):
        lines += ["## Graph build from an edge_index", "",
                  "| edges | nodes | CUDA edge_index (ms) | host edge_index (ms) |", "|---:|---:|---:|---:|"]
        lines += [f"| {r['edges']} | {r['nodes']} | {r['device_build_ms']:.3f} | {r['host_build_ms']:.2f} |"
                  for r in result["build"]]
        lines += ["", "![build time](e2e-build.png)", ""]
    if result.get("minibatch"):
        lines += ["## Mini-batch GAT training step (new edge_index each step)", "",
                  "| batches | edges | nodes | PyG step (ms) | dfgnn step (ms) | speedup | PyG first (ms) | "
                  "dfgnn first (ms) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in result["minibatch"]:
            lines.append(f"| {r['batches']} | {r['edges']:.0f} | {r['nodes']:.0f} | {r.get('pyg_step_ms', math.nan):.2f} | "
                         f"{r['dfgnn_step_ms']:.2f} | {r.get('speedup', math.nan):.2f}x | "
                         f"{r.get('pyg_first_step_ms', math.nan):.1f} | {r['dfgnn_first_step_ms']:.1f} |")
        lines += ["", "![step time](e2e-steps.png)", ""]
    if result.get("cora"):
        r = result["cora"]
        lines += ["## Cora GAT training step (PyG examples/gat.py), eager", "",
                  f"dfgnn {r['dfgnn_step_ms']:.3f} ms, PyG {r.get('pyg_step_ms', math.nan):.3f} ms "
                  f"({r.get('speedup', math.nan):.2f}x)", ""]
    if result.get("host"):
        r = result["host"]
        lines += ["## Host time per call: dfgnn.torch.transformer, PubMed-sized graph, H=1 D=128", "",
                  "| call | host us per call (un-synchronised loop) | CUDA-event median (ms) |", "|---|---:|---:|",
                  f"| forward | {r['forward_host_us_per_call']:.1f} | {r['forward_ms']:.4f} |",
                  f"| forward+backward | {r['forward_backward_host_us_per_call']:.1f} | {r['forward_backward_ms']:.4f} |",
                  "", f"First forward on a new graph of a seen fingerprint bucket (dispatch, plans, recipe): "
                  f"{r['new_graph_first_forward_host_us']:.1f} us of host time.", ""]
    (out / "e2e.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots", flush=True)
        return
    if result.get("minibatch"):
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = sorted(result["minibatch"], key=lambda r: r["edges"])
        for label in ("pyg", "dfgnn"):
            pts = [(r["edges"], r[f"{label}_step_ms"]) for r in rows if f"{label}_step_ms" in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label={"pyg": "PyG 2.8 GATConv", "dfgnn": "dfgnn.torch GATConv"}[label])
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel("edges per batch"), ax.set_ylabel("training step (ms)")
        ax.set_title("2-layer GAT, new edge_index every step"), ax.legend(), ax.grid(alpha=0.3)
        fig.tight_layout(), fig.savefig(out / "e2e-steps.png", dpi=120)
    if result.get("build"):
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = result["build"]
        ax.plot([r["edges"] for r in rows], [r["device_build_ms"] for r in rows], marker="o", label="CUDA edge_index")
        ax.plot([r["edges"] for r in rows], [r["host_build_ms"] for r in rows], marker="s", label="host edge_index")
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel("edges"), ax.set_ylabel("dfgnn.Graph build (ms)"), ax.legend(), ax.grid(alpha=0.3)
        fig.tight_layout(), fig.savefig(out / "e2e-build.png", dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--datasets", default=None, help="the shared datasets (default: ../shared/datasets or .bench-data)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (float64): checks the script")
    ap.add_argument("--sections", default="build,minibatch,cora,host")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    sections = set(args.sections.split(","))
    datasets = Path(args.datasets) if args.datasets else next(
        (p for p in (ROOT.parent / "shared" / "datasets", ROOT / ".bench-data") if p.is_dir()), None)
    commit = os.environ.get("DFGNN_COMMIT", "")  # the device machine's copy may carry other git metadata
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
        except OSError:
            commit = "unknown"
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit or "unknown",
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke)",
              "torch": torch.__version__, "pyg": getattr(sys.modules.get("torch_geometric"), "__version__", "-"),
              "dtype": str(dtype)}
    reps = 5 if args.smoke else (20 if args.quick else 50)
    if "build" in sections:
        sizes = [2000, 20000] if args.smoke else [25000, 100000, 400000, 800000, 1600000, 4000000]
        result["build"] = section_build(device, sizes, reps)
    if "minibatch" in sections:
        configs = []
        if args.smoke:
            base = rmat_edges(10, 20000, device, seed=5)
            configs += [("R-MAT 2^10 5%", base, 1024, 0.05), ("R-MAT 2^10 25%", base, 1024, 0.25)]
        else:
            base = rmat_edges(20, 17_000_000, device, seed=5)
            configs += [("R-MAT 2^20 5%", base, 1 << 20, 0.05), ("R-MAT 2^20 25%", base, 1 << 20, 0.25)]
            for name, low, high in (("coauthor-cs", 0.15, 0.75), ("snap-ca-AstroPh", 0.06, 0.3)):
                if datasets is not None and (datasets / name).is_dir():
                    ei, n = read_edges(datasets / name, device)
                    configs += [(f"{name} {low:.0%}", ei, n, low), (f"{name} {high:.0%}", ei, n, high)]
                else:
                    print(f"minibatch: {name} not found under {datasets}: skipped", flush=True)
        result["minibatch"] = section_minibatch(device, dtype, configs, steps=3 if args.smoke else 20)
    if "cora" in sections:
        result["cora"] = section_cora(device, dtype, reps)
    if "host" in sections:
        result["host"] = section_host(device, dtype, reps, *((2000, 8000) if args.smoke else ()))
    write_report(out, result)
    print((out / "e2e.md").read_text())


if __name__ == "__main__":
    main()
