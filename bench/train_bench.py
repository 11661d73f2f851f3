#!/usr/bin/env python3
"""Training and inference benchmarks of dfgnn.torch layers against PyTorch Geometric, in one run.

Training: one full-graph epoch (forward, cross-entropy loss over all nodes, backward, Adam step) of
  - GAT: GATConv(F, 8, heads=8) -> ELU -> GATConv(64, C, heads=1, concat=False), feature dropout 0.6;
  - Graph Transformer: TransformerConv(F, 64, heads=4) -> ELU -> TransformerConv(256, 64, heads=4)
    -> ELU -> Linear(256, C), feature dropout 0.6;
with dfgnn.torch's layers and with torch_geometric.nn's, from the same weights, on each graph. Epoch
time is the median of CUDA-event timed epochs after warm-up; peak memory is
torch.cuda.max_memory_allocated() over those epochs (data, model and optimizer state included).
dfgnn keeps its device copies of the graph (CSR + CSC, plans) outside torch's allocator: their size
is estimated (16 bytes per edge + 8 per node) and added to dfgnn's peak ("peak_total"). Attention
dropout is 0 on both sides (both support it; off, the comparison is of the attention kernels).

Graphs: cora (data/cora, its 1433 features and labels), pubmed, blogcatalog, amazon-photo (from the
dataset directories: random 128-wide features and labels where none are shipped) and R-MAT graphs
with 2^18 and 2^20 nodes and 16 sampled edges per node (dfgnn's seeded generator: a=0.57, b=0.19,
c=0.19, duplicates and self-loops dropped). A PyG (or dfgnn) out-of-memory error is caught and
reported as "oom".

Inference: forward latency of each layer (GATConv, GATv2Conv, TransformerConv, AGNNConv), eval mode
without autograd, on a TU collection (tu-PROTEINS: 1113 protein graphs) batched as one graph.

Writes OUT/train.json, OUT/train.md, OUT/train.png (speedups and memory ratios), OUT/inference.json
and OUT/inference.md.

    python bench/train_bench.py --out results/ --datasets ../shared/datasets
    python bench/train_bench.py --device cpu --dry-run --out /tmp/tb      # checks the script on the CPU
"""

import argparse
import datetime
import gc
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time
import traceback

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
TRAIN_GRAPHS = ["cora", "pubmed", "blogcatalog", "amazon-photo", "rmat18", "rmat20"]
MODELS = ["gat", "transformer"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--datasets", nargs="*", default=[],
                   help="dataset directories to search (also $DFGNN_DATASETS, ../shared/datasets, .bench-data)")
    p.add_argument("--what", nargs="+", default=["train", "inference"], choices=["train", "inference"])
    p.add_argument("--graphs", nargs="+", default=TRAIN_GRAPHS,
                   help="training graphs: dataset names or rmatS (2^S nodes, 16 edges per node)")
    p.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    p.add_argument("--impls", nargs="+", default=["dfgnn", "pyg"], choices=["dfgnn", "pyg"])
    p.add_argument("--feature-width", type=int, default=128, help="random feature width where none is shipped")
    p.add_argument("--classes", type=int, default=16, help="random label classes where none are shipped")
    p.add_argument("--warmup", type=int, default=3, help="untimed epochs (dfgnn: graph build, NVRTC)")
    p.add_argument("--epochs", type=int, default=10, help="timed epochs")
    p.add_argument("--inference-graph", default="tu-PROTEINS")
    p.add_argument("--inference-width", type=int, default=64)
    p.add_argument("--inference-iters", type=int, default=50)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: float64 reference path, wall-clock timing (checks only)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes: cora and R-MAT 2^10 only, 1+2 epochs, 3 inference iterations")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.dry_run:
        args.graphs = [g for g in args.graphs if not g.startswith("rmat")][:1] + ["rmat10"]
        args.warmup, args.epochs, args.inference_iters = 1, 2, 3
    return args


# ---------------------------------------------------------------- graphs

def dataset_roots(extra):
    roots = [pathlib.Path(p) for p in extra]
    roots += [pathlib.Path(p) for p in os.environ.get("DFGNN_DATASETS", "").split(":") if p]
    return roots + [REPO.parent / "shared" / "datasets", REPO / ".bench-data"]


