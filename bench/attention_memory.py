#!/usr/bin/env python3
"""Peak GPU memory and time of the attention op alone, dfgnn vs PyTorch Geometric 2.8.

The op starts from projected features (no linear layers): Graph Transformer q, k, v [N, H, D] and GAT h
[N, H, D] with att_src, att_dst [H, D], random, float32 (float64 on the CPU). dfgnn runs
dfgnn.torch.transformer / gat on a dfgnn.Graph. PyG runs what its TransformerConv / GATConv forward does
after the projections, through the layer's own message passing: GATConv's alpha_src/alpha_dst sums and
edge_updater (gather, leaky_relu, torch_geometric.utils.softmax), then propagate (index_select gathers of
x_i / x_j, message, sum aggregation with torch_geometric.utils.scatter). So the PyG side has PyG's memory
behaviour, not a hand-optimised one. The layers' linear weights are never used.

Graph: R-MAT from dfgnn's seeded generator (as bench/train_bench.py makes them), 2^scale nodes,
edges_per_node * 2^scale sampled edges, a=0.57, b=0.19, c=0.19, duplicates and self-loops dropped, node
ids permuted (scale 20: about 16.1M edges). PyG gets it as an int64 edge_index in dfgnn's CSR order.

For each configuration and direction ("fwd": forward under torch.no_grad; "fwd+bwd": forward, then
torch.autograd.grad of all inputs with a random grad_out), after warm-up calls:
  - extra peak = torch.cuda.max_memory_allocated() during one call - memory_allocated() before it
    (the op's own memory: outputs, gradients, temporaries, workspace); absolute peak as well;
  - time = median of --iters CUDA-event timed calls.
The absolute peak also holds what exists before the call: inputs, grad_out and PyG's edge_index (both sides).
dfgnn keeps its device copy of the graph (CSR + CSC, plans) outside torch's allocator; it is not in the
extra peak (just as PyG's edge_index, an input, is not). Its size is reported separately
("outside_torch_bytes": device memory taken outside torch during the warm-up calls).
Target of the issue: PyG extra peak / dfgnn extra peak >= 10 on the R-MAT graph.

First, on a small R-MAT graph (--check-scale), dfgnn's output and input gradients are compared with the
PyG computation (in float64 on the same inputs) so that the two sides cannot silently compute different
things. An out-of-memory error is recorded as "OOM" and the run goes on.

    python bench/attention_memory.py --json out/attention_memory.json
    python bench/attention_memory.py --device cpu --smoke      # CPU check (float64 reference path)

Exit status: 0 all checks passed and nothing failed (OOM is a result), 1 a check failed or a
measurement raised, 3 CUDA is not available.
"""

import argparse
import datetime
import functools
import gc
import json
import platform
import statistics
import sys
import time
import traceback

import torch

CONFIGS = {"gt-h1-d128": ("transformer", 1, 128), "gt-h4-d64": ("transformer", 4, 64),
           "gat-h1-d128": ("gat", 1, 128)}
DIRECTIONS = ("fwd", "fwd+bwd")
IMPLS = ("dfgnn", "pyg")
TARGET_RATIO = 10.0
MiB = 2 ** 20
# GAT's LeakyReLU slope: PyG's default 0.2 as dfgnn holds it. The op's field is a C float, 1.5e-8 away from a
# double 0.2, which the float64 check (CPU) would see as a 1e-9 disagreement with PyG.
NEGATIVE_SLOPE = torch.tensor(0.2, dtype=torch.float32).item()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--scale", type=int, help="R-MAT graph of 2^SCALE nodes (default 20; 10 with --smoke)")
    p.add_argument("--edges-per-node", type=int, default=16, help="R-MAT samples this many edges per node (16)")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS), help="(all)")
    p.add_argument("--iters", type=int, help="timed calls per measurement (default 20; 3 with --smoke)")
    p.add_argument("--warmup", type=int, help="untimed calls first (default 3; 1 with --smoke)")
    p.add_argument("--check-scale", type=int, default=10, help="R-MAT scale of the correctness check graph (10)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda (default) or cpu: float64 (dfgnn's CPU reference path), wall-clock times, no "
                        "memory figures")
    p.add_argument("--smoke", action="store_true", help="small sizes, to check the script")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    args = p.parse_args(argv)
    defaults = dict(scale=(10, 20), iters=(3, 20), warmup=(1, 3))
    for name, (smoke, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    return args


# ---------------------------------------------------------------- graph and inputs

def rmat_graph(scale, edges_per_node, device):
    """(dfgnn.Graph, int64 edge_index [2, E] on device in CSR order: row 0 source j, row 1 target i)."""
    import dfgnn
    g = dfgnn.Graph.rmat(scale, edges_per_node << scale, a=0.57, b=0.19, c=0.19, seed=1, dedup=True,
                         self_loops=False, permute=True)
    return g, torch.from_numpy(g.edge_index()).to(device)


def make_inputs(model, n, heads, dim, dtype, device):
    """Random leaf tensors requiring grad (attention vectors scaled by 1/sqrt(D) so scores stay O(1),
    as q.k/sqrt(D) does for the transformer)."""
    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, dtype=dtype, device=device) * std).requires_grad_()
    if model == "transformer":
        return dict(q=rnd(n, heads, dim), k=rnd(n, heads, dim), v=rnd(n, heads, dim))
    return dict(h=rnd(n, heads, dim), att_src=rnd(heads, dim, std=dim ** -0.5),
                att_dst=rnd(heads, dim, std=dim ** -0.5))


