#!/usr/bin/env python3
"""Kernel time per pass for the op shapes users run: many heads of few channels, class-count
outputs, attention dropout; and PyG's examples/gat.py training step on Cora.

Every figure of a pass is GPU time: the durations of its kernels as CUPTI records them (through
torch.profiler), summed per call, the median over interleaved rounds. Calls go through
``dfgnn.torch`` as a user makes them (``dt.gat(graph, ...)``), with the schedule given explicitly
so that the default and the tuned schedule can be timed side by side in one process:

- forward: a forward-only call under ``torch.no_grad`` with the forward's schedule;
- backward row / column pass: a forward+backward call with that pass's schedule (the op's one
  ``schedule`` then serves both backward passes), counting only that pass's kernels;
- helpers: the backward's node kernels (prep, parameter-gradient reductions), from the row block.

A block of calls ends with ``torch.cuda._sleep``, a kernel of its own, so the kernels of a block
are found by their order on the device, whatever the host clock did.

Sections (``--sections``):

- ``heads``: (H, D) in {(8, 8), (4, 16), (8, 16), (2, 32)} against (1, H * D), default schedules.
- ``dropout``: the same calls with attention dropout 0.6 and without.
- ``tuned``: the default schedule against the tuner's winner (``dfgnn.tune``, budget per direction).
- ``classes``: H = 1 and D in {3, 7, 16, 40, 47}, default against tuned.
- ``split``: on graphs where the default splits hub rows (``hub_split``), that schedule with hub
  threshold and chunk 128, 256 and 512 edges side by side, for ``--split-configs``: the evidence for the
  hand rule's split, which answers on graphs past the fitted rule's domain.
- ``step``: the Cora step: PyG eager, dfgnn eager, the dense parts alone (torch's floor for this
  model), and dfgnn captured whole in one CUDA graph (wall time per step; for the captured step also
  the dfgnn kernels' share of its GPU time).

Output: ``OUT/<date>-shapes.json`` and ``OUT/<date>-shapes.md``. ``--smoke`` runs every section on
the CPU with tiny sizes and the float64 reference (times are meaningless; it checks the script).
"""

import argparse
import datetime
import functools
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

PASSES = ("forward", "backward_row", "backward_col", "helpers")
HEADS_SHAPES = [(8, 8), (4, 16), (8, 16), (2, 32)]
CLASS_DIMS = [3, 7, 16, 40, 47]
SPLITS = (128, 256, 512)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=str(REPO / ".bench-data"), help="directory of shared datasets (pubmed, ...)")
    p.add_argument("--graphs", default="cora,pubmed,rmat-20", help="comma list: cora, a dataset name, rmat-SCALE")
    p.add_argument("--models", default="gat", help="comma list of models for the heads/tuned/classes sections")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--sections", default="heads,dropout,tuned,classes,step")
    p.add_argument("--tuned-shapes", default="8x8,1x64,1x7", help="HxD list the tuned section covers")
    p.add_argument("--class-dims", default=",".join(map(str, CLASS_DIMS)))
    p.add_argument("--split-configs", default="gat:8x8,gat:1x64,gat:1x7,gat:1x3,gat:1x47,transformer:1x128,"
                   "transformer:4x64,transformer:8x32", help="model:HxD list the split section covers")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20, help="calls per block (a round times one block per pass)")
    p.add_argument("--budget", type=float, default=1.0, help="tuning seconds per forward (backward: twice)")
    p.add_argument("--steps", type=int, default=50, help="Cora training steps per timed block")
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--tag", default=datetime.date.today().isoformat())
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, float64 reference: checks the script")
    return p.parse_args(argv)


# ---------------------------------------------------------------- graphs and inputs

def tree_commit():
    """The commit a report names: DFGNN_COMMIT first (a copy of the tree on a GPU machine may carry a
    .git of another commit), else git's HEAD, else "unknown"."""
    import subprocess
    commit = os.environ.get("DFGNN_COMMIT")
    if commit:
        return commit
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_graph(name, datasets, smoke, self_loops=True):
    import dfgnn
    if smoke:
        return dfgnn.Graph.rmat(7, 600, seed=3, permute=True, add_self_loops=self_loops)
    if name.startswith("rmat-"):
        scale = int(name.split("-")[1])
        return dfgnn.Graph.rmat(scale, 16 << scale, seed=1, permute=True)
    path = REPO / "data" / "cora" if name == "cora" else pathlib.Path(datasets) / name
    # GATConv adds self-loops (TransformerConv does not: self_loops=False builds its graph)
    return dfgnn.Graph.from_file(path, add_self_loops=self_loops)


