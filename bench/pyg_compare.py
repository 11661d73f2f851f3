#!/usr/bin/env python3
"""Compare dfgnn's fused GPU attention ops with PyTorch Geometric, for correctness and speed, in one run.

dfgnn is loaded through ctypes (bench/dfgnn_ctypes.py; no Python package needed). For every
(graph, model, dtype, heads H, channels D) the script

  1. builds the PyG layer (GATConv, GATv2Conv, TransformerConv, AGNNConv; no self-loops, no bias, no
     root weight) on random node features x [N, in_dim], and computes the layer's own projections
     (h = lin(x) = x @ W^T, q/k/v, h_dst) as [N, H, D] float32 tensors;
  2. rounds the features to the dtype under test (attention vectors and beta stay float32, as dfgnn
     takes them) and runs dfgnn's fused forward and backward on them (graph from the same int64
     edge_index on the device, dfgnnGraphCreateCoo);
  3. checks dfgnn against
       - "ref":   the attention-level formulation built from PyG's own pieces
                  (torch_geometric.utils.softmax, gather, index_add_), in float64 autograd on the same
                  rounded inputs: output and the gradient of every input (pass/fail, norm-wise
                  relative error, tolerance per dtype);
       - "layer": the real PyG layer's forward output and its autograd gradients (of the projections'
                  outputs, read through forward hooks, and of att / beta), in float32, with forward
                  hooks feeding it the same rounded projections dfgnn got (pass/fail);
     and also reports how far PyG's own float32 computation is from the float64 one ("pyg32");
  4. times (CUDA events, median of --iters after --warmup) forward and forward+backward of dfgnn,
     of the attention-level PyG formulation and of the real PyG layer (which also runs its linear
     projections; their cost is timed on its own as "lin"), and records peak memory
     (torch.cuda.max_memory_allocated over the memory allocated before the call).

Exit status: 0 all checks passed, 1 a check failed or a configuration raised, 2 bad arguments,
3 a prerequisite is missing (torch, CUDA device, torch_geometric, numpy, libdfgnn).
"""

import argparse
import copy
import datetime
import gzip
import json
import math
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import dfgnn_ctypes as dfg  # noqa: E402  (standard library only)

MODELS = ("gat", "gatv2", "transformer", "agnn")
DTYPES = ("float32", "float16", "bfloat16")
TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}
PYG_LAYER = {"gat": "GATConv", "gatv2": "GATv2Conv", "transformer": "TransformerConv", "agnn": "AGNNConv"}


# ------------------------------------------------------------------------------------------ arguments

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Compare dfgnn's fused GPU attention ops (via ctypes) with PyTorch Geometric layers: "
                    "correctness (outputs and gradients vs a float64 torch reference and vs the real PyG "
                    "layer) and speed (forward, forward+backward, peak memory).",
        epilog="Graph directories use the edge-list format of shared/datasets (header '# nodes N edges E ...', "
               "then 'src dst' lines; edges.txt or edges.txt.gz). A bare name such as 'cora' is also looked "
               "up under the repo's data/, shared/datasets/ and ../shared/datasets/. With neither --graphs nor "
               "--rmat, data/cora is used. Exit status: 0 all passed, 1 a check failed or errored, 2 bad "
               "arguments, 3 a prerequisite (torch, CUDA, torch_geometric, numpy, libdfgnn) is missing.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--lib", default=os.path.join(REPO_ROOT, "build", "libdfgnn.so"),
                   help="path of libdfgnn.so")
    p.add_argument("--graphs", nargs="*", default=[], metavar="DIR",
                   help="dataset directories (or edges.txt[.gz] files, or dataset names)")
    p.add_argument("--rmat", nargs="*", type=int, default=[], metavar="SCALE",
                   help="R-MAT graphs of 2^SCALE nodes made by dfgnnGraphCreateRmat (read back as CSR)")
    p.add_argument("--rmat-edge-factor", type=int, default=16, help="R-MAT samples edge_factor * 2^SCALE edges")
    p.add_argument("--rmat-abc", type=float, nargs=3, default=[0.57, 0.19, 0.19], metavar=("A", "B", "C"),
                   help="R-MAT quadrant probabilities (d = 1 - a - b - c)")
    p.add_argument("--rmat-symmetrize", action="store_true", help="R-MAT: add the reverse of every edge")
    p.add_argument("--rmat-permute", action="store_true", help="R-MAT: randomly relabel node ids")
    p.add_argument("--rmat-seed", type=int, default=1, help="R-MAT seed")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="models to compare")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32"], help="dfgnn feature dtypes")
    p.add_argument("--heads", nargs="+", type=int, default=[1, 4],
                   help="head counts H (AGNN has no heads in PyG: it runs with H=1 only)")
    p.add_argument("--dim", nargs="+", type=int, default=[64], help="channels per head D")
    p.add_argument("--in-dim", type=int, default=128,
                   help="input feature width of the PyG layers' linear projections (AGNN uses x of width D)")
    p.add_argument("--negative-slope", type=float, default=0.2, help="GAT/GATv2 LeakyReLU slope")
    p.add_argument("--iters", type=int, default=50, help="timed iterations (median reported)")
    p.add_argument("--warmup", type=int, default=10, help="untimed iterations before timing")
    p.add_argument("--seed", type=int, default=0, help="seed of features, weights and grad_out")
    p.add_argument("--schedule-fwd", default=None, help="force dfgnn's forward schedule (launch.schedule)")
    p.add_argument("--schedule-bwd", default=None, help="force dfgnn's backward schedule ('ROW|COL' or one)")
    p.add_argument("--pyg-time-dtype", choices=("same", "float32"), default="same",
                   help="dtype PyG is timed in: 'same' as dfgnn (falls back to float32 if PyG fails), or "
                        "always float32. Correctness always uses float32/float64 references.")
    p.add_argument("--skip-timing", action="store_true", help="correctness checks only")
    p.add_argument("--skip-layer", action="store_true", help="leave out the real PyG layer (check and timing)")
    p.add_argument("--no-fp64", action="store_true",
                   help="use the float32 PyG formulation as the reference instead of float64")
    p.add_argument("--out", default=None, metavar="JSON", help="write all results as JSON (rewritten after "
                   "every configuration, so a partial run leaves its results)")
    p.add_argument("--markdown", default=None, metavar="PATH", help="append a Markdown table of the results")
    args = p.parse_args(argv)
    if not args.graphs and not args.rmat:
        args.graphs = [os.path.join(REPO_ROOT, "data", "cora")]
    for name in ("iters", "warmup", "in_dim", "rmat_edge_factor"):
        if getattr(args, name) < (1 if name != "warmup" else 0):
            p.error(f"--{name.replace('_', '-')} must be positive")
    if any(h < 1 for h in args.heads) or any(d < 1 for d in args.dim):
        p.error("--heads and --dim must be >= 1")
    if any(s < 1 or s > 30 for s in args.rmat):
        p.error("--rmat SCALE must be in 1..30")
    return args


