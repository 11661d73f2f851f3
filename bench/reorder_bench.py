#!/usr/bin/env python3
"""Node orders on large graphs (issue 28): what each ``dfgnn.reorder`` method costs and what it gains.

Sections (``--sections``):

- ``ops``: every (graph, op config, order): the op's wall time per call through ``dfgnn.torch``
  (CUDA events around ``--calls`` back-to-back calls: on these graphs a call takes milliseconds, so
  the host does not set the pace), forward and forward+backward, the median over interleaved
  rounds (the order of the orders rotates). Beside it, the schedules dispatch chose and the largest
  difference of the reordered output, mapped back, from the unordered one.
- ``train``: full-graph training epochs (forward, cross-entropy, backward, Adam) of a 2-layer GAT
  and a 2-layer Graph Transformer built from ``dfgnn.torch`` layers, on each order, interleaved.
- ``narrow``: the fp32 op against the same op with its inputs stored in bfloat16 for the call (cast,
  the bfloat16 kernels with fp32 accumulation, the output cast back), and against a bfloat16 model;
  time per call in the input's order, and the error against the float64 reference (dfgnn's CPU
  path) on the graphs small enough for it (``--narrow-reference-edges``).
- ``bytes``: one forward+backward call per order between ``cudaProfilerStart``/``Stop`` for
  ``ncu --profile-from-start off --csv --print-units base --print-kernel-base mangled --metrics
  dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum``; ``--parse-ncu`` turns ncu's CSV into the bytes table:
  DRAM bytes per pass against the compulsory bytes, and the achieved bandwidth against a
  device-to-device copy measured in the same run.

Orders: ``none`` (the input ids; R-MAT's are a random permutation) and ``dfgnn.reorder``'s
methods. The expensive methods (METIS, label propagation, RCM on the largest graphs) can be
computed once on any machine with ``--save-perms DIR`` and carried: a saved order names the
graph's digest, and one that does not match the graph is refused. Each order's own time is the
wall time of ``dfgnn.reorder(..., return_time=True)`` on the machine named beside it.

Graphs: ``rmat-S`` (R-MAT 2^S, 16 * 2^S sampled edges, as bench/shapes.py), ``rmat-Ss`` (the
same scale symmetrised from 8 * 2^S sampled edges: about as many edges, every reverse edge
present), or a dataset name under ``--datasets`` (read with self-loops, as GATConv adds them).

Output: ``OUT/<tag>-reorder.json`` and ``.md``, rewritten after every row.
"""

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

DEFAULT_CONFIGS = ("transformer:1:128:float32,transformer:1:128:bfloat16,gat:8:8:float32,"
                   "transformer:4:64:float32,gatv2:1:128:float32")
# A bound on reassociation: the orders change each row's neighbour order, so sums run in another
# order; a permutation defect moves values by O(1).
TOLERANCE = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 3e-2}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench/results/reorder")
    p.add_argument("--datasets", default=str(REPO.parent / "shared" / "datasets"))
    p.add_argument("--graphs", default="rmat-20,rmat-22,mesh-mdual,blogcatalog")
    p.add_argument("--methods", default="degree,rcm,metis,community",
                   help="dfgnn.reorder methods; 'none' is always measured")
    p.add_argument("--perms", default=None, help="directory of saved orders (--save-perms)")
    p.add_argument("--compute", default="degree,rcm",
                   help="methods computed here when no saved order matches (the others are skipped)")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma list of model:heads:dim:dtype")
    p.add_argument("--graph-configs", default="",
                   help="graph=config+config;... limits a graph's configs (default: all)")
    p.add_argument("--sections", default="ops,train")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--train-graph", default="rmat-20s")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per order and round")
    p.add_argument("--narrow-graphs", default="rmat-20,mesh-mdual")
    p.add_argument("--narrow-configs", default="transformer:1:128:float32,gat:8:8:float32")
    p.add_argument("--narrow-reference-edges", type=int, default=2_000_000,
                   help="the float64 reference runs on graphs of at most this many edges")
    p.add_argument("--bytes-configs", default="transformer:1:128:float32,gat:8:8:float32")
    p.add_argument("--save-perms", default=None, help="compute the orders of --graphs x --methods into DIR, then exit")
    p.add_argument("--parse-ncu", default=None, help="ncu CSV to merge into --report as its bytes table")
    p.add_argument("--report", default=None, help="the JSON report --parse-ncu adds to")
    p.add_argument("--time-limit", type=float, default=1e9, help="seconds; later rows are skipped past it")
    p.add_argument("--tag", default=datetime.date.today().isoformat())
    return p.parse_args(argv)