def seeded_inputs(args, name, n, dtype):
    """(model, heads, dim, inputs, grad_out) of a configuration, the same for every call with args.seed."""
    model, heads, dim = CONFIGS[name]
    torch.manual_seed(args.seed)
    x = make_inputs(model, n, heads, dim, dtype, args.device)
    grad_out = torch.randn(n, heads, dim, dtype=dtype, device=args.device)
    return model, heads, dim, x, grad_out


# ---------------------------------------------------------------- the two implementations

def pyg_layer(model, heads, dim):
    """The PyG layer whose message passing is used (its weights are not: in_channels is a dummy 1)."""
    import torch_geometric.nn as pyg_nn
    if model == "transformer":
        conv = pyg_nn.TransformerConv(1, dim, heads=heads, dropout=0.0, root_weight=False, bias=False)
    else:
        conv = pyg_nn.GATConv(1, dim, heads=heads, negative_slope=NEGATIVE_SLOPE, dropout=0.0,
                              add_self_loops=False, bias=False)
    return conv.eval()


def pyg_op(model, conv, edge_index, x):
    """PyG 2.8's TransformerConv / GATConv forward from the projections on (see their forward)."""
    if model == "transformer":
        out = conv.propagate(edge_index, query=x["q"], key=x["k"], value=x["v"], edge_attr=None)
        conv._alpha = None  # the layer keeps alpha for return_attention_weights; its forward drops it too
        return out
    h = x["h"]
    alpha = ((h * x["att_src"]).sum(dim=-1), (h * x["att_dst"]).sum(dim=-1))
    alpha = conv.edge_updater(edge_index, alpha=alpha, edge_attr=None, size=None)
    return conv.propagate(edge_index, x=(h, h), alpha=alpha, size=None)


def dfgnn_op(model, g, x):
    import dfgnn.torch as dt
    if model == "transformer":
        return dt.transformer(g, x["q"], x["k"], x["v"])  # scale 1/sqrt(D), as PyG
    return dt.gat(g, x["h"], x["att_src"], x["att_dst"], negative_slope=NEGATIVE_SLOPE)


def call(op, x, grad_out, direction):
    """One call of the op in a direction; returns what it produced (outputs or gradients)."""
    if direction == "fwd":
        with torch.no_grad():
            return op(x)
    out = op(x)
    return torch.autograd.grad(out, list(x.values()), grad_out)


# ---------------------------------------------------------------- correctness on a small graph

def check(args, configs, dtype):
    """dfgnn's output and gradients vs the PyG computation in float64 on the same inputs."""
    g, edge_index = rmat_graph(args.check_scale, args.edges_per_node, args.device)
    # float32: sums over a few hundred in-edges (and, for the attention vectors' gradients, over all edges)
    # round differently from the float64 reference; a different computation is off by far more than 1e-3
    tol = 1e-3 if dtype == torch.float32 else 1e-10
    rows = []
    for name in configs:
        model, heads, dim, x, grad_out = seeded_inputs(args, name, g.num_nodes, dtype)
        out = dfgnn_op(model, g, x)
        got = [out] + list(torch.autograd.grad(out, list(x.values()), grad_out))
        x64 = {k: v.detach().double().requires_grad_() for k, v in x.items()}
        conv = pyg_layer(model, heads, dim)
        ref_out = pyg_op(model, conv, edge_index, x64)
        want = [ref_out] + list(torch.autograd.grad(ref_out, list(x64.values()), grad_out.double()))
        row = dict(config=name, nodes=g.num_nodes, edges=g.num_edges, tolerance=tol, rel_err={}, ok=True)
        for what, a, b in zip(["out"] + list(x), got, want):
            a = a.detach().double()
            # elementwise, with an absolute slack relative to the tensor's largest value (gradients of
            # the attention vectors are sums over all edges; near-zero entries carry rounding only)
            ok = torch.allclose(a, b, rtol=tol, atol=tol * float(b.abs().max()))
            row["rel_err"][what] = float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))
            row["ok"] = row["ok"] and bool(ok)
        rows.append(row)
        errs = ", ".join(f"{k} {v:.1e}" for k, v in row["rel_err"].items())
        print(f"check {name} on R-MAT 2^{args.check_scale} ({g.num_edges} edges): "
              f"{'ok' if row['ok'] else 'FAILED'} (relative errors {errs}; tolerance {tol:g})", flush=True)
    return rows