def prerequisite_missing(reason):
    print(f"pyg_compare: {reason}; nothing was run", file=sys.stderr)
    return 3


# ------------------------------------------------------------------------------------------ graphs

def resolve_graph(spec):
    """A dataset directory, an edges file, or a bare dataset name."""
    candidates = [spec]
    if not os.path.isabs(spec):
        for base in (REPO_ROOT, os.path.join(REPO_ROOT, "data"), os.path.join(REPO_ROOT, "shared", "datasets"),
                     os.path.join(REPO_ROOT, "..", "shared", "datasets")):
            candidates.append(os.path.join(base, spec))
    for c in candidates:
        if os.path.isdir(c):
            for f in ("edges.txt", "edges.txt.gz"):
                if os.path.isfile(os.path.join(c, f)):
                    return os.path.join(c, f)
        elif os.path.isfile(c):
            return c
    raise FileNotFoundError(f"graph '{spec}': no directory with edges.txt[.gz] or file found "
                            f"(looked at {', '.join(os.path.normpath(c) for c in candidates)})")


def graph_name(spec, path):
    base = os.path.basename(os.path.normpath(spec))
    if base.startswith("edges.txt"):
        base = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return base


def read_edge_list(path, np):
    """Returns (num_nodes, edge_index int64 [2, E], header line)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        header = f.readline().strip()
    tokens = header.split()
    if not header.startswith("#") or "nodes" not in tokens:
        raise ValueError(f"{path}: first line is not a '# nodes N edges E ...' header: {header[:80]!r}")
    num_nodes = int(tokens[tokens.index("nodes") + 1])
    num_edges = int(tokens[tokens.index("edges") + 1]) if "edges" in tokens else None
    # loadtxt reads .gz itself and skips the '#' header.
    pairs = np.loadtxt(path, dtype=np.int64, comments="#", ndmin=2)
    if pairs.size == 0:
        pairs = np.zeros((0, 2), dtype=np.int64)
    if pairs.shape[1] != 2:
        raise ValueError(f"{path}: expected 'src dst' lines, got {pairs.shape[1]} columns")
    edge_index = np.ascontiguousarray(pairs.T)
    if num_edges is not None and edge_index.shape[1] != num_edges:
        raise ValueError(f"{path}: header says {num_edges} edges, file has {edge_index.shape[1]}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"{path}: a node id is outside [0, {num_nodes})")
    return num_nodes, edge_index, header


def rmat_edge_index(ctx, scale, args, np):
    """Generates an R-MAT graph in dfgnn and reads its CSR back: src = col_idx, dst = CSR row."""
    flags = dfg.RMAT_DEDUPLICATE | dfg.RMAT_NO_SELF_LOOPS
    if args.rmat_symmetrize:
        flags |= dfg.RMAT_SYMMETRIZE
    if args.rmat_permute:
        flags |= dfg.RMAT_PERMUTE_IDS
    a, b, c = args.rmat_abc
    g = ctx.graph_rmat(scale, args.rmat_edge_factor * (1 << scale), a, b, c, flags, args.rmat_seed)
    try:
        n, e = g.size()
        row_ptr_p, col_idx_p, _ = g.csr(dfg.MEMORY_HOST)
        row_ptr = np.ctypeslib.as_array(row_ptr_p, shape=(n + 1,)).astype(np.int64)
        col = np.ctypeslib.as_array(col_idx_p, shape=(e,)).astype(np.int64) if e else np.zeros(0, np.int64)
    finally:
        g.close()
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(row_ptr))
    desc = (f"rmat scale={scale} edges={args.rmat_edge_factor}*2^{scale} a,b,c={a},{b},{c} flags={flags} "
            f"seed={args.rmat_seed}")
    return n, np.ascontiguousarray(np.stack([col, dst])), desc


# ------------------------------------------------------------------------------------------ torch side

class Env:
    """Modules and handles shared by every configuration."""

    def __init__(self, args, torch, F, np, pyg, pyg_nn, pyg_softmax, lib, ctx):
        self.args, self.torch, self.F, self.np = args, torch, F, np
        self.pyg, self.pyg_nn, self.pyg_softmax = pyg, pyg_nn, pyg_softmax
        self.lib, self.ctx = lib, ctx
        self.device = torch.device("cuda")
        self.tdtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                       "float64": torch.float64}


def model_slots(model):
    return dfg.MODEL_SLOTS[dfg.MODELS[model]]


def attention_torch(env, model, src, dst, num_nodes, t, slope, scale):
    """The attention op written with PyG's building blocks (what PyG's layers do after their linear
    projections): per-edge scores, torch_geometric.utils.softmax over each target's in-edges,
    messages alpha * x_j, and a sum into the targets. t: slot -> tensor ([N,H,D] features, [H,D]
    attention vectors, [1] beta). Returns out [N, H, D]."""
    torch, F = env.torch, env.F
    if model == "gat":
        h = t["h"]
        a_src = (h * t["att_src"]).sum(-1)
        a_dst = (h * t["att_dst"]).sum(-1)
        e = F.leaky_relu(a_src.index_select(0, src) + a_dst.index_select(0, dst), slope)
        x_j = h.index_select(0, src)
    elif model == "gatv2":
        x_j = t["h"].index_select(0, src)
        z = t["h_dst"].index_select(0, dst) + x_j
        e = (F.leaky_relu(z, slope) * t["att_src"]).sum(-1)
    elif model == "transformer":
        e = (t["q"].index_select(0, dst) * t["k"].index_select(0, src)).sum(-1) * scale
        x_j = t["v"].index_select(0, src)
    elif model == "agnn":
        h = t["h"]
        hn = F.normalize(h, p=2.0, dim=-1)
        e = t["beta"] * (hn.index_select(0, dst) * hn.index_select(0, src)).sum(-1)
        x_j = h.index_select(0, src)
    else:
        raise ValueError(model)
    alpha = env.pyg_softmax(e, dst, num_nodes=num_nodes)
    msg = alpha.unsqueeze(-1) * x_j
    return torch.zeros((num_nodes,) + tuple(x_j.shape[1:]), dtype=msg.dtype, device=msg.device).index_add_(
        0, dst, msg)


def make_layer(env, model, in_dim, heads, dim, slope):
    nn = env.pyg_nn
    if model == "gat":
        return nn.GATConv(in_dim, dim, heads=heads, concat=True, negative_slope=slope, dropout=0.0,
                          add_self_loops=False, bias=False)
    if model == "gatv2":
        return nn.GATv2Conv(in_dim, dim, heads=heads, concat=True, negative_slope=slope, dropout=0.0,
                            add_self_loops=False, bias=False, share_weights=False)
    if model == "transformer":
        return nn.TransformerConv(in_dim, dim, heads=heads, concat=True, beta=False, dropout=0.0,
                                  root_weight=False, bias=False)
    if model == "agnn":
        return nn.AGNNConv(requires_grad=True, add_self_loops=False)
    raise ValueError(model)


def layer_projections(model, conv):
    """slot -> the layer's Linear module that produces that [N, H*D] feature."""
    if model == "gat":
        lin = getattr(conv, "lin", None)
        return {"h": lin if lin is not None else conv.lin_src}
    if model == "gatv2":
        return {"h": conv.lin_l, "h_dst": conv.lin_r}
    if model == "transformer":
        return {"q": conv.lin_query, "k": conv.lin_key, "v": conv.lin_value}
    return {}


