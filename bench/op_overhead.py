#!/usr/bin/env python3
"""Host-side cost of dfgnn.torch calls against their kernels and against PyG 2.8, on a PubMed-sized
random graph (N = 19717, E = 88648 uniform random edges, plus one self-loop per node).

Cases, each forward and forward+backward:
- ``transformer``: ``dfgnn.torch.transformer`` on q, k, v [N, 1, 128] (PubMed GT, H=1, D=128), on a
  prebuilt dfgnn.Graph (with self-loops);
- ``TransformerConv``: the layer 128 -> 128 (1 head) on the edge_index with self-loops, dfgnn and PyG;
- ``GATConv``: the layer 500 -> 8 x 8 heads (PyG's examples/gat.py first layer) on the edge_index
  (the layer adds the self-loops), dfgnn and PyG;
- ``gat``: ``dfgnn.torch.gat`` on h [N, 8, 8] and the Graph.

Per case and implementation:
- ``host_us``: host microseconds per call: the median over repeats of (perf_counter time of
  ``--batch`` back-to-back calls without synchronisation) / batch; the batch is small enough that
  the GPU's launch queue never fills, so this is the host's own time;
- ``profiler_cpu_us``: torch.profiler's CPU time of one call (a record_function around it), mean;
- ``event_us``: the median CUDA-event time of one call started on an idle GPU (what a user sees
  when the host is the bottleneck: host gaps between kernels included);
- ``kernel_us``: for dfgnn ops, the kernels alone: CUDA-event time per call of back-to-back calls
  of the prepared launch (``_dfgnn.Launch`` with fixed pointers: no Python between launches, so the
  GPU is never idle) -- the floor the call path should reach.

Then the training step of PyG's examples/gat.py on Cora (data/cora; 2 GATConv layers, 8 heads x 8
then 1 x 7, attention dropout 0.6, feature dropout 0.6, Adam): ``step_us`` (CUDA-event median of one
step: zero_grad, forward, loss, backward, optimiser step) and ``host_us``, for dfgnn eager, dfgnn with
the forward and loss under ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA graphs;
backward replayed as a CUDA graph too, optimiser eager), and PyG eager (``--no-compile`` leaves
the compiled row out).

``--smoke`` runs the same code on the CPU with tiny sizes and the float64 reference path (no CUDA
events, no kernel timing of the GPU: ``event_us`` and ``kernel_us`` are the reference ops' wall
time), to check the script without a GPU.

    PYTHONUNBUFFERED=1 python bench/op_overhead.py OUTDIR [--smoke] [--no-pyg]

Writes OUTDIR/op_overhead.json and OUTDIR/op_overhead.md.
"""
import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import dfgnn
import dfgnn.torch as dt
from dfgnn.torch._spec import SPECS
from dfgnn import _dfgnn

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
from train_cora import load_planetoid, make_gat  # noqa: E402

PUBMED = dict(nodes=19717, edges=88648, features=500)
SMOKE = dict(nodes=300, edges=1500, features=24)


# ---------------------------------------------------------------- inputs

def random_edge_index(n, e, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (2, e), generator=gen).to(device)


def with_self_loops(ei, n):
    """PyG's remove_self_loops + add_self_loops, in torch ops."""
    keep = ei[0] != ei[1]
    loops = torch.arange(n, device=ei.device)
    return torch.cat([ei[:, keep], torch.stack([loops, loops])], dim=1)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------- timing

def host_us(step, device, batch, repeats):
    """Median over repeats of the host time per call of `batch` unsynchronised calls."""
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(batch):
            step()
        times.append((time.perf_counter() - t0) / batch * 1e6)
    sync(device)
    return statistics.median(times)