# ---------------------------------------------------------------- graphs and orders

def load_graph(name, datasets):
    import dfgnn
    if name.startswith("rmat-"):
        scale = name[len("rmat-"):]
        if scale.endswith("s"):
            s = int(scale[:-1])
            return dfgnn.Graph.rmat(s, 8 << s, seed=1, permute=True, symmetrize=True)
        s = int(scale)
        return dfgnn.Graph.rmat(s, 16 << s, seed=1, permute=True)
    return dfgnn.Graph.from_file(pathlib.Path(datasets) / name, add_self_loops=True)


def digest(g):
    """Names a graph's exact structure, so that an order saved for it is never applied to another."""
    row_ptr, col_idx, _ = g.csr()
    h = hashlib.sha1(np.ascontiguousarray(row_ptr).tobytes())
    h.update(np.ascontiguousarray(col_idx).tobytes())
    return h.hexdigest()[:16]


def machine():
    return f"{platform.node()} ({os.cpu_count()} CPUs)"


def perm_path(directory, graph, method):
    return pathlib.Path(directory) / f"{graph}-{method}.npz"


def save_perm(directory, graph, method, perm, seconds, graph_digest):
    # Orders keep runs of increasing ids (members of a part in id order), so differences compress well.
    d = np.diff(perm, prepend=0).astype(np.int32)
    np.savez_compressed(perm_path(directory, graph, method), delta=d, seconds=seconds, digest=graph_digest,
                        machine=machine())


def load_perm(directory, graph, method, graph_digest):
    """(perm, seconds, machine), or a reason string."""
    path = perm_path(directory, graph, method)
    if not path.exists():
        return f"no saved order {path.name}"
    z = np.load(path)
    if str(z["digest"]) != graph_digest:
        return f"{path.name} was saved for another graph (digest {z['digest']}, this one {graph_digest})"
    perm = np.cumsum(z["delta"].astype(np.int64))
    if not np.array_equal(np.sort(perm), np.arange(len(perm))):
        return f"{path.name} is not a permutation"
    return perm, float(z["seconds"]), str(z["machine"])


def orders_for(g, gname, a, log):
    """{method: (perm or None, seconds, where)} for 'none' and every method available."""
    import dfgnn
    out = {"none": (None, 0.0, "")}
    gd = digest(g)
    for m in a.methods.split(","):
        got = load_perm(a.perms, gname, m, gd) if a.perms else "no --perms"
        if isinstance(got, tuple):
            out[m] = got
            continue
        if m in a.compute.split(","):
            perm, seconds = dfgnn.reorder(g, method=m, return_time=True)
            out[m] = (perm, seconds, machine())
        else:
            log(f"  {gname}: order {m} skipped: {got}")
    return out


def save_perms(a, log):
    import dfgnn
    directory = pathlib.Path(a.save_perms)
    directory.mkdir(parents=True, exist_ok=True)
    for gname in a.graphs.split(","):
        g = load_graph(gname, a.datasets)
        gd = digest(g)
        for m in a.methods.split(","):
            if isinstance(load_perm(directory, gname, m, gd), tuple):
                log(f"{gname} {m}: already saved")
                continue
            perm, seconds = dfgnn.reorder(g, method=m, return_time=True)
            save_perm(directory, gname, m, perm, seconds, gd)
            log(f"{gname} {m}: {seconds:.2f} s, {perm_path(directory, gname, m).stat().st_size / 1e6:.1f} MB")


