#!/usr/bin/env python3
"""Layers with edge features (PyG's edge_dim): dfgnn vs PyTorch Geometric 2.8 on one graph, same run.

For GATConv, GATv2Conv and TransformerConv with edge_dim, the dfgnn layer gets the PyG layer's weights
(load_state_dict: the parameter names match), then:
  - check: output and the gradients of x, edge_attr and every parameter against PyG's (relative L2 error);
  - time: forward+backward of one layer call (loss = sum(out^2)), median of --iters CUDA-event timings
    after warm-up, for PyG, for dfgnn, and for dfgnn without edge features (the cost of the edge term);
  - memory: torch.cuda.max_memory_allocated() over one forward+backward, minus what was allocated before.
Graph: R-MAT 2^scale nodes, edges_per_node * 2^scale sampled edges (a=0.57, b=0.19, c=0.19, deduplicated,
no self-loops, ids permuted), random float32 x [N, --in-channels] and edge_attr [E, --edge-dim].

    python bench/edge_bench.py --json out/edge_bench.json            # H200: R-MAT 2^18
    python bench/edge_bench.py --device cpu --scale 8 --iters 2      # CPU smoke run (float64 path)
Exit status: 0 when every check passed, 1 otherwise.
"""

import argparse
import json
import statistics
import sys

import torch

from attention_memory import times_ms  # same folder: python bench/edge_bench.py

LAYERS = {"GATConv": dict(heads=8), "GATv2Conv": dict(heads=8), "TransformerConv": dict(heads=4)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=18)
    p.add_argument("--edges-per-node", type=int, default=16)
    p.add_argument("--in-channels", type=int, default=64)
    p.add_argument("--out-channels", type=int, default=16, help="per head")
    p.add_argument("--edge-dim", type=int, default=8)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--json")
    return p.parse_args(argv)


def timed(fn, iters, cuda):
    """Median ms of iters calls (CUDA events on the GPU), as bench/attention_memory.py times them."""
    return statistics.median(times_ms(fn, iters, cuda))


def step(layer, x, edge_index, edge_attr):
    """One forward+backward; returns the output and the gradients (x, edge_attr, parameters)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    if edge_attr is not None:
        edge_attr.grad = None
    out = layer(x, edge_index, edge_attr) if edge_attr is not None else layer(x, edge_index)
    out.square().sum().backward()
    return [out.detach(), x.grad] + ([edge_attr.grad] if edge_attr is not None else []) + \
        [p.grad for p in layer.parameters()]


def peak_extra(fn, cuda):
    if not cuda:
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def main(argv=None):
    args = parse_args(argv)
    import dfgnn
    import dfgnn.torch as dt
    import torch_geometric
    import torch_geometric.nn as pnn
    cuda = args.device == "cuda"
    dtype = torch.float32 if cuda else torch.float64
    torch.manual_seed(0)
    g = dfgnn.Graph.rmat(args.scale, args.edges_per_node << args.scale, a=0.57, b=0.19, c=0.19, seed=1,
                         dedup=True, self_loops=False, permute=True)
    edge_index = torch.from_numpy(g.edge_index()).to(args.device)
    n, e = g.num_nodes, edge_index.shape[1]
    x = torch.randn(n, args.in_channels, dtype=dtype, device=args.device, requires_grad=True)
    edge_attr = torch.randn(e, args.edge_dim, dtype=dtype, device=args.device, requires_grad=True)
    print(f"R-MAT 2^{args.scale}: {n} nodes, {e} edges; x [{n}, {args.in_channels}], edge_attr [{e}, "
          f"{args.edge_dim}], {dtype}, {args.device}; PyG {torch_geometric.__version__}", flush=True)
    rows, ok = [], True
    for name, kw in LAYERS.items():
        kw = dict(kw, edge_dim=args.edge_dim)
        theirs = getattr(pnn, name)(args.in_channels, args.out_channels, **kw).to(args.device, dtype)
        ours = getattr(dt, name)(args.in_channels, args.out_channels, **kw).to(args.device, dtype)
        ours.load_state_dict(theirs.state_dict())
        plain = getattr(dt, name)(args.in_channels, args.out_channels, **dict(kw, edge_dim=None))
        plain = plain.to(args.device, dtype)
        want = step(theirs, x, edge_index, edge_attr)
        got = step(ours, x, edge_index, edge_attr)
        # Relative to each tensor's norm, floored at a share of the largest: some gradients are zero
        # analytically (a bias of the key, a per-row constant under the softmax), and what remains of
        # them is rounding noise of sums over millions of edges (float32 on the GPU).
        floor = (1e-4 if cuda else 1e-9) * max(b.double().norm().item() for b in want)
        names = ["out", "x", "edge_attr"] + [n for n, _ in theirs.named_parameters()]
        errors = {n: (a.double() - b.double()).norm().item() / max(b.double().norm().item(), floor)
                  for n, a, b in zip(names, got, want)}
        worst_name = max(errors, key=errors.get)
        worst = errors[worst_name]
        # float32 on the GPU; on the CPU float64, up to PyG's slope 0.2 vs dfgnn's float32 0.2.
        passed = worst < (1e-4 if cuda else 1e-7)
        ok &= passed
        row = dict(layer=name, worst_rel_error=worst, worst_tensor=worst_name, errors=errors,
                   check="ok" if passed else "FAILED")
        for label, layer, ea in (("pyg", theirs, edge_attr), ("dfgnn", ours, edge_attr),
                                 ("dfgnn_no_edge", plain, None)):
            def fn(layer=layer, ea=ea):
                return step(layer, x, edge_index, ea)
            for _ in range(args.warmup):
                fn()
            row[f"{label}_peak_bytes"] = peak_extra(fn, cuda)
            row[f"{label}_ms"] = timed(fn, args.iters, cuda)
        rows.append(row)
        print(f"  {name:16s} check {row['check']} (worst rel err {worst:.1e}, {worst_name}); fwd+bwd ms: PyG "
              f"{row['pyg_ms']:.3f}, dfgnn {row['dfgnn_ms']:.3f} ({row['pyg_ms'] / row['dfgnn_ms']:.2f}x), "
              f"dfgnn without edge features {row['dfgnn_no_edge_ms']:.3f}", flush=True)
        del theirs, ours, plain
        if cuda:
            torch.cuda.empty_cache()
    mib = 2 ** 20
    print("\n| layer (edge_dim) | check (worst rel err) | PyG ms | dfgnn ms | speedup | dfgnn ms without edges "
          "| PyG peak MiB | dfgnn peak MiB | memory ratio |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        mem = (f"{r['pyg_peak_bytes'] / mib:.0f} | {r['dfgnn_peak_bytes'] / mib:.0f} | "
               f"{r['pyg_peak_bytes'] / r['dfgnn_peak_bytes']:.1f}x") if cuda else "- | - | -"
        print(f"| {r['layer']} ({args.edge_dim}) | {r['check']} ({r['worst_rel_error']:.1e}) | {r['pyg_ms']:.3f} | "
              f"{r['dfgnn_ms']:.3f} | {r['pyg_ms'] / r['dfgnn_ms']:.2f}x | {r['dfgnn_no_edge_ms']:.3f} | {mem} |")
    if args.json:
        meta = dict(nodes=n, edges=e, args=vars(args), torch=torch.__version__, pyg=torch_geometric.__version__,
                    device=torch.cuda.get_device_name() if cuda else "cpu")
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