def find_dataset(name, roots):
    if name == "cora":
        return REPO / "data" / "cora"
    for root in roots:
        d = root / name
        if (d / "edges.txt").is_file() or (d / "edges.txt.gz").is_file():
            return d
    return None


def load_graph(name, roots, feature_width, classes, rng):
    """dict(name, edge_index [2, E] int64, x [N, F] float32, y [N] int64, num_classes) or None."""
    import dfgnn
    if name.startswith("rmat"):
        scale = int(name[4:])
        g = dfgnn.Graph.rmat(scale, 16 << scale, a=0.57, b=0.19, c=0.19, seed=1)
        n, features, labels = g.num_nodes, None, None
    else:
        d = find_dataset(name, roots)
        if d is None:
            return None
        g = dfgnn.Graph.from_file(d)
        n = g.num_nodes
        features = _read_features(d / "features.txt", n) if (d / "features.txt").is_file() else None
        labels = _read_labels(d / "labels.txt") if (d / "labels.txt").is_file() else None
    edge_index = g.edge_index()
    x = features if features is not None else rng.standard_normal((n, feature_width), dtype=np.float32)
    if labels is None or labels.shape[0] != n:
        labels = rng.integers(0, classes, n)
    labels = np.where(labels < 0, 0, labels)
    return dict(name=name, edge_index=edge_index, x=x, y=labels.astype(np.int64), num_classes=int(labels.max()) + 1,
                num_nodes=n, num_edges=edge_index.shape[1], max_in_degree=int(g.in_degrees().max(initial=0)),
                real_features=features is not None)


def _read_labels(path):
    with open(path) as f:
        f.readline()
        return np.array([int(line) for line in f], dtype=np.int64)


def _read_features(path, n):
    with open(path) as f:
        words = f.readline().lstrip("#").split()
        dims = int(words[words.index("dims") + 1])
        nz = np.loadtxt(f, dtype=np.int64).reshape(-1, 2)
    x = np.zeros((n, dims), dtype=np.float32)
    x[nz[:, 0], nz[:, 1]] = 1.0
    return x / np.maximum(x.sum(1, keepdims=True), 1.0)


def graph_bytes_estimate(n, e):
    """dfgnn's device copies outside torch: CSR (row_ptr, col_idx, edge_id) and CSC (col_ptr,
    row_idx, csr_pos), int32, with self-loops added (plans are small and not counted)."""
    e = e + n
    return 4 * (2 * (n + 1) + 4 * e)


# ---------------------------------------------------------------- models

def make_model(model, impl, in_channels, num_classes):
    import torch
    import torch.nn.functional as F
    if impl == "dfgnn":
        import dfgnn.torch as nn_mod
    else:
        import torch_geometric.nn as nn_mod

    class GAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn_mod.GATConv(in_channels, 8, heads=8)
            self.conv2 = nn_mod.GATConv(64, num_classes, heads=1, concat=False)

        def forward(self, x, ei):
            x = F.dropout(x, 0.6, self.training)
            x = F.elu(self.conv1(x, ei))
            x = F.dropout(x, 0.6, self.training)
            return self.conv2(x, ei)

    class GT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn_mod.TransformerConv(in_channels, 64, heads=4)
            self.conv2 = nn_mod.TransformerConv(256, 64, heads=4)
            self.head = torch.nn.Linear(256, num_classes)

        def forward(self, x, ei):
            x = F.dropout(x, 0.6, self.training)
            x = F.elu(self.conv1(x, ei))
            x = F.dropout(x, 0.6, self.training)
            return self.head(F.elu(self.conv2(x, ei)))

    return GAT() if model == "gat" else GT()


def is_oom(exc):
    import torch
    import dfgnn
    if isinstance(exc, (torch.cuda.OutOfMemoryError, dfgnn.OutOfMemoryError, MemoryError)):
        return True
    return "out of memory" in str(exc).lower()


class Timer:
    """CUDA events on the GPU, wall clock on the CPU; milliseconds."""

    def __init__(self, device):
        import torch
        self.cuda = device == "cuda"
        self.torch = torch

    def __call__(self, fn):
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t)