# ---------------------------------------------------------------- ops

class OrderedCase:
    """One op config on one graph in every order: the graphs, the permuted inputs and the calls."""

    def __init__(self, graphs, perms, config, device):
        import torch
        import dfgnn
        import dfgnn.torch as dt
        from shapes import make_inputs
        model, heads, dim, dtype = config.split(":")
        self.model, self.heads, self.dim, self.dtype = model, int(heads), int(dim), dtype
        self.torch, self.graphs = torch, graphs
        n = next(iter(graphs.values())).num_nodes
        gen = torch.Generator(device=device).manual_seed(self.heads * 1000 + self.dim)
        base = make_inputs(model, n, self.heads, self.dim, getattr(torch, dtype), device, gen, False)
        grad = torch.randn(n, self.heads, self.dim, device=device, generator=gen).to(getattr(torch, dtype))
        self.fn = getattr(dt, model)
        self.op = dfgnn.op(model, dtype, self.heads, self.dim)
        self.perm, self.inputs, self.grad = {}, {}, {}
        for name, perm in perms.items():
            p = None if perm is None else torch.as_tensor(perm, device=device)
            self.perm[name] = p
            node = lambda t: t if p is None or t.dim() == 0 or t.shape[0] != n else t[p]  # noqa: E731
            self.inputs[name] = [node(t).detach().clone().requires_grad_(True) for t in base]
            self.grad[name] = node(grad).contiguous()

    def forward(self, name):
        with self.torch.no_grad():
            return self.fn(self.graphs[name], *self.inputs[name])

    def forward_backward(self, name):
        for t in self.inputs[name]:
            t.grad = None
        self.fn(self.graphs[name], *self.inputs[name]).backward(self.grad[name])

    def difference(self, name):
        """Largest |out - out_none| of the output mapped back to the input's ids, over max |out_none|."""
        ref = self.forward("none").float()
        out = self.forward(name).float()
        p = self.perm[name]
        back = self.torch.empty_like(out)
        back[p] = out  # node new = perm[new] of the input
        return float((back - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

    def schedules(self, name):
        import dfgnn
        f = dfgnn.explain(self.graphs[name], self.op, "forward")
        b = dfgnn.explain(self.graphs[name], self.op, "backward")
        return [f[0]["schedule"], b[0]["schedule"], b[1]["schedule"]]


def event_ms(torch, fn, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def time_orders(case, names, rounds, calls):
    torch = case.torch
    for name in names:  # warm: modules, plans, workspaces
        case.forward(name)
        case.forward_backward(name)
    torch.cuda.synchronize()
    samples = {n: {"forward": [], "forward_backward": []} for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name]["forward"].append(event_ms(torch, lambda: case.forward(name), calls))
            samples[name]["forward_backward"].append(event_ms(torch, lambda: case.forward_backward(name), calls))
    return {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}


def reordered_graphs(g, orders, device):
    """{order: dfgnn.Graph}, every one built on the GPU from an edge_index by the same path."""
    import torch
    import dfgnn
    ei = torch.as_tensor(g.edge_index(), device=device)
    n = g.num_nodes
    out = {}
    for name, (perm, _, _) in orders.items():
        if perm is None:
            out[name] = dfgnn.Graph(ei, n)
            continue
        inv = torch.empty(n, dtype=torch.int64, device=device)
        inv[torch.as_tensor(perm, device=device)] = torch.arange(n, device=device)
        out[name] = dfgnn.Graph(inv[ei], n)
    del ei
    return out


def ops_section(a, device, report, write, log, deadline):
    configs_for = {}
    for item in filter(None, a.graph_configs.split(";")):
        gname, cs = item.split("=")
        configs_for[gname] = cs.split("+")
    for gname in a.graphs.split(","):
        if time.time() > deadline:
            log(f"time limit: {gname} skipped")
            report["skipped"].append(gname)
            continue
        g = load_graph(gname, a.datasets)
        orders = orders_for(g, gname, a, log)
        report["orders"].extend(dict(graph=gname, method=m, seconds=round(s, 3), machine=where)
                                for m, (_, s, where) in orders.items() if m != "none")
        graphs = reordered_graphs(g, orders, device)
        log(f"=== {gname}: {g.num_nodes} nodes, {g.num_edges} edges; orders {', '.join(orders)}")
        names = list(orders)
        for config in configs_for.get(gname, a.configs.split(",")):
            if time.time() > deadline:
                log(f"time limit: {gname} {config} skipped")
                report["skipped"].append(f"{gname} {config}")
                continue
            try:
                case = OrderedCase(graphs, {m: p for m, (p, _, _) in orders.items()}, config, device)
                times = time_orders(case, names, a.rounds, a.calls)
                for name in names:
                    row = dict(graph=gname, nodes=g.num_nodes, edges=g.num_edges, config=config, order=name,
                               forward_ms=times[name]["forward"], forward_backward_ms=times[name]["forward_backward"],
                               schedules=case.schedules(name),
                               difference=0.0 if name == "none" else case.difference(name))
                    row["ok"] = row["difference"] <= TOLERANCE[case.dtype]
                    report["ops"].append(row)
                    log(f"{gname:12} {config:28} {name:10} fwd {row['forward_ms']:8.3f} ms  "
                        f"fwd+bwd {row['forward_backward_ms']:8.3f} ms  diff {row['difference']:.1e}"
                        + ("" if row["ok"] else "  OVER TOLERANCE"))
                del case
            except Exception as e:  # one failed config is reported; the others still run
                report["errors"].append(dict(section="ops", case=f"{gname} {config}", error=f"{type(e).__name__}: {e}"))
                log(f"ERROR {gname} {config}: {type(e).__name__}: {e}")
            write()
        del graphs
        import torch
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- training

def make_model(kind, in_channels, classes):
    import torch
    import dfgnn.torch as dt

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if kind == "gat":  # PyG's examples/gat.py without its dropout
                self.conv1 = dt.GATConv(in_channels, 8, heads=8)
                self.conv2 = dt.GATConv(64, classes, heads=1, concat=False)
            else:
                self.conv1 = dt.TransformerConv(in_channels, 64, heads=4)
                self.conv2 = dt.TransformerConv(256, classes, heads=1)

        def forward(self, x, edge_index):
            return self.conv2(torch.nn.functional.elu(self.conv1(x, edge_index)), edge_index)
    return Net()


def train_section(a, device, report, write, log, deadline):
    import copy
    import torch
    g = load_graph(a.train_graph, a.datasets)
    orders = orders_for(g, a.train_graph, a, log)
    report["orders"].extend(dict(graph=a.train_graph, method=m, seconds=round(s, 3), machine=where)
                            for m, (_, s, where) in orders.items() if m != "none")
    n, features, classes = g.num_nodes, 128, 16
    gen = torch.Generator(device=device).manual_seed(7)
    x = torch.randn(n, features, device=device, generator=gen)
    y = torch.randint(0, classes, (n,), device=device, generator=gen)
    ei = torch.as_tensor(g.edge_index(), device=device)
    data = {}
    for name, (perm, _, _) in orders.items():
        if perm is None:
            data[name] = (x, ei, y)
            continue
        p = torch.as_tensor(perm, device=device)
        inv = torch.empty_like(p)
        inv[p] = torch.arange(n, device=device)
        data[name] = (x[p].contiguous(), inv[ei].contiguous(), y[p].contiguous())
    if "degree" in orders:  # the user's path: the PyG transform gives the same tensors
        try:
            from torch_geometric.data import Data
            import dfgnn.torch as dt
            d = dt.Reorder("degree")(Data(x=x, edge_index=ei, y=y, num_nodes=n))
            same = all(torch.equal(u, v) for u, v in zip((d.x, d.edge_index, d.y), data["degree"]))
            report["transform_matches"] = same
            log(f"dfgnn.torch.Reorder('degree') gives the bench's tensors: {same}")
        except ImportError as e:
            log(f"transform check skipped: {e}")
    names = list(orders)
    log(f"=== train on {a.train_graph}: {n} nodes, {g.num_edges} edges; orders {', '.join(names)}")
    for kind in ("gat", "transformer"):
        if time.time() > deadline:
            report["skipped"].append(f"train {kind}")
            continue
        try:
            torch.manual_seed(0)
            init = make_model(kind, features, classes).to(device)
            runs = {}
            for name in names:
                model = copy.deepcopy(init)
                runs[name] = (model, torch.optim.Adam(model.parameters(), lr=0.005), data[name])
            first_loss = {}

            def epoch(name):
                model, opt, (xx, ee, yy) = runs[name]
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(xx, ee), yy)
                loss.backward()
                opt.step()
                return loss.detach()
            for name in names:  # the first epoch's loss is the same function of the same data
                first_loss[name] = float(epoch(name))
                epoch(name)
            samples = {name: [] for name in names}
            for r in range(a.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    samples[name].append(event_ms(torch, lambda: epoch(name), a.epochs))
            for name in names:
                row = dict(graph=a.train_graph, model=kind, order=name, epoch_ms=statistics.median(samples[name]),
                           first_loss=first_loss[name], loss_difference=abs(first_loss[name] - first_loss["none"]))
                report["train"].append(row)
                log(f"train {kind:12} {name:10} epoch {row['epoch_ms']:8.2f} ms  first loss {row['first_loss']:.6f}")
            del runs, init
        except Exception as e:
            report["errors"].append(dict(section="train", case=kind, error=f"{type(e).__name__}: {e}"))
            log(f"ERROR train {kind}: {type(e).__name__}: {e}")
        write()
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- narrow storage

def narrow_section(a, device, report, write, log, deadline):
    import torch
    import dfgnn.torch as dt
    from shapes import make_inputs
    for gname in a.narrow_graphs.split(","):
        if time.time() > deadline:
            report["skipped"].append(f"narrow {gname}")
            continue
        g = load_graph(gname, a.datasets)
        gg = reordered_graphs(g, {"none": (None, 0.0, "")}, device)["none"]
        for config in a.narrow_configs.split(","):
            try:
                model, heads, dim, _ = config.split(":")
                heads, dim = int(heads), int(dim)
                fn = getattr(dt, model)
                gen = torch.Generator(device=device).manual_seed(heads * 1000 + dim)
                x32 = [t.requires_grad_(True) for t in make_inputs(model, g.num_nodes, heads, dim, torch.float32,
                                                                     device, gen, False)]
                grad = torch.randn(g.num_nodes, heads, dim, device=device, generator=gen)
                node = lambda t: t.dim() > 0 and t.shape[0] == g.num_nodes  # noqa: E731
                x16 = [(t.detach().bfloat16() if node(t) else t.detach()).requires_grad_(True) for t in x32]
                grad16 = grad.bfloat16()

                def as_bf16(ts):  # the storage mode: node inputs cast for the call, output back to fp32
                    return fn(gg, *[t.bfloat16() if node(t) else t for t in ts]).float()
                variants = {
                    "float32": (lambda: fn(gg, *x32), x32, grad),
                    "bf16 storage": (lambda: as_bf16(x32), x32, grad),
                    "bfloat16 model": (lambda: fn(gg, *x16), x16, grad16),
                }

                def fwd(v):
                    with torch.no_grad():
                        variants[v][0]()

                def fwd_bwd(v):
                    call, xs, gr = variants[v]
                    for t in xs:
                        t.grad = None
                    call().backward(gr)
                names = list(variants)
                for v in names:
                    fwd(v)
                    fwd_bwd(v)
                samples = {v: ([], []) for v in names}
                for r in range(a.rounds):
                    for v in names[r % 3:] + names[:r % 3]:
                        samples[v][0].append(event_ms(torch, lambda: fwd(v), a.calls))
                        samples[v][1].append(event_ms(torch, lambda: fwd_bwd(v), a.calls))
                error = {}
                if g.num_edges <= a.narrow_reference_edges:
                    cpu = [t.detach().double().cpu() for t in x32]
                    ref = fn(g, *cpu).to(device)
                    scale = float(ref.abs().max())
                    with torch.no_grad():
                        for v in names:
                            error[v] = float((variants[v][0]().double() - ref).abs().max()) / scale
                for v in names:
                    row = dict(graph=gname, edges=g.num_edges, config=config, variant=v,
                               forward_ms=statistics.median(samples[v][0]),
                               forward_backward_ms=statistics.median(samples[v][1]), error=error.get(v))
                    report["narrow"].append(row)
                    err = "" if row["error"] is None else f"  error {row['error']:.1e}"
                    log(f"narrow {gname:12} {config:26} {v:15} fwd {row['forward_ms']:8.3f} ms  "
                        f"fwd+bwd {row['forward_backward_ms']:8.3f} ms{err}")
                del variants, x32, x16
            except Exception as e:
                report["errors"].append(dict(section="narrow", case=f"{gname} {config}",
                                             error=f"{type(e).__name__}: {e}"))
                log(f"ERROR narrow {gname} {config}: {type(e).__name__}: {e}")
            write()
        del gg
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- bytes

def copy_bandwidth(device):
    """GB/s of a device-to-device copy of 1 GiB (bytes read plus written), the ceiling of this run."""
    import torch
    src = torch.empty(1 << 28, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = min(event_ms(torch, lambda: dst.copy_(src), 10) for _ in range(3))
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def bytes_section(a, device, report, write, log):
    """One forward+backward call per (graph, config, order) inside cudaProfilerStart/Stop, in the
    order recorded in report['bytes_order']; run under ncu --profile-from-start off."""
    import torch
    report["copy_GBps"] = copy_bandwidth(device)
    for gname in a.graphs.split(","):
        g = load_graph(gname, a.datasets)
        orders = orders_for(g, gname, a, log)
        graphs = reordered_graphs(g, orders, device)
        for config in a.bytes_configs.split(","):
            case = OrderedCase(graphs, {m: p for m, (p, _, _) in orders.items()}, config, device)
            for name in orders:
                case.forward_backward(name)  # modules, plans and workspaces outside the profiled range
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                case.forward_backward(name)
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
                report["bytes_order"].append(dict(graph=gname, nodes=g.num_nodes, edges=g.num_edges, config=config,
                                                  order=name))
            del case
        write()


def compulsory_bytes(nodes, edges, config):
    """Bytes a pass cannot avoid: every node-level array once, the graph's index arrays once, the
    results once. Forward: inputs, CSR (row_ptr, col_idx), output. Backward (row, column and node
    passes together): inputs, output, its gradient, CSR and CSC (col_ptr, row_idx, CSR position),
    the inputs' gradients. Parameters and per-row statistics are small and left out."""
    model, heads, dim, dtype = config.split(":")
    width = int(heads) * int(dim) * {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    node_inputs = {"gat": 1, "gatv2": 2, "transformer": 3, "agnn": 1}[model]
    csr = 4 * (nodes + 1) + 4 * edges
    forward = node_inputs * width * nodes + csr + width * nodes
    backward = (2 * node_inputs + 2) * width * nodes + csr + (4 * (nodes + 1) + 8 * edges)
    return {"forward": forward, "backward": backward}


def parse_ncu(a):
    import csv
    from shapes import kernel_pass
    report = json.loads(pathlib.Path(a.report).read_text())
    rows = list(csv.DictReader(line for line in open(a.parse_ncu) if line.startswith('"')))
    blocks, current, last_pass = [], None, None
    for r in rows:  # one row per (kernel, metric); a pass may launch several kernels (rows, hub rows, merge)
        p = kernel_pass(r.get("Kernel Name", ""))
        if p is None:
            continue
        if p == "forward" and last_pass != "forward":  # each profiled call starts with its forward kernels
            current = {}
            blocks.append(current)
        last_pass = p
        if current is None:
            continue
        name = r["Metric Name"]
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-9, "usecond": 1e-6,
                 "msecond": 1e-3, "second": 1, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}.get(unit, 1)
        key = "backward" if p != "forward" else "forward"
        d = current.setdefault(key, {})
        d[name] = d.get(name, 0.0) + value * scale
    order = report["bytes_order"]
    if len(blocks) != len(order):
        raise SystemExit(f"{a.parse_ncu}: {len(blocks)} profiled calls, the run recorded {len(order)}")
    table = []
    for meta, block in zip(order, blocks):
        need = compulsory_bytes(meta["nodes"], meta["edges"], meta["config"])
        for p in ("forward", "backward"):
            m = block.get(p, {})
            moved = m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
            seconds = m.get("gpu__time_duration.sum", 0.0)
            table.append(dict(meta, **{"pass": p, "dram_bytes": moved, "compulsory_bytes": need[p],
                                       "seconds": seconds, "GBps": moved / seconds / 1e9 if seconds else 0.0}))
    report["bytes"] = table
    pathlib.Path(a.report).write_text(json.dumps(report, indent=1))
    pathlib.Path(a.report).with_suffix(".md").write_text(markdown(report))
    print(f"bytes table: {len(table)} rows into {a.report}")


# ---------------------------------------------------------------- report

def markdown(report):
    m = report["meta"]
    lines = [f"# Node orders on large graphs ({m['date']})", "",
             f"- commit `{m['commit']}`, {m['gpu']}, torch {m['torch']}; {m['rounds']} interleaved rounds of "
             f"{m['calls']} calls (CUDA events around the calls; median per call)",
             f"- command: `reorder_bench.py {m['argv']}`", ""]
    if report["orders"]:
        lines += ["## What each order costs (wall seconds of dfgnn.reorder, once per dataset)", "",
                  "| graph | method | seconds | computed on |", "|---|---|---:|---|"]
        seen = set()
        for o in report["orders"]:
            if (o["graph"], o["method"]) not in seen:
                seen.add((o["graph"], o["method"]))
                lines.append(f"| {o['graph']} | {o['method']} | {o['seconds']:.2f} | {o['machine']} |")
        lines.append("")
    if report["ops"]:
        base = {(r["graph"], r["config"]): r for r in report["ops"] if r["order"] == "none"}
        lines += ["## The op per call, by order", "",
                  "Ratio: the order's time over `none`'s (lower is better). Difference: the largest change of the "
                  "output mapped back, over its largest value.", "",
                  "| graph | config | order | forward ms | ratio | fwd+bwd ms | ratio | difference | schedules |",
                  "|---|---|---|---:|---:|---:|---:|---:|---|"]
        for r in report["ops"]:
            b = base.get((r["graph"], r["config"]))
            rf = r["forward_ms"] / b["forward_ms"] if b else float("nan")
            rb = r["forward_backward_ms"] / b["forward_backward_ms"] if b else float("nan")
            same = "as none" if b and r is not b and r["schedules"] == b["schedules"] else " / ".join(r["schedules"])
            lines.append(f"| {r['graph']} | {r['config']} | {r['order']} | {r['forward_ms']:.3f} | {rf:.3f} | "
                         f"{r['forward_backward_ms']:.3f} | {rb:.3f} | {r['difference']:.1e}"
                         f"{'' if r['ok'] else ' (over)'} | {same} |")
        lines.append("")
    if report["train"]:
        base = {r["model"]: r for r in report["train"] if r["order"] == "none"}
        lines += ["## Full-graph training epoch, by order", "",
                  "| graph | model | order | epoch ms | speed-up over none | first-epoch loss | loss - none's |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for r in report["train"]:
            b = base.get(r["model"])
            lines.append(f"| {r['graph']} | {r['model']} | {r['order']} | {r['epoch_ms']:.2f} | "
                         f"{b['epoch_ms'] / r['epoch_ms']:.3f} | {r['first_loss']:.6f} | {r['loss_difference']:.1e} |")
        if "transform_matches" in report:
            lines += ["", f"`dfgnn.torch.Reorder('degree')` on a PyG `Data` gives the bench's own tensors: "
                          f"{report['transform_matches']}."]
        lines.append("")
    if report.get("narrow"):
        base = {(r["graph"], r["config"]): r for r in report["narrow"] if r["variant"] == "float32"}
        lines += ["## Narrow storage: fp32 inputs stored in bfloat16 for the call", "",
                  "`bf16 storage`: the node inputs cast to bfloat16, the bfloat16 kernels (fp32 accumulation), the "
                  "output cast back, casts included. `bfloat16 model`: inputs already bfloat16. Error: the largest "
                  "difference from the float64 reference over its largest value (blank: graph too large for the "
                  "CPU reference).", "",
                  "| graph | config | variant | forward ms | ratio | fwd+bwd ms | ratio | error |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        for r in report["narrow"]:
            b = base.get((r["graph"], r["config"]))
            err = "" if r["error"] is None else f"{r['error']:.1e}"
            lines.append(f"| {r['graph']} | {r['config']} | {r['variant']} | {r['forward_ms']:.3f} | "
                         f"{r['forward_ms'] / b['forward_ms']:.3f} | {r['forward_backward_ms']:.3f} | "
                         f"{r['forward_backward_ms'] / b['forward_backward_ms']:.3f} | {err} |")
        lines.append("")
    if report.get("bytes"):
        copy = report.get("copy_GBps", 0.0)
        lines += ["## Bytes per pass (ncu DRAM bytes, one forward+backward call)", "",
                  f"Device-to-device copy in the same run: {copy:.0f} GB/s (read + written). Compulsory bytes: see "
                  "`compulsory_bytes` in the script.", "",
                  "| graph | config | order | pass | DRAM MB | compulsory MB | moved / compulsory | us | GB/s | of copy |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in report["bytes"]:
            lines.append(f"| {r['graph']} | {r['config']} | {r['order']} | {r['pass']} | {r['dram_bytes'] / 1e6:.1f} | "
                         f"{r['compulsory_bytes'] / 1e6:.1f} | {r['dram_bytes'] / max(r['compulsory_bytes'], 1):.2f} | "
                         f"{r['seconds'] * 1e6:.0f} | {r['GBps']:.0f} | {r['GBps'] / copy if copy else 0:.2f} |")
        lines.append("")
    if report["skipped"]:
        lines += ["Skipped at the time limit: " + ", ".join(report["skipped"]), ""]
    for e in report["errors"]:
        lines.append(f"- ERROR {e['section']} {e.get('case', '')}: {e['error']}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    a = parse_args(argv)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    if a.save_perms:
        save_perms(a, log)
        return
    if a.parse_ncu:
        parse_ncu(a)
        return
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("reorder_bench.py measures on a GPU; none is visible (--save-perms runs without one)")
    device = torch.device("cuda")
    from shapes import tree_commit
    commit = tree_commit()
    t0 = time.time()
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), commit=commit,
                gpu=torch.cuda.get_device_name(), torch=torch.__version__, rounds=a.rounds, calls=a.calls,
                argv=" ".join(sys.argv[1:] if argv is None else argv))
    report = dict(meta=meta, orders=[], ops=[], train=[], narrow=[], bytes_order=[], skipped=[], errors=[])
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{a.tag}-reorder"

    def write():
        meta["seconds"] = round(time.time() - t0, 1)
        pathlib.Path(f"{stem}.json").write_text(json.dumps(report, indent=1))
        pathlib.Path(f"{stem}.md").write_text(markdown(report))
    deadline = t0 + a.time_limit
    sections = a.sections.split(",")
    if "bytes" in sections:
        bytes_section(a, device, report, write, log)
    if "ops" in sections:
        ops_section(a, device, report, write, log, deadline)
    if "narrow" in sections:
        narrow_section(a, device, report, write, log, deadline)
    if "train" in sections:
        if time.time() < deadline:
            train_section(a, device, report, write, log, deadline)
        else:
            report["skipped"].append("train")
    write()
    log(f"wrote {stem}.json and .md ({meta['seconds']} s, {len(report['errors'])} errors)")


if __name__ == "__main__":
    main()