# ---------------------------------------------------------------- measurements

def is_oom(exc):
    import dfgnn
    return (isinstance(exc, (torch.cuda.OutOfMemoryError, dfgnn.OutOfMemoryError, MemoryError))
            or "out of memory" in str(exc).lower())


def free():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def outside_torch_used():
    """Device memory in use that torch's allocator did not reserve (dfgnn's graph copies and plans,
    loaded kernels, the CUDA context)."""
    free_b, total = torch.cuda.mem_get_info()
    return total - free_b - torch.cuda.memory_reserved()


def times_ms(fn, iters, cuda):
    if not cuda:
        out = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t))
        return out
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def measure(args, fn):
    """Memory and time of fn() (one op call), or status "OOM" / "error"."""
    cuda = args.device == "cuda"
    row = {}
    try:
        if cuda:
            torch.cuda.synchronize()
            before = outside_torch_used()
        for _ in range(args.warmup):  # dfgnn: device graph copy, plans, kernel compiles
            fn()
        if cuda:
            torch.cuda.synchronize()
            row["outside_torch_bytes"] = outside_torch_used() - before
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            result = fn()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            del result
            row.update(base_bytes=base, peak_bytes=peak, extra_peak_bytes=peak - base)
        times = times_ms(fn, args.iters, cuda)
        row.update(status="ok", ms=statistics.median(times), ms_all=times)
    except Exception as exc:  # noqa: BLE001 - a failure becomes a row; OOM is an expected result for PyG
        row["status"] = "OOM" if is_oom(exc) else "error"
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        if row["status"] == "error":
            traceback.print_exc()
    finally:
        free()
    return row


def run(args, configs, dtype, save):
    g, edge_index = rmat_graph(args.scale, args.edges_per_node, args.device)
    max_deg = int(g.in_degrees().max(initial=0))
    print(f"R-MAT 2^{args.scale}: {g.num_nodes} nodes, {g.num_edges} edges, max in-degree {max_deg}, "
          f"{dtype}, {args.device}", flush=True)
    graph = dict(scale=args.scale, nodes=g.num_nodes, edges=g.num_edges, max_in_degree=max_deg,
                 edge_index_bytes=edge_index.numel() * edge_index.element_size())
    rows = []
    for name in configs:
        model, heads, dim, x, grad_out = seeded_inputs(args, name, g.num_nodes, dtype)
        conv = pyg_layer(model, heads, dim)
        ops = {"dfgnn": lambda x: dfgnn_op(model, g, x), "pyg": lambda x: pyg_op(model, conv, edge_index, x)}
        for direction in DIRECTIONS:
            for impl in IMPLS:
                row = dict(config=name, model=model, heads=heads, dim=dim, direction=direction, impl=impl)
                row.update(measure(args, functools.partial(call, ops[impl], x, grad_out, direction)))
                rows.append(row)
                print("  " + describe(row), flush=True)
        del x, grad_out
        free()
        save(graph, rows)  # after every configuration: a run cut short by its time limit keeps its results
    return graph, rows


def describe(row):
    head = f"{row['config']:12s} {row['direction']:8s} {row['impl']:6s}"
    if row["status"] != "ok":
        return f"{head} {row['status']}: {row.get('error', '')[:160]}"
    mem = ""
    if "extra_peak_bytes" in row:
        mem = (f", extra peak {row['extra_peak_bytes'] / MiB:.1f} MiB (absolute {row['peak_bytes'] / MiB:.1f}, "
               f"outside torch {row['outside_torch_bytes'] / MiB:.1f})")
    return f"{head} {row['ms']:.3f} ms{mem}"