def layer_parameters(model, conv):
    """slot -> the layer's Parameter holding that attention vector / beta."""
    if model == "gat":
        return {"att_src": conv.att_src, "att_dst": conv.att_dst}
    if model == "gatv2":
        return {"att_src": conv.att}
    if model == "agnn":
        return {"beta": conv.beta}
    return {}


def rel_err(torch, a, b):
    """||a - b|| / ||b|| in float64 (||a - b|| if b is 0); inf if anything is not finite."""
    a64 = a.detach().reshape(-1).double()
    b64 = b.detach().reshape(-1).double()
    if a64.numel() != b64.numel():
        raise ValueError(f"size mismatch {a64.numel()} vs {b64.numel()}")
    diff = torch.linalg.vector_norm(a64 - b64).item()
    ref = torch.linalg.vector_norm(b64).item()
    if not (math.isfinite(diff) and math.isfinite(ref)):
        return float("inf")
    return diff / ref if ref > 0 else diff


class DfgnnRunner:
    """One dfgnn op bound to its device inputs; allocates outputs, lse, grads and workspace per call
    (from torch's caching allocator, so they count in torch's peak memory)."""

    def __init__(self, env, graph, op, inputs, num_nodes, heads, dim, dtype):
        self.env, self.graph, self.op = env, graph, op
        self.inputs = inputs  # slot -> tensor (kept alive)
        self.ptrs = {s: t.data_ptr() for s, t in inputs.items()}
        self.n, self.h, self.d, self.dtype = num_nodes, heads, dim, dtype
        torch = env.torch
        self.stream = torch.cuda.current_stream().cuda_stream or None
        self.sched_f = env.args.schedule_fwd
        self.sched_b = env.args.schedule_bwd
        self.ws_fwd = env.ctx.workspace_size(graph, op, dfg.FORWARD, self.sched_f)
        self.ws_bwd = env.ctx.workspace_size(graph, op, dfg.BACKWARD, self.sched_b)

    def _workspace(self, nbytes):
        torch = self.env.torch
        ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        return ws, (ws.data_ptr() if nbytes else None)

    def forward(self):
        torch = self.env.torch
        out = torch.empty((self.n, self.h, self.d), dtype=self.dtype, device="cuda")
        lse = torch.empty((self.n, self.h), dtype=torch.float32, device="cuda")
        ws, ws_ptr = self._workspace(self.ws_fwd)
        self.env.ctx.forward(self.graph, self.op, self.ptrs, out.data_ptr(), lse.data_ptr(), stream=self.stream,
                             workspace_ptr=ws_ptr, workspace_bytes=self.ws_fwd, schedule=self.sched_f)
        return out, lse

    def backward(self, out, lse, grad_out):
        torch = self.env.torch
        grads = {s: torch.empty_like(t) for s, t in self.inputs.items()}
        ws, ws_ptr = self._workspace(self.ws_bwd)
        self.env.ctx.backward(self.graph, self.op, self.ptrs, out.data_ptr(), lse.data_ptr(), grad_out.data_ptr(),
                              {s: g.data_ptr() for s, g in grads.items()}, stream=self.stream,
                              workspace_ptr=ws_ptr, workspace_bytes=self.ws_bwd, schedule=self.sched_b)
        return grads

    def forward_backward(self, grad_out):
        out, lse = self.forward()
        return out, self.backward(out, lse, grad_out)