def make_inputs(model, n, heads, dim, dtype, device, gen, grad):
    import torch
    feat = lambda: torch.randn(n, heads, dim, device=device, generator=gen).to(dtype).requires_grad_(grad)  # noqa
    par = lambda *s: (0.3 * torch.randn(*s, device=device, generator=gen)).to(  # noqa: E731
        torch.float64 if dtype == torch.float64 else torch.float32).requires_grad_(grad)
    return {"gat": lambda: [feat(), par(heads, dim), par(heads, dim)],
            "gatv2": lambda: [feat(), feat(), par(heads, dim)],
            "transformer": lambda: [feat(), feat(), feat()],
            "agnn": lambda: [feat(), (par(1).detach() + 1.0).requires_grad_(grad)]}[model]()


def kernel_pass(name):
    """The pass a kernel belongs to, by its (demangled or mangled) name; None for other kernels."""
    if "dfgnn" not in name:
        return None
    if "BackwardRow" in name:
        return "backward_row"
    if "BackwardCol" in name:
        return "backward_col"
    if "Forward" in name:
        return "forward"
    return "helpers"


class Case:
    """One (graph, model, H, D, dtype, dropout): inputs, and calls under a given schedule."""

    def __init__(self, g, model, heads, dim, dtype, dropout, device, smoke):
        import torch
        import dfgnn
        import dfgnn.torch as dt
        self.torch, self.g, self.model = torch, g, model
        self.heads, self.dim, self.dropout = heads, dim, dropout
        self.dtype_name = dtype
        self.device = torch.device(device)
        tdtype = torch.float64 if smoke else getattr(torch, dtype)
        gen = torch.Generator(device=self.device).manual_seed(heads * 1000 + dim)
        self.inputs = make_inputs(model, g.num_nodes, heads, dim, tdtype, self.device, gen, True)
        self.fn = getattr(dt, model)
        # The GPU op's dtype even in the smoke run: dispatch explains GPU ops; the CPU runs float64.
        self.op = dfgnn.op(model, dtype, heads, dim, dropout=dropout,
                           dropout_seed=5 if dropout else 0)
        self.grad = torch.randn(g.num_nodes, heads, dim, device=self.device, generator=gen).to(tdtype)
        self.kw = dict(dropout=dropout, dropout_seed=5) if dropout else {}

    def label(self):
        return f"{self.model} H{self.heads} D{self.dim} {self.dtype_name}" + (f" p{self.dropout}" if self.dropout else "")

    def forward(self, schedule):
        with self.torch.no_grad():
            return self.fn(self.g, *self.inputs, schedule=schedule, **self.kw)

    def forward_backward(self, schedule):
        for t in self.inputs:
            t.grad = None
        out = self.fn(self.g, *self.inputs, schedule=schedule, **self.kw)
        out.backward(self.grad)

    def defaults(self):
        """The schedules dispatch picks with nothing tuned, per pass, and the rule that answered."""
        import dfgnn
        f = dfgnn.explain(self.g, self.op, "forward")
        b = dfgnn.explain(self.g, self.op, "backward")
        sched = {"forward": f[0]["schedule"], "backward_row": b[0]["schedule"], "backward_col": b[1]["schedule"]}
        origin = {p["pass"]: p.get("origin_detail", p.get("origin", "")) for p in f + b}
        return sched, origin

    def tuned(self, budget):
        import dfgnn
        # In a context of its own: winners stored where dispatch looks would answer the later cases'
        # "default" by nearest dispatch from these graphs (PubMed's did from Cora's on 12-06).
        f = dfgnn.tune(self.g, self.op, "forward", budget, context=tuning_context())
        b = dfgnn.tune(self.g, self.op, "backward", 2 * budget, context=tuning_context())
        return {"forward": f[0]["winner"], "backward_row": b[0]["winner"], "backward_col": b[1]["winner"]}


@functools.lru_cache(maxsize=None)
def tuning_context():
    """The context the tuner runs in: a user database of its own and no site layer."""
    import dfgnn
    ctx = dfgnn.Context()
    dfgnn.set_database(user=pathlib.Path(tempfile.mkdtemp(prefix="dfgnn-shapes-tuned-")) / "tuned.db", sites=[],
                       context=ctx)
    return ctx