def compare(rows):
    """One line per (config, direction): memory ratio = PyG extra peak / dfgnn extra peak, time ratio =
    PyG time / dfgnn time."""
    out = []
    for name in dict.fromkeys(r["config"] for r in rows):
        for direction in DIRECTIONS:
            pair = {r["impl"]: r for r in rows if r["config"] == name and r["direction"] == direction}
            d, p = pair.get("dfgnn", {}), pair.get("pyg", {})
            c = dict(config=name, direction=direction, dfgnn_status=d.get("status"), pyg_status=p.get("status"))
            for tag, r in (("dfgnn", d), ("pyg", p)):
                for key in ("extra_peak_bytes", "peak_bytes", "ms"):
                    c[f"{tag}_{key}"] = r.get(key)
            if c["dfgnn_extra_peak_bytes"] and c["pyg_extra_peak_bytes"] is not None:
                c["memory_ratio"] = c["pyg_extra_peak_bytes"] / c["dfgnn_extra_peak_bytes"]
                c["target_met"] = c["memory_ratio"] >= TARGET_RATIO
            elif c["dfgnn_extra_peak_bytes"] is not None and c["pyg_status"] == "OOM":
                c["target_met"] = True  # PyG does not fit in the device at all
            if d.get("ms") and p.get("ms") is not None:
                c["time_ratio"] = p["ms"] / d["ms"]
            out.append(c)
    return out


def markdown(meta, graph, comparison):
    def mib(c, tag):
        status = c[f"{tag}_status"]
        v = c[f"{tag}_extra_peak_bytes"]
        return f"{v / MiB:.1f}" if v is not None else ("-" if status == "ok" else str(status))

    def ms(c, tag):
        v = c[f"{tag}_ms"]
        return f"{v:.3f}" if v is not None else str(c[f"{tag}_status"])

    lines = [f"Attention op alone, R-MAT 2^{graph['scale']} ({graph['nodes']} nodes, {graph['edges']} edges), "
             f"{meta['dtype']}, {meta.get('device_name', meta['device'])}, PyG {meta['torch_geometric']}; "
             f"extra peak = max_memory_allocated - allocated before the call; median of {meta['iters']} calls.",
             "", "| config | direction | dfgnn extra peak MiB | PyG extra peak MiB | memory PyG/dfgnn | "
             f">= {TARGET_RATIO:g}x | dfgnn ms | PyG ms | time PyG/dfgnn |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for c in comparison:
        ratio = f"{c['memory_ratio']:.1f}x" if "memory_ratio" in c else "-"
        met = {True: "yes", False: "NO"}.get(c.get("target_met"), "-")
        if c.get("target_met") and "memory_ratio" not in c:
            met = "yes (PyG OOM)"
        speed = f"{c['time_ratio']:.2f}x" if "time_ratio" in c else "-"
        lines.append(f"| {c['config']} | {c['direction']} | {mib(c, 'dfgnn')} | {mib(c, 'pyg')} | {ratio} | {met} | "
                     f"{ms(c, 'dfgnn')} | {ms(c, 'pyg')} | {speed} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("attention_memory.py: CUDA is not available (--device cpu --smoke checks the script)",
              file=sys.stderr)
        return 3
    import dfgnn
    import torch_geometric
    dtype = torch.float32 if args.device == "cuda" else torch.float64  # the CPU path is float64 only
    meta = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), device=args.device,
                dtype=str(dtype).replace("torch.", ""), torch=torch.__version__,
                torch_geometric=torch_geometric.__version__, dfgnn=dfgnn.__version__,
                python=platform.python_version(), iters=args.iters, warmup=args.warmup, smoke=args.smoke,
                rmat=dict(a=0.57, b=0.19, c=0.19, seed=1, edges_per_node=args.edges_per_node, dedup=True,
                          self_loops=False, permute=True))
    if args.device == "cuda":
        meta["device_name"] = torch.cuda.get_device_name()

    checks = check(args, args.configs, dtype)
    free()

    def save(graph, rows):
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(meta=meta, graph=graph, checks=checks, rows=rows, comparison=compare(rows)), f,
                          indent=1)

    graph, rows = run(args, args.configs, dtype, save)
    comparison = compare(rows)
    print()
    print(markdown(meta, graph, comparison))
    failed = [c["config"] for c in checks if not c["ok"]]
    errors = [r for r in rows if r["status"] == "error"]
    if failed:
        print(f"\nCORRECTNESS CHECK FAILED for {', '.join(failed)}: dfgnn and PyG disagree, the comparison "
              "above is not of the same computation", flush=True)
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