def cuda_usable(torch):
    """False once the CUDA context is broken (a sticky error such as an illegal address)."""
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def time_cuda(torch, fn, warmup, iters):
    """Median (and min/max) of CUDA-event times of fn() on the current stream, after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return {"median_ms": statistics.median(times), "min_ms": times[0], "max_ms": times[-1], "iters": iters}


def peak_memory(torch, fn):
    """Peak bytes allocated by torch during fn() over what was allocated before it."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del result
    return int(peak)


def measure(env, fn):
    """Timing and peak memory of fn, or the error it raised (out of memory is recorded, not fatal)."""
    torch, args = env.torch, env.args
    try:
        r = time_cuda(torch, fn, args.warmup, args.iters)
        r["peak_bytes"] = peak_memory(torch, fn)
        return r
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return {"error": "out of memory: " + str(e).splitlines()[0]}
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        cuda_usable(torch)
        return {"error": f"{type(e).__name__}: {e}"}


# ------------------------------------------------------------------------------------------ one configuration

def run_config(env, gi, model, dtype_name, heads, dim):
    torch, args = env.torch, env.args
    n, ei, src, dst, dgraph = gi["num_nodes"], gi["edge_index"], gi["src"], gi["dst"], gi["dfgnn_graph"]
    tdt = env.tdtype[dtype_name]
    tol = TOLERANCES[dtype_name]
    slope = args.negative_slope
    scale = 1.0 / math.sqrt(dim)
    slots = model_slots(model)
    res = {"graph": gi["name"], "num_nodes": n, "num_edges": gi["num_edges"], "model": model,
           "pyg_layer": PYG_LAYER[model], "dtype": dtype_name, "heads": heads, "dim": dim,
           "in_dim": dim if model == "agnn" else args.in_dim, "tolerance": tol}

    # ---- inputs: the PyG layer, its projections in float32, rounded copies for dfgnn
    torch.manual_seed(args.seed)
    in_dim = res["in_dim"]
    conv = make_layer(env, model, in_dim, heads, dim, slope).to(env.device).eval()
    x = torch.randn(n, in_dim, device=env.device)
    if model == "agnn":
        with torch.no_grad():
            conv.beta.fill_(float(torch.empty(1).uniform_(0.5, 2.0)))
    projections = layer_projections(model, conv)
    params = layer_parameters(model, conv)
    feats32 = {}
    with torch.no_grad():
        for s, lin in projections.items():
            feats32[s] = lin(x).view(n, heads, dim).contiguous()  # = x @ W^T (no bias)
        if model == "agnn":
            feats32["h"] = x.view(n, 1, dim).contiguous()
    params32 = {s: p.detach().float().reshape(1 if s == "beta" else (heads, dim)).contiguous()
                for s, p in params.items()}
    inputs_lp = {s: (feats32[s].to(tdt).contiguous() if s in dfg.FEATURE_SLOTS else params32[s]) for s in slots}
    grad_out_lp = torch.randn(n, heads, dim, device=env.device).to(tdt).contiguous()

    # ---- dfgnn
    op = env.lib.op(model, dtype_name, heads, dim, negative_slope=slope)
    runner = DfgnnRunner(env, dgraph, op, inputs_lp, n, heads, dim, tdt)
    res["schedule_fwd"] = env.ctx.schedule(dgraph, op, dfg.FORWARD, args.schedule_fwd)
    res["schedule_bwd"] = env.ctx.schedule(dgraph, op, dfg.BACKWARD, args.schedule_bwd)
    res["workspace_bytes"] = {"fwd": runner.ws_fwd, "bwd": runner.ws_bwd}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    d_out, d_lse = runner.forward()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    d_grads = runner.backward(d_out, d_lse, grad_out_lp)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    res["first_call_s"] = {"fwd": t1 - t0, "bwd": t2 - t1}  # includes NVRTC compiles and device graph build
    out2, grads2 = runner.forward_backward(grad_out_lp)
    torch.cuda.synchronize()
    res["bitwise_reproducible"] = bool(torch.equal(out2, d_out) and all(torch.equal(grads2[s], d_grads[s])
                                                                         for s in d_grads))
    del out2, grads2

    checks = {}  # name -> (err, tol)

    # ---- references: attention-level PyG formulation in float64 (and float32) on the rounded inputs
    def reference(dt):
        t = {s: v.detach().to(dt).requires_grad_() for s, v in inputs_lp.items()}
        out = attention_torch(env, model, src, dst, n, t, slope, scale)
        grads = torch.autograd.grad(out, [t[s] for s in slots], grad_out_lp.to(dt))
        return out.detach(), dict(zip(slots, (g.detach() for g in grads)))

    ref_kind = "float32" if args.no_fp64 else "float64"
    ref64 = None
    if not args.no_fp64:
        try:
            ref64 = reference(torch.float64)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            ref_kind = "float32 (float64 reference ran out of memory)"
    ref32 = reference(torch.float32)
    torch.cuda.empty_cache()
    ref = ref64 if ref64 is not None else ref32
    res["reference"] = ref_kind
    res["err_ref"] = {"out": rel_err(torch, d_out, ref[0])}
    for s in slots:
        res["err_ref"][s] = rel_err(torch, d_grads[s], ref[1][s])
    for k, v in res["err_ref"].items():
        checks[f"ref.{k}"] = (v, tol)
    if ref64 is not None:
        res["err_pyg32_vs_ref"] = {"out": rel_err(torch, ref32[0], ref64[0])}
        for s in slots:
            res["err_pyg32_vs_ref"][s] = rel_err(torch, ref32[1][s], ref64[1][s])

    # ---- the real PyG layer in float32. Forward hooks on its projections replace each projection's
    # output by the same rounded values dfgnn got (a no-op for float32) and keep it as the tensor to
    # differentiate against; AGNN's input x is rounded the same way.
    if not args.skip_layer:
        captured = {}

        def hook_for(slot):
            def hook(_module, _inputs, output):
                rounded = output.to(tdt).float()
                captured.setdefault(slot, []).append(rounded)
                return rounded
            return hook

        handles = [lin.register_forward_hook(hook_for(s)) for s, lin in projections.items()]
        try:
            xr = x.detach().to(tdt).float().requires_grad_() if model == "agnn" else x
            l_out = conv(xr, ei)
        finally:
            for hnd in handles:
                hnd.remove()
        l_out3 = l_out.view(n, heads, dim)
        res["err_layer"] = {"out": rel_err(torch, d_out, l_out3)}
        res["err_ref_vs_layer"] = {"out": rel_err(torch, ref[0], l_out3)}
        targets = {}
        for s in projections:
            if len(captured.get(s, [])) == 1:
                targets[s] = captured[s][0]
        if model == "agnn":
            targets["h"] = xr
        targets.update(params)
        missing = [s for s in slots if s not in targets]
        if missing:
            res["layer_grad_note"] = f"no layer gradient for {missing} (projection not seen exactly once)"
        names = [s for s in slots if s in targets]
        l_grads = torch.autograd.grad(l_out, [targets[s] for s in names], grad_out_lp.float().reshape(l_out.shape),
                                      allow_unused=True)
        for s, gl in zip(names, l_grads):
            if gl is None:
                continue
            res["err_layer"][s] = rel_err(torch, d_grads[s], gl.reshape(d_grads[s].shape))
        for k, v in res["err_layer"].items():
            checks[f"layer.{k}"] = (v, tol)
        del l_out, l_out3, l_grads, captured, targets

    failed = [f"{k}={v:.2e}>{t:g}" for k, (v, t) in checks.items() if not (v <= t)]
    res["status"] = "FAIL" if failed else "PASS"
    res["failed_checks"] = failed
    del ref, ref32, ref64
    torch.cuda.empty_cache()

    # ---- timing and memory
    if not args.skip_timing:
        timing = {}
        timing["dfgnn_fwd"] = measure(env, runner.forward)
        timing["dfgnn_fwdbwd"] = measure(env, lambda: runner.forward_backward(grad_out_lp))

        def pyg_inputs(dt):
            return {s: v.detach().to(dt).requires_grad_() for s, v in inputs_lp.items()}

        def timed_in(label, make_fns):
            """Times make_fns(dt) -> (fwd, fwdbwd) in the PyG timing dtype; if PyG fails in a low
            precision dtype (other than by running out of memory), falls back to float32."""
            order = [tdt] if args.pyg_time_dtype == "same" else [torch.float32]
            if order[0] != torch.float32:
                order.append(torch.float32)
            last = None
            for dt in order:
                try:
                    fwd, fwdbwd = make_fns(dt)
                except Exception as e:  # noqa: BLE001
                    last = {"error": f"{type(e).__name__}: {e}"}
                    continue
                a = measure(env, fwd)
                b = measure(env, fwdbwd) if "error" not in a else dict(a)
                bad = [m for m in (a, b) if "error" in m and "out of memory" not in m["error"]]
                last = (a, b)
                if bad and dt != order[-1]:
                    continue
                break
            if isinstance(last, dict):
                last = (last, dict(last))
            for m in last:
                m["dtype"] = str(dt).replace("torch.", "")
            timing[label + "_fwd"], timing[label + "_fwdbwd"] = last

        def att_fns(dt):
            t = pyg_inputs(dt)
            g = grad_out_lp.to(dt)
            lst = [t[s] for s in slots]
            return (lambda: attention_torch(env, model, src, dst, n, t, slope, scale),
                    lambda: torch.autograd.grad(attention_torch(env, model, src, dst, n, t, slope, scale), lst, g))

        timed_in("pyg_att", att_fns)

        if not args.skip_layer:
            def layer_fns(dt):
                c = copy.deepcopy(conv).to(dt)
                xt = x.detach().to(dt).requires_grad_()
                g = grad_out_lp.to(dt).reshape(n, -1)
                wrt = [xt] + [p for p in c.parameters() if p.requires_grad]
                return (lambda: c(xt, ei), lambda: torch.autograd.grad(c(xt, ei), wrt, g, allow_unused=True))

            timed_in("pyg_layer", layer_fns)

            if projections:
                def lin_fns(dt):
                    lins = [copy.deepcopy(m).to(dt) for m in projections.values()]
                    xt = x.detach().to(dt).requires_grad_()
                    g = grad_out_lp.to(dt).reshape(n, -1)
                    wrt = [xt] + [p for m in lins for p in m.parameters()]

                    def fwdbwd():
                        outs = [m(xt) for m in lins]
                        return torch.autograd.grad(outs, wrt, [g] * len(outs), allow_unused=True)
                    return (lambda: [m(xt) for m in lins], fwdbwd)

                timed_in("pyg_lin", lin_fns)

        res["timing"] = timing
        res["speedup"] = speedups(timing)
    del runner, d_out, d_lse, d_grads, conv, x, inputs_lp
    torch.cuda.empty_cache()
    return res