def blocks_for(choices):
    """The blocks of one round: (choice name, what to run, schedule) for each pass of each choice,
    the row and column blocks merged where their schedules agree."""
    out = []
    for name, sched in choices.items():
        out.append((name, "forward", sched["forward"]))
        if sched["backward_row"] == sched["backward_col"]:
            out.append((name, "backward", sched["backward_row"]))
        else:
            out.append((name, "backward_row", sched["backward_row"]))
            out.append((name, "backward_col", sched["backward_col"]))
    return out


def time_choices(case, choices, rounds, calls, smoke):
    """{choice: {pass: median us per call}} over interleaved rounds (the block order rotates)."""
    torch = case.torch
    blocks = blocks_for(choices)
    run = {"forward": case.forward, "backward": case.forward_backward, "backward_row": case.forward_backward,
           "backward_col": case.forward_backward}
    for _, kind, sched in blocks:  # warm: compiles, plans, workspaces
        for _ in range(2):
            run[kind](sched)
    samples = {name: {p: [] for p in PASSES} for name in choices}
    for r in range(rounds):
        order = blocks[r % len(blocks):] + blocks[:r % len(blocks)]
        if smoke:
            for name, kind, sched in order:
                t0 = time.perf_counter()
                for _ in range(calls):
                    run[kind](sched)
                us = (time.perf_counter() - t0) * 1e6 / calls
                for p in counted(kind):
                    samples[name][p].append(us)
            continue
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _, kind, sched in order:
                for _ in range(calls):
                    run[kind](sched)
                torch.cuda._sleep(1000)  # the block's end marker on the device
            torch.cuda.synchronize()
        kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        per_block, current = [], {}
        for e in kernels:
            if "spin_kernel" in e.name or "sleep" in e.name.lower():
                per_block.append(current)
                current = {}
                continue
            p = kernel_pass(e.name)
            if p is not None:
                current[p] = current.get(p, 0.0) + e.time_range.elapsed_us()
        if len(per_block) != len(order):
            raise RuntimeError(f"found {len(per_block)} block markers on the device, expected {len(order)}")
        for (name, kind, _), sums in zip(order, per_block):
            for p in counted(kind):
                samples[name][p].append(sums.get(p, 0.0) / calls)
    return {name: {p: statistics.median(v) for p, v in s.items() if v} for name, s in samples.items()}


def counted(kind):
    """The passes a block of `kind` times."""
    return {"forward": ("forward",), "backward": ("backward_row", "backward_col", "helpers"),
            "backward_row": ("backward_row", "helpers"), "backward_col": ("backward_col",)}[kind]


# ---------------------------------------------------------------- sections

def split_variants(defaults):
    """The default schedules with every hub_split pass's threshold and chunk set to each of SPLITS
    edges ({} where no pass splits hubs)."""
    import re
    if not any(t.startswith("hub_split:") for t in defaults.values()):
        return {}
    def with_split(text, n):
        if not text.startswith("hub_split:"):
            return text
        return re.sub(r"chunk=\d+", f"chunk={n}", re.sub(r"threshold=\d+", f"threshold={n}", text))
    return {f"split{n}": {p: with_split(t, n) for p, t in defaults.items()} for n in SPLITS}


def run_case(g, gname, model, heads, dim, dtype, dropout, a, device, tune, log, variants=None):
    case = Case(g, model, heads, dim, dtype, dropout, device, a.smoke)
    defaults, origin = case.defaults()
    choices = {"default": defaults}
    if tune and not a.smoke:
        choices["tuned"] = case.tuned(a.budget)
    if variants is not None:
        choices.update(variants(defaults))
    times = time_choices(case, choices, a.rounds, a.calls, a.smoke)
    row = dict(graph=gname, model=model, heads=heads, dim=dim, dtype=dtype, dropout=dropout,
               nodes=g.num_nodes, edges=g.num_edges, schedules=choices, origin=origin, us=times)
    log(f"{gname:10} {case.label():34} " + "  ".join(
        f"{c}: " + " ".join(f"{times[c].get(p, float('nan')):8.1f}" for p in PASSES) for c in times))
    return row