def _free():
    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def bench_train(args, graph, model_name, impl, state, dtype):
    """One (graph, model, impl) training measurement. state: shared initial weights (dict)."""
    import torch
    import torch.nn.functional as F
    dev = args.device
    row = dict(graph=graph["name"], model=model_name, impl=impl, nodes=graph["num_nodes"],
               edges=graph["num_edges"], max_in_degree=graph["max_in_degree"], features=graph["x"].shape[1])
    model = opt = x = y = ei = None
    try:
        torch.manual_seed(args.seed)
        model = make_model(model_name, impl, graph["x"].shape[1], graph["num_classes"]).to(dev, dtype)
        if state.get(model_name) is None:
            state[model_name] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict(state[model_name])
        x = torch.from_numpy(graph["x"]).to(dev, dtype)
        y = torch.from_numpy(graph["y"]).to(dev)
        ei = torch.from_numpy(graph["edge_index"]).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        model.train()

        last = []

        def epoch():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, ei), y)
            loss.backward()
            opt.step()
            last[:] = [loss.detach()]  # read after the timed epochs: .item() would synchronise

        timer = Timer(dev)
        if dev == "cuda":
            torch.cuda.synchronize()
            row["base_bytes"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(args.warmup):
            timer(epoch)
        times = [timer(epoch) for _ in range(args.epochs)]
        row["loss"] = float(last[0])
        row["epoch_ms"] = statistics.median(times)
        row["epoch_ms_all"] = times
        if dev == "cuda":
            row["peak_bytes"] = torch.cuda.max_memory_allocated()
            extra = graph_bytes_estimate(graph["num_nodes"], graph["num_edges"]) if impl == "dfgnn" else 0
            row["outside_torch_bytes_estimate"] = extra
            row["peak_total_bytes"] = row["peak_bytes"] + extra
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row; OOM is expected for PyG
        row["status"] = "oom" if is_oom(exc) else "error"
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        if row["status"] == "error":
            traceback.print_exc()
    finally:
        del model, opt, x, y, ei
        _free()
    return row


def run_train(args, roots, out, rng):
    import torch
    dtype = torch.float32 if args.device == "cuda" else torch.float64
    rows = []
    for name in args.graphs:
        t = time.perf_counter()
        graph = load_graph(name, roots, args.feature_width, args.classes, rng)
        if graph is None:
            print(f"train: {name}: dataset not found under {', '.join(map(str, roots))}: skipped", flush=True)
            rows.append(dict(graph=name, status="missing"))
            continue
        print(f"train: {name}: {graph['num_nodes']} nodes, {graph['num_edges']} edges, max in-degree "
              f"{graph['max_in_degree']} (loaded in {time.perf_counter() - t:.1f} s)", flush=True)
        for model_name in args.models:
            state = {}
            for impl in args.impls:
                row = bench_train(args, graph, model_name, impl, state, dtype)
                rows.append(row)
                print("  " + _describe(row), flush=True)
        del graph
        _free()
    pairs = summarize(rows)
    result = dict(meta=meta(args), rows=rows, comparison=pairs)
    (out / "train.json").write_text(json.dumps(result, indent=1))
    (out / "train.md").write_text(train_markdown(result))
    try:
        plot(pairs, out / "train.png")
    except Exception as exc:  # noqa: BLE001 - a missing matplotlib must not lose the measurements
        print(f"train: no plot ({type(exc).__name__}: {exc})", flush=True)
    return rows


def _describe(row):
    if row["status"] != "ok":
        return f"{row['model']:11s} {row['impl']:5s} {row['status'].upper()}: {row.get('error', '')[:160]}"
    mem = f", peak {row['peak_bytes'] / 2**30:.2f} GiB" if "peak_bytes" in row else ""
    return f"{row['model']:11s} {row['impl']:5s} epoch {row['epoch_ms']:.3f} ms{mem}"


def summarize(rows):
    """One comparison per (graph, model): speedup = PyG time / dfgnn time, memory ratio = PyG peak /
    dfgnn peak (dfgnn's including its graph copies outside torch)."""
    out = []
    keys = []
    for r in rows:
        if "model" in r and (r["graph"], r["model"]) not in keys:
            keys.append((r["graph"], r["model"]))
    for graph, model in keys:
        d = next((r for r in rows if r.get("graph") == graph and r.get("model") == model and r["impl"] == "dfgnn"), None)
        p = next((r for r in rows if r.get("graph") == graph and r.get("model") == model and r["impl"] == "pyg"), None)
        c = dict(graph=graph, model=model, dfgnn_status=d["status"] if d else None, pyg_status=p["status"] if p else None)
        for src, tag in ((d, "dfgnn"), (p, "pyg")):
            if src is not None:
                c.update({f"{tag}_epoch_ms": src.get("epoch_ms"), f"{tag}_peak_bytes": src.get("peak_total_bytes"),
                          "nodes": src["nodes"], "edges": src["edges"]})
        if d and p and d["status"] == p["status"] == "ok":
            c["speedup"] = p["epoch_ms"] / d["epoch_ms"]
            if d.get("peak_total_bytes"):
                c["memory_ratio"] = p["peak_total_bytes"] / d["peak_total_bytes"]
        out.append(c)
    return out


def _gib(b):
    return "-" if b is None else f"{b / 2**30:.2f}"


def _ms(v):
    return "-" if v is None else f"{v:.2f}"


def train_markdown(result):
    m = result["meta"]
    lines = [f"# Training epoch, dfgnn vs PyG {m.get('torch_geometric')} ({m.get('device_name')}, "
             f"torch {m.get('torch')}, {m['date']})", "",
             f"Median of {m['epochs']} CUDA-event timed epochs after {m['warmup']} warm-up epochs; peak = "
             "torch.cuda.max_memory_allocated over them (dfgnn: plus its estimated graph copies outside torch). "
             "Speedup = PyG / dfgnn epoch time; memory ratio = PyG / dfgnn peak. Attention dropout 0 on both sides.",
             "", "| graph | nodes | edges | model | dfgnn ms | PyG ms | speedup | dfgnn peak GiB | PyG peak GiB | "
             "memory ratio |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in result["comparison"]:
        cells = [c["graph"], c.get("nodes", "-"), c.get("edges", "-"), c["model"]]
        for tag in ("dfgnn", "pyg"):
            status = c.get(f"{tag}_status")
            cells.append(_ms(c.get(f"{tag}_epoch_ms")) if status == "ok" else (status or "-"))
        cells.append(f"{c['speedup']:.2f}x" if "speedup" in c else "-")
        cells += [_gib(c.get("dfgnn_peak_bytes")), _gib(c.get("pyg_peak_bytes"))]
        cells.append(f"{c['memory_ratio']:.1f}x" if "memory_ratio" in c else "-")
        lines.append("| " + " | ".join(str(v) for v in cells) + " |")
    missing = [r["graph"] for r in result["rows"] if r.get("status") == "missing"]
    if missing:
        lines += ["", f"Not found (skipped): {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def plot(pairs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    graphs = list(dict.fromkeys(c["graph"] for c in pairs))
    models = list(dict.fromkeys(c["model"] for c in pairs))
    width = 0.8 / max(len(models), 1)
    for ax, key, title, target in ((axes[0], "speedup", "epoch speedup (PyG time / dfgnn time)", 3.0),
                                   (axes[1], "memory_ratio", "peak memory ratio (PyG / dfgnn)", 5.0)):
        for i, model in enumerate(models):
            xs, ys, labels = [], [], []
            for j, graph in enumerate(graphs):
                c = next((c for c in pairs if c["graph"] == graph and c["model"] == model), None)
                if c is None:
                    continue
                x = j + (i - (len(models) - 1) / 2) * width
                if key in c:
                    xs.append(x)
                    ys.append(c[key])
                else:
                    why = "PyG OOM" if c.get("pyg_status") == "oom" else (c.get("pyg_status") or "n/a")
                    ax.text(x, 1.0, why, rotation=90, ha="center", va="bottom", fontsize=8)
            bars = ax.bar(xs, ys, width, label=model)
            for b, y in zip(bars, ys):
                ax.text(b.get_x() + b.get_width() / 2, y, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(target, color="gray", linestyle="--", linewidth=0.8, label=f"target {target:g}x")
        ax.set_xticks(range(len(graphs)))
        ax.set_xticklabels(graphs, rotation=20)
        ax.set_yscale("log")
        plain = matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- inference

def inference_layers(impl, width):
    if impl == "dfgnn":
        import dfgnn.torch as nn_mod
    else:
        import torch_geometric.nn as nn_mod
    return {"GATConv": nn_mod.GATConv(width, 16, heads=4), "GATv2Conv": nn_mod.GATv2Conv(width, 16, heads=4),
            "TransformerConv": nn_mod.TransformerConv(width, 16, heads=4), "AGNNConv": nn_mod.AGNNConv()}


def run_inference(args, roots, out, rng):
    import torch
    dev = args.device
    dtype = torch.float32 if dev == "cuda" else torch.float64
    d = find_dataset(args.inference_graph, roots)
    rows = []
    if d is None:
        print(f"inference: {args.inference_graph} not found: skipped", flush=True)
    else:
        import dfgnn
        g = dfgnn.Graph.from_file(d)
        graphs = sum(1 for line in open(d / "graphs.txt") if not line.startswith("#")) \
            if (d / "graphs.txt").is_file() else 1
        ei = torch.from_numpy(g.edge_index()).to(dev)
        x = torch.from_numpy(rng.standard_normal((g.num_nodes, args.inference_width), dtype=np.float32)).to(dev, dtype)
        print(f"inference: {args.inference_graph}: {graphs} graphs as one batch, {g.num_nodes} nodes, "
              f"{g.num_edges} edges", flush=True)
        timer = Timer(dev)
        layers = {impl: inference_layers(impl, args.inference_width) for impl in args.impls}
        for name in layers[args.impls[0]]:
            for impl in args.impls:
                layer = layers[impl][name].to(dev, dtype).eval()
                if impl != args.impls[0]:
                    layer.load_state_dict(layers[args.impls[0]][name].state_dict())
                row = dict(layer=name, impl=impl, graph=args.inference_graph, nodes=g.num_nodes, edges=g.num_edges,
                           batch_graphs=graphs)
                try:
                    with torch.inference_mode():
                        for _ in range(max(3, args.inference_iters // 5)):
                            timer(lambda: layer(x, ei))
                        times = [timer(lambda: layer(x, ei)) for _ in range(args.inference_iters)]
                    row.update(status="ok", forward_ms=statistics.median(times), forward_ms_min=min(times))
                except Exception as exc:  # noqa: BLE001
                    row.update(status="oom" if is_oom(exc) else "error", error=f"{type(exc).__name__}: {exc}"[:400])
                rows.append(row)
                print(f"  {name:16s} {impl:5s} " + (f"forward {row['forward_ms']:.3f} ms" if row["status"] == "ok"
                                                     else row["status"]), flush=True)
    result = dict(meta=meta(args), rows=rows)
    (out / "inference.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Layer forward latency on {args.inference_graph} batched as one graph (inference mode)", "",
             f"Median of {args.inference_iters} CUDA-event timed calls; random {args.inference_width}-wide features; "
             "layers with 4 heads x 16 channels (AGNNConv: one head over the features).", "",
             "| layer | dfgnn ms | PyG ms | speedup |", "|---|---:|---:|---:|"]
    for name in dict.fromkeys(r["layer"] for r in rows):
        t = {r["impl"]: r for r in rows if r["layer"] == name}
        f = {k: (f"{v['forward_ms']:.3f}" if v["status"] == "ok" else v["status"]) for k, v in t.items()}
        ok = all(v["status"] == "ok" for v in t.values()) and len(t) == 2
        speed = f"{t['pyg']['forward_ms'] / t['dfgnn']['forward_ms']:.2f}x" if ok else "-"
        lines.append(f"| {name} | {f.get('dfgnn', '-')} | {f.get('pyg', '-')} | {speed} |")
    (out / "inference.md").write_text("\n".join(lines) + "\n")
    return rows


# ---------------------------------------------------------------- main

def meta(args):
    import torch
    m = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), device=args.device, torch=torch.__version__,
             python=platform.python_version(), warmup=args.warmup, epochs=args.epochs, dry_run=args.dry_run)
    try:
        import torch_geometric
        m["torch_geometric"] = torch_geometric.__version__
    except ImportError:
        m["torch_geometric"] = None
    import dfgnn
    m["dfgnn"] = dfgnn.__version__
    if args.device == "cuda":
        m["device_name"] = torch.cuda.get_device_name()
    return m


def main(argv=None):
    args = parse_args(argv)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("train_bench.py: CUDA is not available (use --device cpu --dry-run to check the script)",
              file=sys.stderr)
        return 3
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    roots = dataset_roots(args.datasets)
    rng = np.random.default_rng(args.seed)
    rows = []
    if "train" in args.what:
        rows += run_train(args, roots, out, rng)
    if "inference" in args.what:
        rows += run_inference(args, roots, out, rng)
    errors = [r for r in rows if r.get("status") == "error"]
    # an OOM is a result (reported), not a failure; a dfgnn OOM is worth a look but not a crash either
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