def med(timing, key):
    v = timing.get(key) or {}
    return v.get("median_ms")


def speedups(timing):
    s = {}
    for phase in ("fwd", "fwdbwd"):
        d = med(timing, f"dfgnn_{phase}")
        for other in ("pyg_att", "pyg_layer"):
            o = med(timing, f"{other}_{phase}")
            if d and o:
                s[f"{other}_over_dfgnn_{phase}"] = o / d
        lin, layer = med(timing, f"pyg_lin_{phase}"), med(timing, f"pyg_layer_{phase}")
        if d and lin and layer:
            s[f"pyg_layer_over_dfgnn_plus_lin_{phase}_est"] = layer / (d + lin)
    return s


# ------------------------------------------------------------------------------------------ reporting

def fmt_err(v):
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return "inf"
    return f"{v:.1e}"


def fmt_ms(entry):
    if not entry:
        return "-"
    if "error" in entry:
        return "OOM" if "out of memory" in entry["error"] else "ERR"
    return f"{entry['median_ms']:.3f}"


def fmt_x(v):
    return "-" if v is None else f"{v:.2f}x"


def fmt_mib(entry):
    if not entry or "peak_bytes" not in entry:
        return "-"
    mib = entry["peak_bytes"] / 2**20
    return f"{mib:.1f}" if mib < 10 else f"{mib:.0f}"