def step_section(a, device, log):
    """PyG's examples/gat.py step on Cora: eager PyG, eager dfgnn, the dense parts alone, and dfgnn
    (and the dense parts) captured in one CUDA graph."""
    import torch
    import torch.nn.functional as F
    import dfgnn.torch as dt
    from train_cora import load_planetoid, make_gat
    data = load_planetoid(REPO / "data" / "cora")
    dtype = torch.float64 if a.smoke else torch.float32
    x = torch.as_tensor(data["x"], device=device, dtype=dtype)
    y = torch.as_tensor(data["y"], device=device)
    ei = torch.as_tensor(data["edge_index"], device=device)
    train = torch.as_tensor(data["train"], device=device)
    n, classes = x.shape[0], data["num_classes"]

    class Dense(torch.nn.Module):
        """GATConv's dense parts (projection, attention vectors' dot products, bias, concat/mean)
        without the attention op: what this model costs in torch alone."""

        def __init__(self, in_channels, out_channels, heads=1, concat=True, dropout=0.0):
            super().__init__()
            self.heads, self.out, self.concat = heads, out_channels, concat
            self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
            self.att_src = torch.nn.Parameter(0.1 * torch.randn(1, heads, out_channels))
            self.att_dst = torch.nn.Parameter(0.1 * torch.randn(1, heads, out_channels))
            self.bias = torch.nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels))

        def forward(self, x, _edge_index):
            h = self.lin(x).view(-1, self.heads, self.out)
            score = (h * self.att_src).sum(-1) + (h * self.att_dst).sum(-1)
            h = h * torch.sigmoid(score).unsqueeze(-1)
            h = h.reshape(-1, self.heads * self.out) if self.concat else h.mean(1)
            return h + self.bias

    impls = {"dfgnn": dt.GATConv, "dense parts": Dense}
    try:
        import torch_geometric.nn as pyg
        impls["pyg"] = pyg.GATConv
    except ImportError:
        log("step: torch_geometric not importable, PyG left out")
    graph = dt.graph(ei, n, add_self_loops=True)  # prebuilt, for the captured steps

    def build(conv, capturable):
        torch.manual_seed(0)
        model = make_gat(conv, x.shape[1], classes, 0.6).to(device, dtype).train()
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4, capturable=capturable)
        return model, opt

    steps = {}
    for name, conv in impls.items():
        model, opt = build(conv, False)

        def step(model=model, opt=opt):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x, ei)[train], y[train]).backward()
            opt.step()
        steps[f"{name} eager"] = step
    if device.type == "cuda":
        for name in ("dfgnn", "dense parts"):
            model, opt = build(impls[name], True)
            static = {}

            def body(model=model, opt=opt):
                opt.zero_grad(set_to_none=False)
                loss = F.cross_entropy(model(x, graph)[train], y[train])
                loss.backward()
                opt.step()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    body()
            torch.cuda.current_stream().wait_stream(side)
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg):
                body()
            static[name] = cg
            steps[f"{name} captured"] = cg.replay
    for step in steps.values():
        for _ in range(3):
            step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    samples = {k: [] for k in steps}
    names = list(steps)
    count = 3 if a.smoke else a.steps
    for r in range(a.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            t0 = time.perf_counter()
            for _ in range(count):
                steps[name]()
            sync()
            samples[name].append((time.perf_counter() - t0) * 1e3 / count)
    result = {k: statistics.median(v) for k, v in samples.items()}
    kernels = {}
    if device.type == "cuda":
        for name in ("dfgnn captured", "dfgnn eager"):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    steps[name]()
                sync()
            ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            kernels[name] = dict(all_us=sum(e.time_range.elapsed_us() for e in ev) / 20,
                                 dfgnn_us=sum(e.time_range.elapsed_us() for e in ev if "dfgnn" in e.name) / 20,
                                 dfgnn_kernels=sum(1 for e in ev if "dfgnn" in e.name) / 20)
    log("step ms: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
    for k, v in kernels.items():
        log(f"step kernels {k}: all {v['all_us']:.1f} us, dfgnn {v['dfgnn_us']:.1f} us in {v['dfgnn_kernels']:.0f} kernels")
    return dict(ms=result, kernels=kernels, steps_per_block=count, rounds=a.rounds)


# ---------------------------------------------------------------- report

def fmt(x, d=1):
    return "-" if x is None or x != x else f"{x:.{d}f}"


def markdown(report):
    lines = [f"# Kernel time per pass for users' op shapes ({report['meta']['date']})", "",
             f"Commit `{report['meta']['commit']}`, {report['meta']['gpu']}, torch {report['meta']['torch']}. "
             "GPU time per call (CUPTI kernel durations through torch.profiler, median over "
             f"{report['meta']['rounds']} interleaved rounds of {report['meta']['calls']} calls); "
             "`python bench/shapes.py " + report["meta"]["argv"] + "`.", ""]
    rows = report["rows"]

    def find(section, **k):
        for r in rows:
            if r["section"] == section and all(r[a] == b for a, b in k.items()):
                return r
        return None
    heads = [r for r in rows if r["section"] == "heads" and r["heads"] > 1]
    if heads:
        lines += ["## Many heads of few channels against one head of H * D (default schedules)", "",
                  "| graph | model | dtype | H x D | fwd us | ref fwd | ratio | row us | ref | ratio | col us | ref | ratio | schedule (fwd) |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in heads:
            ref = find("heads", graph=r["graph"], model=r["model"], dtype=r["dtype"], heads=1, dim=r["heads"] * r["dim"])
            cells = []
            for p in ("forward", "backward_row", "backward_col"):
                a = r["us"]["default"].get(p)
                b = ref["us"]["default"].get(p) if ref else None
                cells += [fmt(a), fmt(b), fmt(a / b if a and b else None, 2)]
            lines.append(f"| {r['graph']} | {r['model']} | {r['dtype']} | {r['heads']} x {r['dim']} | " + " | ".join(cells) +
                         f" | `{r['schedules']['default']['forward']}` |")
        lines.append("")
    drop = [r for r in rows if r["section"] == "dropout"]
    if drop:
        lines += ["## Attention dropout 0.6 against none (default schedules)", "",
                  "| graph | model | dtype | H x D | fwd us | p=0.6 | ratio | row us | p=0.6 | ratio | col us | p=0.6 | ratio |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in drop:
            base = find("dropout_base", graph=r["graph"], model=r["model"], dtype=r["dtype"], heads=r["heads"], dim=r["dim"])
            cells = []
            for p in ("forward", "backward_row", "backward_col"):
                b = base["us"]["default"].get(p) if base else None
                a = r["us"]["default"].get(p)
                cells += [fmt(b), fmt(a), fmt(a / b if a and b else None, 2)]
            lines.append(f"| {r['graph']} | {r['model']} | {r['dtype']} | {r['heads']} x {r['dim']} | " + " | ".join(cells) + " |")
        lines.append("")
    tuned = [r for r in rows if "tuned" in r["us"]]
    if tuned:
        lines += ["## Default against tuned schedules", "",
                  "| section | graph | model | dtype | H x D | pass | default us | tuned us | default / tuned | default | tuned |",
                  "|---|---|---|---|---|---|---:|---:|---:|---|---|"]
        for r in tuned:
            for p in ("forward", "backward_row", "backward_col"):
                d, t = r["us"]["default"].get(p), r["us"]["tuned"].get(p)
                lines.append(f"| {r['section']} | {r['graph']} | {r['model']} | {r['dtype']} | {r['heads']} x {r['dim']} | {p} | "
                             f"{fmt(d)} | {fmt(t)} | {fmt(d / t if d and t else None, 2)} | "
                             f"`{r['schedules']['default'][p]}` | `{r['schedules']['tuned'][p]}` |")
        lines.append("")
    split = [r for r in rows if r["section"] == "split" and len(r["us"]) > 1]
    if split:
        names = [f"split{n}" for n in SPLITS]
        lines += ["## Hub split threshold and chunk (the default's schedule otherwise)", "",
                  "| graph | model | dtype | H x D | pass | default | " + " | ".join(f"{n} us" for n in names) +
                  " | best | default schedule |", "|---|---|---|---|---|---|" + "---:|" * len(names) + "---|---|"]
        for r in split:
            for p in ("forward", "backward_row", "backward_col"):
                us = {n: r["us"][n].get(p) for n in names if n in r["us"]}
                best = min((v, n) for n, v in us.items() if v)[1] if any(us.values()) else "-"
                lines.append(f"| {r['graph']} | {r['model']} | {r['dtype']} | {r['heads']} x {r['dim']} | {p} | "
                             f"{fmt(r['us']['default'].get(p))} | " + " | ".join(fmt(us.get(n)) for n in names) +
                             f" | {best} | `{r['schedules']['default'][p]}` |")
        lines.append("")
    if report.get("step"):
        s = report["step"]
        lines += ["## PyG examples/gat.py training step on Cora (wall ms per step)", "",
                  "| step | ms |", "|---|---:|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in s["ms"].items()]
        for k, v in s.get("kernels", {}).items():
            lines += ["", f"{k}: GPU time of all kernels {v['all_us']:.1f} us per step, of dfgnn's "
                      f"{v['dfgnn_us']:.1f} us in {v['dfgnn_kernels']:.0f} kernels."]
        lines.append("")
    if report.get("errors"):
        lines += ["## Errors", ""] + [f"- {e['section']} {e.get('case', '')}: {e['error']}" for e in report["errors"]] + [""]
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(argv)
    os.environ.setdefault("DFGNN_CACHE_DIR", tempfile.mkdtemp(prefix="dfgnn-shapes-"))  # nothing tuned before
    import torch
    device = torch.device("cpu" if a.smoke else "cuda")
    sections = set(a.sections.split(","))
    graphs = ["smoke"] if a.smoke else a.graphs.split(",")
    models = a.models.split(",")
    dtypes = ["float32"] if a.smoke else a.dtypes.split(",")
    rows = []
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)
    t_start = time.time()
    commit = tree_commit()
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), commit=commit,
                gpu=torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
                torch=torch.__version__, rounds=a.rounds, calls=a.calls, argv=" ".join(sys.argv[1:] if argv is None else argv))
    report = dict(meta=meta, rows=rows, step=None, errors=[])
    stem = out / f"{a.tag}-shapes"

    def write():  # after every case, so that a run stopped at its time limit keeps what it measured
        meta["seconds"] = round(time.time() - t_start, 1)
        pathlib.Path(f"{stem}.json").write_text(json.dumps(report, indent=1))
        pathlib.Path(f"{stem}.md").write_text(markdown(report))

    def add(section, *args, **kw):
        try:
            rows.append(dict(section=section, **run_case(*args, **kw)))
        except Exception as e:  # one failed case is reported, the others still run
            report["errors"].append(dict(section=section, case=repr(args[1:7]), error=f"{type(e).__name__}: {e}"))
            log(f"ERROR {section} {args[1:7]}: {type(e).__name__}: {e}")
        write()
    for gname in graphs:
        g = load_graph(gname, a.datasets, a.smoke)
        log(f"=== {gname}: {g.num_nodes} nodes, {g.num_edges} edges ({time.time() - t_start:.0f} s)")
        for model in models:
            for dtype in dtypes:
                if "heads" in sections:
                    for h, d in sorted(set(HEADS_SHAPES) | {(1, h * d) for h, d in HEADS_SHAPES}):
                        add("heads", g, gname, model, h, d, dtype, 0.0, a, device, False, log)
                if "dropout" in sections:
                    for h, d in ((8, 8), (1, 7)):
                        add("dropout_base", g, gname, model, h, d, dtype, 0.0, a, device, False, log)
                        add("dropout", g, gname, model, h, d, dtype, 0.6, a, device, False, log)
                if "tuned" in sections and dtype == dtypes[0]:
                    for hd in a.tuned_shapes.split(","):
                        h, d = map(int, hd.split("x"))
                        add("tuned", g, gname, model, h, d, dtype, 0.0, a, device, True, log)
                if "classes" in sections and dtype == dtypes[0]:
                    for d in map(int, a.class_dims.split(",")):
                        add("classes", g, gname, model, 1, d, dtype, 0.0, a, device, True, log)
        if "split" in sections:
            for c in a.split_configs.split(","):
                model, hd = c.split(":")
                h, d = map(int, hd.split("x"))
                add("split", g, gname, model, h, d, dtypes[0], 0.0, a, device, False, log, variants=split_variants)
    if "step" in sections:
        try:
            report["step"] = step_section(a, device, log)
        except Exception as e:
            report["errors"].append(dict(section="step", error=f"{type(e).__name__}: {e}"))
            log(f"ERROR step: {type(e).__name__}: {e}")
    write()
    log(f"wrote {stem}.json and {stem}.md ({meta['seconds']} s, {len(report['errors'])} errors)")


if __name__ == "__main__":
    main()