def profiler_cpu_us(step, device, calls):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync(device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            with torch.profiler.record_function("op_overhead_call"):
                step()
        sync(device)
    for event in prof.key_averages():
        if event.key == "op_overhead_call":
            return event.cpu_time_total / event.count
    return float("nan")


def event_us(step, device, calls):
    """Median time of one call on an idle device (CUDA events; wall time on the CPU)."""
    times = []
    for _ in range(calls):
        sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def back_to_back_us(step, device, calls, repeats=5):
    """Per-call time of back-to-back calls with the device kept busy (CUDA events around the
    block; wall time on the CPU), median over repeats."""
    times = []
    for _ in range(repeats):
        sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                step()
            times.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(times)


# ---------------------------------------------------------------- kernel-only calls

def _prepared(g, model):
    """The prepared launches dfgnn.torch made for this graph and model (after a warm call)."""
    for key, prep in dt._launches.get(g, {}).items():
        if key[0] == model:
            return prep
    raise RuntimeError(f"no prepared {model} launch on this graph: run a call first")


def kernel_steps(g, model, inputs, device):
    """(forward step, forward+backward step) that run the kernels alone: on CUDA the prepared
    Launch with fixed pointers; on the CPU the reference ops on fixed arrays."""
    xs = {k: v.detach().contiguous() for k, v in inputs.items()}
    first = next(iter(xs.values()))
    n, heads, dim = g.num_nodes, first.shape[1], first.shape[2]
    out = torch.empty((n, heads, dim), dtype=first.dtype, device=device)
    grad_out = torch.randn_like(out)
    grads = {k: torch.empty_like(v) for k, v in xs.items()}
    if device.type != "cuda":
        op = dfgnn.op(model, "float64", heads, dim)
        lse = torch.empty((n, heads), dtype=torch.float64)

        def fwd():
            _dfgnn.reference_forward(g._h, op, dict(xs), out, lse)

        def fwd_bwd():
            fwd()
            _dfgnn.reference_backward(g._h, op, dict(xs), grad_out, dict(grads))
        return fwd, fwd_bwd
    prep = _prepared(g, model)
    if prep.forward is None or prep.backward is None:
        # a kind the native ops prepared: its Python launches, made by one Python-path call
        spec = SPECS[model]
        params = spec.params(0.0, {o.name: o.convert(o.default) for o in spec.options})
        o_, l_ = dt._run_forward(g, model, dict(xs), params, prep.schedule)
        dt._run_backward(g, model, dict(xs), o_, l_, torch.randn_like(o_), params, prep.schedule)
    lse = torch.empty((n, heads), dtype=torch.float32, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream
    a = dt._pointers(tuple(xs.values()))
    d = dt._pointers(tuple(grads.values()))
    fl, bl = prep.forward, prep.backward
    # one workspace per direction, made here: the launches' allocator only hands it back
    ws_f, ws_b = prep.workspace(fl.workspace_bytes), prep.workspace(bl.workspace_bytes)
    o, s, go, h = out.data_ptr(), lse.data_ptr(), grad_out.data_ptr(), g._h

    def fwd():
        fl.forward(h, a[0], a[1], a[2], a[3], o, s, stream, 0, 0, lambda nbytes: ws_f)

    def fwd_bwd():
        fwd()
        bl.backward(h, a[0], a[1], a[2], a[3], o, s, go, d[0], d[1], d[2], d[3], stream, 0, 0, lambda nbytes: ws_b)
    fwd_bwd.keep = (xs, out, lse, grad_out, grads, ws_f, ws_b)
    return fwd, fwd_bwd


# ---------------------------------------------------------------- cases

def make_cases(size, device, dtype, use_pyg):
    n, e, f = size["nodes"], size["edges"], size["features"]
    ei = random_edge_index(n, e, device)
    ei_loops = with_self_loops(ei, n)
    g = dt.graph(ei_loops, n)
    torch.manual_seed(0)
    cases = []

    # the ops on a prebuilt Graph, with their kernel-only steps
    d_tr = 128 if size is PUBMED else 16
    q, k, v = (torch.randn(n, 1, d_tr, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    go_tr = torch.randn(n, 1, d_tr, device=device, dtype=dtype)
    cases.append(("transformer", "dfgnn", lambda: dt.transformer(g, q, k, v), go_tr,
                  ("transformer", dict(q=q, k=k, v=v))))
    h = torch.randn(n, 8, 8, device=device, dtype=dtype, requires_grad=True)
    att_src, att_dst = (torch.randn(8, 8, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    go_gat = torch.randn(n, 8, 8, device=device, dtype=dtype)
    cases.append(("gat", "dfgnn", lambda: dt.gat(g, h, att_src, att_dst), go_gat,
                  ("gat", dict(h=h, att_src=att_src, att_dst=att_dst))))

    # the layers, dfgnn and PyG, same weights
    x_tr = torch.randn(n, d_tr, device=device, dtype=dtype)
    x_gat = torch.randn(n, f, device=device, dtype=dtype)
    impls = [("dfgnn", dt)]
    if use_pyg:
        import torch_geometric.nn as pyg
        impls.append(("pyg", pyg))
    for impl, mod in impls:
        torch.manual_seed(1)
        tr = mod.TransformerConv(d_tr, d_tr, heads=1).to(device, dtype)
        gat = mod.GATConv(f, 8, heads=8).to(device, dtype)
        cases.append(("TransformerConv", impl, (lambda m=tr: m(x_tr, ei_loops)), None, None))
        cases.append(("GATConv", impl, (lambda m=gat: m(x_gat, ei)), None, None))
    return g, cases, dict(nodes=n, edges=int(ei.shape[1]), edges_with_loops=int(ei_loops.shape[1]),
                          features=f, transformer_dim=d_tr)


def measure(g, cases, device, args):
    results = []
    for name, impl, forward, grad_out, op in cases:
        def fwd_bwd(forward=forward, grad_out=grad_out):
            out = forward()
            if grad_out is None:
                out.sum().backward()
            else:
                out.backward(grad_out)

        def fwd_only(forward=forward):
            with torch.no_grad():
                forward()
        steps = {"forward": fwd_only, "forward+backward": fwd_bwd}
        kernel = {}
        for step in steps.values():  # warm-up: compiles, plans, prepared launches, allocator pools
            for _ in range(args.warmup):
                step()
        if op is not None:
            kernel = dict(zip(steps, kernel_steps(g, *op, device)))
            for step in kernel.values():
                step()
        for pass_, step in steps.items():
            row = dict(case=name, impl=impl, passes=pass_,
                       host_us=host_us(step, device, args.batch, args.repeats),
                       profiler_cpu_us=profiler_cpu_us(step, device, args.profile_calls),
                       event_us=event_us(step, device, args.calls))
            if pass_ in kernel:
                row["kernel_us"] = back_to_back_us(kernel[pass_], device, args.calls)
                row["kernel_host_us"] = host_us(kernel[pass_], device, args.batch, args.repeats)
            results.append(row)
            print(f"{name:16} {impl:6} {pass_:17} host {row['host_us']:8.1f} us  profiler {row['profiler_cpu_us']:8.1f}"
                  f" us  event {row['event_us']:8.1f} us" +
                  (f"  kernels {row['kernel_us']:8.1f} us (their host {row['kernel_host_us']:.1f} us)"
                   if "kernel_us" in row else ""), flush=True)
    return results


def breakdown(g, device, dtype, args):
    """Where a transformer op's forward+backward host time goes (PubMed GT H=1 D=128): host us per
    call of each layer of the call path, from the prepared launches up to autograd, and of a trivial
    autograd graph (the engine's own cost); then torch.profiler's table of one forward+backward by
    self CPU time, printed to the log."""
    n = g.num_nodes
    d = 128 if n > 1000 else 16
    q, k, v = (torch.randn(n, 1, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    go = torch.randn(n, 1, d, device=device, dtype=dtype)
    params = SPECS["transformer"].params(0.0, {"scale": None})  # the op fields the call path passes on
    with torch.no_grad():
        out, lse = dt._run_forward(g, "transformer", dict(q=q, k=k, v=v), params, None)
    x = torch.randn(n, 1, d, device=device, dtype=dtype, requires_grad=True)
    inputs = dict(q=q.detach(), k=k.detach(), v=v.detach())

    def fwd_nograd():
        with torch.no_grad():
            dt.transformer(g, q, k, v)

    def fwd_grad():
        dt.transformer(g, q, k, v)

    def fwd_bwd():
        dt.transformer(g, q, k, v).backward(go)

    def run_forward():
        dt._run_forward(g, "transformer", inputs, params, None)

    def run_backward():
        dt._run_backward(g, "transformer", inputs, out, lse, go, params, None)

    def engine():
        (x * 2).backward(go)
    steps = dict(fwd_nograd=fwd_nograd, fwd_grad=fwd_grad, fwd_bwd=fwd_bwd, run_forward=run_forward,
                 run_backward=run_backward, engine_trivial=engine)
    rows = {}
    for name, step in steps.items():
        for _ in range(args.warmup):
            step()
        rows[name] = host_us(step, device, args.batch, args.repeats)
        print(f"breakdown {name:16} host {rows[name]:8.1f} us", flush=True)
    sync(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            fwd_bwd()
        sync(device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), flush=True)
    return rows


def cora_steps(device, dtype, args, use_pyg):
    """Per-step times of PyG's examples/gat.py training step on Cora (see the module docstring)."""
    data = load_planetoid(REPO / "data" / "cora")
    x = torch.as_tensor(data["x"], device=device, dtype=dtype)
    y = torch.as_tensor(data["y"], device=device)
    ei = torch.as_tensor(data["edge_index"], device=device)
    train = torch.as_tensor(data["train"], device=device)
    impls = [("dfgnn", dt, False)]
    if device.type == "cuda" and not args.no_compile:
        impls.append(("dfgnn compiled (reduce-overhead)", dt, True))
    if use_pyg:
        import torch_geometric.nn as pyg
        impls.append(("pyg", pyg, False))
    rows = []
    for name, mod, compiled in impls:
        torch.manual_seed(0)
        model = make_gat(mod.GATConv, x.shape[1], data["num_classes"], 0.6).to(device, dtype).train()
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)

        def loss_fn(x, ei, model=model):
            return F.cross_entropy(model(x, ei)[train], y[train])
        if compiled:
            torch._dynamo.reset()
            loss_fn = torch.compile(loss_fn, mode="reduce-overhead", fullgraph=True)

        # CUDA graphs replay a captured graph structure: the compiled step takes a prebuilt Graph
        # (with GATConv's self-loops), as the docs tell users to; eager takes the edge_index.
        graph_arg = dt.graph(ei, x.shape[0], add_self_loops=True) if compiled else ei

        def step(loss_fn=loss_fn, opt=opt, graph_arg=graph_arg):
            opt.zero_grad(set_to_none=True)
            loss_fn(x, graph_arg).backward()
            opt.step()
        for _ in range(args.warmup + 3):  # compiled: warm-up, recording, first replays
            step()
        row = dict(case="Cora GAT training step", impl=name, passes="step",
                   host_us=host_us(step, device, args.batch, args.repeats),
                   event_us=event_us(step, device, args.calls))
        rows.append(row)
        print(f"Cora GAT step     {name:32} host {row['host_us']:8.1f} us  event {row['event_us']:8.1f} us", flush=True)
    return rows


def markdown(meta, results, cora):
    lines = [f"# dfgnn.torch call overhead ({meta['mode']})", "",
             f"{meta['device']}; torch {meta['torch']}; dfgnn {meta['dfgnn']}; PyG {meta['pyg']}; "
             f"graph N={meta['graph']['nodes']}, E={meta['graph']['edges']} "
             f"(+ self-loops: {meta['graph']['edges_with_loops']}); dtype {meta['dtype']}", "",
             "host = host us per call (unsynchronised batches); profiler = torch.profiler CPU us per call; "
             "event = CUDA-event median of one call on an idle GPU; kernels = the prepared launches back to "
             "back (kernels alone); overhead = host - kernels' own host time.", "",
             "| case | impl | passes | host us | profiler us | event us | kernels us | kernels' host us |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        k = f"{r['kernel_us']:.1f}" if "kernel_us" in r else ""
        kh = f"{r['kernel_host_us']:.1f}" if "kernel_host_us" in r else ""
        lines.append(f"| {r['case']} | {r['impl']} | {r['passes']} | {r['host_us']:.1f} | {r['profiler_cpu_us']:.1f} "
                     f"| {r['event_us']:.1f} | {k} | {kh} |")
    if cora:
        lines += ["", "Cora, PyG's examples/gat.py training step (zero_grad, forward, loss, backward, Adam):", "",
                  "| impl | host us per step | event us per step (median) |", "|---|---:|---:|"]
        for r in cora:
            lines.append(f"| {r['impl']} | {r['host_us']:.1f} | {r['event_us']:.1f} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir", type=pathlib.Path)
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, float64 reference path")
    p.add_argument("--no-pyg", action="store_true", help="leave PyG's layers out")
    p.add_argument("--batch", type=int, default=20, help="unsynchronised calls per host-time sample")
    p.add_argument("--repeats", type=int, default=30, help="host-time samples")
    p.add_argument("--calls", type=int, default=200, help="CUDA-event samples and back-to-back kernel calls")
    p.add_argument("--profile-calls", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--no-compile", action="store_true", help="leave the compiled Cora step out")
    p.add_argument("--no-cora", action="store_true", help="leave the Cora training steps out")
    args = p.parse_args()
    if args.smoke:
        device, dtype, size = torch.device("cpu"), torch.float64, SMOKE
        args.batch, args.repeats, args.calls, args.profile_calls, args.warmup = 3, 3, 3, 3, 2
    else:
        if not torch.cuda.is_available():
            sys.exit("op_overhead: no CUDA device (torch.cuda.is_available() is False); use --smoke on the CPU")
        device, dtype, size = torch.device("cuda"), torch.float32, PUBMED
    use_pyg = not args.no_pyg
    pyg_version = None
    if use_pyg:
        try:
            import torch_geometric
            pyg_version = torch_geometric.__version__
        except ImportError:
            print("op_overhead: torch_geometric is not installed; PyG's layers are left out", flush=True)
            use_pyg = False
    g, cases, graph_meta = make_cases(size, device, dtype, use_pyg)
    meta = dict(mode="smoke (CPU, float64 reference)" if args.smoke else "GPU",
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
                torch=torch.__version__, dfgnn=dfgnn.__version__, pyg=pyg_version, dtype=str(dtype),
                graph=graph_meta, batch=args.batch, repeats=args.repeats, calls=args.calls)
    print(f"op_overhead: {meta['device']}; graph {graph_meta}", flush=True)
    results = measure(g, cases, device, args)
    meta["breakdown_host_us"] = breakdown(g, device, dtype, args)
    cora = [] if args.no_cora else cora_steps(device, dtype, args, use_pyg)
    args.outdir.mkdir(parents=True, exist_ok=True)
    (args.outdir / "op_overhead.json").write_text(json.dumps(dict(meta=meta, results=results, cora_steps=cora), indent=2) + "\n")
    (args.outdir / "op_overhead.md").write_text(markdown(meta, results, cora))
    print(f"op_overhead: wrote {args.outdir / 'op_overhead.json'} and op_overhead.md", flush=True)


if __name__ == "__main__":
    main()