def max_grad(errs, slots):
    vals = [(errs[s], s) for s in slots if errs and s in errs]
    if not vals:
        return None, None
    v, s = max(vals, key=lambda p: (p[0] if math.isfinite(p[0]) else float("inf")))
    return v, s


TABLE_HEADER = ["graph", "model", "dtype", "H", "D", "status", "out err", "grad err (max)", "layer out err",
                "layer grad err (max)", "fwd ms dfgnn/att/layer", "f+b ms dfgnn/att/layer",
                "speedup fwd att/layer", "speedup f+b att/layer", "peak MiB f+b dfgnn/att/layer"]


def table_rows(results):
    rows = []
    for r in results:
        if r.get("status") == "ERROR":
            rows.append([r["graph"], r["model"], r["dtype"], str(r["heads"]), str(r["dim"]), "ERROR"]
                        + ["-"] * (len(TABLE_HEADER) - 7) + [r.get("error", "")[:80]])
            continue
        slots = model_slots(r["model"])
        er, el = r.get("err_ref", {}), r.get("err_layer")
        g, gs = max_grad(er, slots)
        lg, lgs = max_grad(el, slots) if el else (None, None)
        t = r.get("timing", {})
        sp = r.get("speedup", {})

        def trio(phase, fmt):
            return "/".join(fmt(t.get(f"{k}_{phase}")) for k in ("dfgnn", "pyg_att", "pyg_layer")) if t else "-"

        def ratios(phase):
            if not t:
                return "-"
            return "/".join(fmt_x(sp.get(f"{k}_over_dfgnn_{phase}")) for k in ("pyg_att", "pyg_layer"))

        rows.append([
            r["graph"], r["model"], r["dtype"], str(r["heads"]), str(r["dim"]), r["status"],
            fmt_err(er.get("out")), f"{fmt_err(g)} ({gs})" if gs else "-",
            fmt_err(el.get("out")) if el else "-", f"{fmt_err(lg)} ({lgs})" if lgs else "-",
            trio("fwd", fmt_ms), trio("fwdbwd", fmt_ms), ratios("fwd"), ratios("fwdbwd"), trio("fwdbwd", fmt_mib),
        ])
    return rows


def print_table(results):
    rows = table_rows(results)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(TABLE_HEADER)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(TABLE_HEADER, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def markdown(meta, graphs, results):
    lines = [f"### dfgnn vs PyG ({meta['date']}, {meta['gpu']})", "",
             f"torch {meta['torch']}, torch_geometric {meta['torch_geometric']}, dfgnn {meta['dfgnn']}; "
             f"median of {meta['iters']} CUDA-event timings after {meta['warmup']} warm-ups; errors are "
             f"norm-wise relative (out and the gradient with the largest error) vs a float64 torch reference "
             f"on the same rounded inputs, and vs the real PyG layer in float32 on the same rounded projections; "
             f"PyG timed in {'the dtype under test' if meta['pyg_time_dtype'] == 'same' else 'float32'}; peak memory is torch's, over what was allocated before the "
             f"call (dfgnn's own graph/plan buffers are not counted).", "",
             "Graphs: " + "; ".join(f"{g['name']} (N={g['num_nodes']}, E={g['num_edges']}, max in-degree "
                                    f"{g['max_in_degree']})" for g in graphs), "",
             f"Command: `{meta['command']}`", "",
             "| " + " | ".join(TABLE_HEADER) + " |",
             "|" + "|".join("---" for _ in TABLE_HEADER) + "|"]
    for r in table_rows(results):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    lines.append("")
    return "\n".join(lines) + "\n"


def sanitize(obj):
    """JSON-safe copy: non-finite floats become strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def write_json(path, meta, graphs, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(sanitize({"meta": meta, "graphs": graphs, "results": results}), f, indent=1)
    os.replace(tmp, path)


def progress_line(r):
    if r.get("status") == "ERROR":
        return f"  {r['model']:<11} {r['dtype']:<8} H={r['heads']:<2} D={r['dim']:<4} ERROR {r.get('error', '')}"
    er = r.get("err_ref", {})
    g, gs = max_grad(er, model_slots(r["model"]))
    el = r.get("err_layer", {}) or {}
    t = r.get("timing", {})
    line = (f"  {r['model']:<11} {r['dtype']:<8} H={r['heads']:<2} D={r['dim']:<4} {r['status']}  "
            f"out {fmt_err(er.get('out'))} grad {fmt_err(g)} ({gs}) layer {fmt_err(el.get('out'))}")
    if t:
        line += (f" | fwd dfgnn {fmt_ms(t.get('dfgnn_fwd'))} att {fmt_ms(t.get('pyg_att_fwd'))} layer "
                 f"{fmt_ms(t.get('pyg_layer_fwd'))} ms | f+b dfgnn {fmt_ms(t.get('dfgnn_fwdbwd'))} att "
                 f"{fmt_ms(t.get('pyg_att_fwdbwd'))} layer {fmt_ms(t.get('pyg_layer_fwdbwd'))} ms")
    if r.get("failed_checks"):
        line += "\n      failed: " + ", ".join(r["failed_checks"])
    return line


# ------------------------------------------------------------------------------------------ main

def main(argv=None):
    args = parse_args(argv)

    # Prerequisites, imported only now so that --help works anywhere.
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        return prerequisite_missing(f"torch is not importable ({e})")
    if not torch.cuda.is_available():
        return prerequisite_missing(f"torch {torch.__version__} sees no CUDA device")
    try:
        import numpy as np
    except ImportError as e:
        return prerequisite_missing(f"numpy is not importable ({e})")
    try:
        import torch_geometric
        import torch_geometric.nn as pyg_nn
        from torch_geometric.utils import softmax as pyg_softmax
    except ImportError as e:
        return prerequisite_missing(f"torch_geometric is not importable ({e})")
    try:
        lib = dfg.load(args.lib)
    except OSError as e:
        return prerequisite_missing(f"cannot load {args.lib} ({e})")

    torch.cuda.init()
    torch.empty(1, device="cuda")  # make the primary context current before dfgnn's first CUDA call
    ctx = dfg.Context(lib)
    has, reason = ctx.has_device()
    if not has:
        ctx.close()
        return prerequisite_missing(f"dfgnn sees no usable CUDA device ({reason})")

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "gpu": props.name, "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
        "cuda": torch.version.cuda, "dfgnn": lib.version(), "lib": lib.path, "python": platform.python_version(),
        "iters": args.iters, "warmup": args.warmup, "seed": args.seed, "tolerances": TOLERANCES,
        "pyg_time_dtype": args.pyg_time_dtype, "deterministic": True,
    }
    env = Env(args, torch, F, np, torch_geometric, pyg_nn, pyg_softmax, lib, ctx)
    print(f"dfgnn {meta['dfgnn']} ({lib.path}) | torch {meta['torch']} (CUDA {meta['cuda']}) | "
          f"torch_geometric {meta['torch_geometric']} | {meta['gpu']}", flush=True)

    # Graph list: (name, loader)
    sources = [("file", g) for g in args.graphs] + [("rmat", s) for s in args.rmat]
    graphs, results = [], []
    any_bad = False
    cuda_broken = False
    for kind, spec in sources:
        if cuda_broken:
            break
        try:
            if kind == "file":
                path = resolve_graph(spec)
                t0 = time.perf_counter()
                n, edge_index, desc = read_edge_list(path, np)
                name = graph_name(spec, path)
                source = path
            else:
                t0 = time.perf_counter()
                n, edge_index, desc = rmat_edge_index(ctx, spec, args, np)
                name = f"rmat{spec}"
                source = desc
            load_s = time.perf_counter() - t0
            ei = torch.from_numpy(edge_index).to(env.device).contiguous()
            e = int(ei.shape[1])
            torch.cuda.synchronize()
            dgraph = ctx.graph_coo(n, e, ei.data_ptr() if e else None, dfg.INDEX_INT64, dfg.MEMORY_DEVICE)
            dn, de = dgraph.size()
            if (dn, de) != (n, e):
                raise RuntimeError(f"dfgnn graph has N={dn}, E={de}; edge_index has N={n}, E={e}")
            fp = dgraph.fingerprint()
            ginfo = {"name": name, "source": source, "header": desc, "num_nodes": n, "num_edges": e,
                     "max_in_degree": int(fp.max_degree), "mean_degree": float(fp.mean_degree),
                     "bucket_key": dgraph.bucket_key(), "load_s": load_s}
            graphs.append(ginfo)
            gi = dict(ginfo, edge_index=ei, src=ei[0], dst=ei[1], dfgnn_graph=dgraph)
        except Exception as ex:  # noqa: BLE001
            any_bad = True
            print(f"graph {spec}: ERROR {type(ex).__name__}: {ex}", flush=True)
            graphs.append({"name": str(spec), "error": f"{type(ex).__name__}: {ex}"})
            continue

        print(f"\n{gi['name']}: N={gi['num_nodes']} E={gi['num_edges']} max in-degree {gi['max_in_degree']} "
              f"({gi['bucket_key']})", flush=True)
        for model in args.models:
            heads_list = [1] if model == "agnn" else list(dict.fromkeys(args.heads))
            if model == "agnn" and args.heads != [1]:
                print("  agnn: PyG's AGNNConv has no heads; compared with H=1 only", flush=True)
            for dtype_name in args.dtypes:
                for heads in heads_list:
                    for dim in dict.fromkeys(args.dim):
                        if cuda_broken:
                            continue
                        try:
                            r = run_config(env, gi, model, dtype_name, heads, dim)
                        except Exception as ex:  # noqa: BLE001 - one bad configuration does not stop the run
                            r = {"graph": gi["name"], "num_nodes": gi["num_nodes"], "num_edges": gi["num_edges"],
                                 "model": model, "dtype": dtype_name, "heads": heads, "dim": dim,
                                 "status": "ERROR", "error": f"{type(ex).__name__}: {ex}"}
                            if cuda_usable(torch):
                                torch.cuda.empty_cache()
                            else:
                                cuda_broken = True
                                r["error"] += " (the CUDA context is broken: the remaining configurations are skipped)"
                        if r["status"] != "PASS":
                            any_bad = True
                        results.append(r)
                        print(progress_line(r), flush=True)
                        if args.out:
                            write_json(args.out, meta, graphs, results)
        if not cuda_broken:
            gi["dfgnn_graph"].close()
            torch.cuda.empty_cache()
        del gi

    if not cuda_broken:
        meta["dfgnn_module_cache"] = ctx.cache_counters()
        ctx.close()
    print_table(results)
    n_pass = sum(r["status"] == "PASS" for r in results)
    n_fail = sum(r["status"] == "FAIL" for r in results)
    n_err = sum(r["status"] == "ERROR" for r in results)
    print(f"\n{n_pass} passed, {n_fail} failed, {n_err} errors "
          f"(tolerances: {', '.join(f'{k} {v:g}' for k, v in TOLERANCES.items())})")
    if args.out:
        write_json(args.out, meta, graphs, results)
        print(f"results: {args.out}")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(markdown(meta, [g for g in graphs if "error" not in g], results))
        print(f"markdown table appended to {args.markdown}")
    return 1 if any_bad else 0


if __name__ == "__main__":
    sys.exit(main())
