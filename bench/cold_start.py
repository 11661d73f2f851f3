#!/usr/bin/env python3
"""Cold start: what a fresh process waits for before its first steps (issue 25).

Every measurement runs in a new Python process, so nothing compiled, loaded or planned before is
in memory. Per (graph, zoo config) and cache state it records wall times of:

- ``first_forward_ms``: the first ``dfgnn.torch`` forward (synchronised), which chooses the
  schedule, compiles or loads its module, plans and launches;
- ``first_backward_ms``: then the first backward of it, from a scalar loss as in training;
- ``second_step_ms``: one more forward+backward (nothing left to compile or plan);
- ``compiles``: NVRTC runs in the process (``dfgnn.cache_counters()``), and ``modules``: where
  each pass's module came from (``dfgnn.explain``'s ``module``).

Each graph is built as the model's ``dfgnn.torch`` layer builds it: with a self-loop per node for
GAT, GATv2 and AGNN, as read for the Graph Transformer.

Cache states: ``cold`` (an empty user cache directory, the shipped database as installed) and
``warm`` (a second process on the cache directory the cold one filled). Graph build time is
not counted.

``--compile-only`` needs no GPU: per zoo config, a fresh process compiles the modules of the
default schedules on the graph (``dfgnn.compile``, forward, then backward) and records the wall
time of each direction and of each module (from the INFO line each compile logs). That is the
NVRTC cost alone on this host's CPUs.

``--breakdown`` also times torch's own first backward (a plain autograd op, before dfgnn's calls:
the autograd engine's start-up) and profiles dfgnn's first backward with cProfile.

Usage: bench/cold_start.py --out DIR [--graphs cora,pubmed,rmat-20] [--configs zoo|model:H:D:dtype,...]
                           [--compile-only] [--breakdown] [--datasets DIR]
Output: DIR/<date>-cold-start.json and .md.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from zoo import read_zoo  # noqa: E402

# Run in the child: prints one JSON line. Arguments: mode, graph, datasets, model, H, D, dtype.
CHILD = r"""
import json, os, sys, time
mode, gname, datasets, model, heads, dim, dtype = sys.argv[1:8]
t_import = time.perf_counter()
if mode != "compile":  # the compile-only mode runs without PyTorch
    import torch
    import dfgnn.torch as dt
import dfgnn
heads, dim = int(heads), int(dim)
import_ms = (time.perf_counter() - t_import) * 1e3
sys.path.insert(0, "bench")  # the child runs in the repository
from shapes import load_graph, make_inputs  # the graphs and inputs bench/shapes.py times

# the graph as the model's dfgnn.torch layer builds it: GATConv, GATv2Conv and AGNNConv add self-loops,
# TransformerConv does not
g = load_graph(gname, datasets, False, self_loops=model != "transformer")
out = {"import_ms": import_ms}
if mode == "compile":
    op = dfgnn.op(model, dtype, heads, dim)
    for direction in ("forward", "backward"):
        t = time.perf_counter()
        dfgnn.ops.compile(op, direction, graph=g)
        out[f"{direction}_compile_ms"] = (time.perf_counter() - t) * 1e3
    out["compiles"] = dfgnn.ops.cache_counters()["compiles"]
    print(json.dumps(out))
    sys.exit(0)

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(1)
tdtype = getattr(torch, dtype)
n = g.num_nodes
inputs = make_inputs(model, n, heads, dim, tdtype, dev, gen, True)
grad = torch.randn(n, heads, dim, device=dev, generator=gen).to(tdtype)
fn = getattr(dt, model)
torch.cuda.synchronize()
out["torch_native"] = os.environ.get("DFGNN_TORCH_NATIVE", "auto")
breakdown = os.environ.get("DFGNN_COLD_BREAKDOWN") == "1"


def phase(name):
    # unbuffered, so it falls between the library's "span" lines (stderr) where the phase begins
    os.write(2, f"phase {name}\n".encode())


if breakdown:
    # torch's own first backward (autograd engine start-up), before dfgnn's: the floor of a first step
    x = torch.randn(n, heads * dim, device=dev, generator=gen, requires_grad=True)
    t = time.perf_counter()
    (x * 2).sum().backward()
    torch.cuda.synchronize()
    out["torch_first_backward_ms"] = (time.perf_counter() - t) * 1e3
op = dfgnn.op(model, dtype, heads, dim)
steps = {}
if breakdown:  # the first forward in steps: each one's work is then done when the call comes
    phase("first forward")
    t = time.perf_counter()
    dfgnn.has_device()  # libdfgnn's first CUDA runtime call: its own (static) runtime starts
    steps["cuda_runtime_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    # another op shape first: opens the database layers and reads the GPU's identity, so that the
    # dispatch step below is this op's lookup alone
    dfgnn.explain(g, dfgnn.op("agnn", dtype, 1, 32), "forward")
    steps["db_open_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    dfgnn.explain(g, op, "forward")  # fingerprints the graph, looks the op up, decides
    steps["dispatch_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    major, minor = torch.cuda.get_device_capability()
    dfgnn.ops.compile(op, "forward", arch=major * 10 + minor, graph=g)  # the module: a shipped one, or NVRTC
    steps["module_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    import dfgnn.torch._native as native
    native.ops()  # the native eager ops' library loaded (or the decision to run without them)
    steps["native_load_ms"] = (time.perf_counter() - t) * 1e3


def allocator():  # torch's caching allocator: the segments it has cudaMalloc'ed so far, the bytes it holds
    return torch.cuda.memory_stats().get("segment.all.allocated", 0), torch.cuda.memory_reserved()


def allocated_since(before):
    seg, held = allocator()
    return {"segments": seg - before[0], "mb": round((held - before[1]) / 2**20, 1)}


# What each phase made torch's allocator take from the driver (a second step reuses it): the first
# calls' outputs and saved tensors on a large graph are hundreds of MB.
allocations = {}
before = allocator()
t = time.perf_counter()
y = fn(g, *inputs)
torch.cuda.synchronize()
steps["call_ms"] = (time.perf_counter() - t) * 1e3
allocations["first_forward"] = allocated_since(before)
out["first_forward_ms"] = sum(steps.values())
if breakdown:
    out["first_forward_steps"] = steps
if breakdown:  # profiled: where the first backward's time goes (Python frames; C++ shows as its caller)
    phase("first backward")
    import cProfile, io, pstats
    profile = cProfile.Profile()
    profile.enable()
before = allocator()
t = time.perf_counter()
# A scalar loss, as a training step has: y.backward(tensor) would make torch import its symbolic
# shapes module (and sympy) on first use, about 2 s on the device's venv, none of it dfgnn's.
(y * grad).sum().backward()
torch.cuda.synchronize()
out["first_backward_ms"] = (time.perf_counter() - t) * 1e3
allocations["first_backward"] = allocated_since(before)
if breakdown:
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(20)
    out["first_backward_profile"] = text.getvalue()[-4000:]
if breakdown:
    phase("second step")
before = allocator()
t = time.perf_counter()
(fn(g, *inputs) * grad).sum().backward()
torch.cuda.synchronize()
out["second_step_ms"] = (time.perf_counter() - t) * 1e3
allocations["second_step"] = allocated_since(before)
out["allocations"] = allocations
if breakdown and allocations["first_forward"]["mb"] > 0:
    # What taking the first forward's new memory from the driver costs by itself: the same bytes in
    # one fresh allocation (the cached free segments given back first), synchronised.
    torch.cuda.empty_cache()
    t = time.perf_counter()
    probe = torch.empty(int(allocations["first_forward"]["mb"] * 2**20), dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    out["first_forward_bytes_alloc_ms"] = (time.perf_counter() - t) * 1e3
    del probe
out["compiles"] = dfgnn.ops.cache_counters()["compiles"]
out["native_used"] = dt.native_status()["available"]  # the native eager ops ran these calls
out["modules"] = {p["pass"]: p.get("module", "") for d in ("forward", "backward") for p in dfgnn.explain(g, op, d)}
out["schedules"] = {p["pass"]: p["schedule"] for d in ("forward", "backward") for p in dfgnn.explain(g, op, d)}
print(json.dumps(out))
"""

COMPILE_LINE = re.compile(r"compiled (.+?) for sm_\d+ in (\d+) ms")
SPAN_LINE = re.compile(r"span (.+?): (\d+) us$")


def spans_by_phase(stderr):
    """{phase: {span name: [count, ms]}} from a --breakdown child's stderr: the library's debug
    "span" lines (runtime/src/logging.hpp) summed between the child's "phase" markers."""
    out, current = {}, "before"
    for line in stderr.splitlines():
        if line.startswith("phase "):
            current = line[len("phase "):].strip()
            continue
        m = SPAN_LINE.search(line)
        if m:
            entry = out.setdefault(current, {}).setdefault(m.group(1), [0, 0.0])
            entry[0] += 1
            entry[1] = round(entry[1] + int(m.group(2)) / 1e3, 3)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=pathlib.Path)
    p.add_argument("--graphs", default="cora,pubmed,rmat-20")
    p.add_argument("--configs", default="zoo", help="'zoo' (bench/zoo.txt) or model:H:D:dtype,...")
    p.add_argument("--datasets", default=str(REPO / ".bench-data"))
    p.add_argument("--compile-only", action="store_true", help="NVRTC only, no GPU: dfgnn.compile per direction")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per child process")
    p.add_argument("--breakdown", action="store_true",
                   help="also time torch's own first backward first, profile dfgnn's (cProfile, top 20), split the "
                        "first forward into steps, and sum the library's debug spans per phase")
    p.add_argument("--native", choices=("prebuilt", "none"), default="prebuilt",
                   help="prebuilt (default): the native eager ops are built once, ahead, into a cache every child "
                        "reads, as for a user whose first run built them; none: DFGNN_TORCH_NATIVE=0 (the Python "
                        "path). Without either, each fresh child of an empty cache would start its own background "
                        "build and run the Python path beside it.")
    p.add_argument("--tag", default=datetime.date.today().isoformat())
    return p.parse_args(argv)


def configs(text):
    if text == "zoo":
        return read_zoo()
    out = []
    for c in text.split(","):
        model, heads, dim, dtype = c.strip().split(":")
        out.append((model, int(heads), int(dim), dtype))
    return out


def child(mode, graph, datasets, config, cache_dir, timeout, breakdown=False, native_env=None):
    """One fresh process; its JSON line, plus the compiles its INFO lines report. native_env: the
    native ops' variables (native_setup)."""
    # debug, for the library's "span" lines, with --breakdown
    env = dict(os.environ, DFGNN_CACHE_DIR=str(cache_dir), DFGNN_LOG_LEVEL="debug" if breakdown else "info",
               DFGNN_COLD_BREAKDOWN="1" if breakdown else "0", **(native_env or {}))
    args = [sys.executable, "-c", CHILD, mode, graph, datasets, *map(str, config)]
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    wall_ms = (time.perf_counter() - t) * 1e3
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({r.returncode}): {r.stderr.strip()[-600:]}")
    row = json.loads(r.stdout.strip().splitlines()[-1])
    row["process_ms"] = wall_ms
    row["compiled"] = [{"kernels": m.group(1), "ms": int(m.group(2))} for m in COMPILE_LINE.finditer(r.stderr)]
    if breakdown:
        row["spans"] = spans_by_phase(r.stderr)
    return row


def native_setup(how, out_dir, timeout=900):
    """The environment of the children's native eager ops: prebuilt into OUT/native-ops (built here
    once, in the foreground), or off. A failed build is an error of the run (the rows would measure
    the Python path while claiming the native one)."""
    if how == "none":
        return {"DFGNN_TORCH_NATIVE": "0"}
    env = {"DFGNN_NATIVE_CACHE_DIR": str(out_dir / "native-ops"), "DFGNN_TORCH_NATIVE": "1"}
    r = subprocess.run([sys.executable, "-m", "dfgnn.torch._native"], env=dict(os.environ, **env), capture_output=True,
                       text=True, timeout=timeout, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"building the native ops failed: {r.stderr.strip()[-600:]}")
    return env


def native_cell(row):
    """The native column: the mode asked for, and whether the native ops ran (rows from before that was
    recorded show the mode alone)."""
    mode = row.get("torch_native", "-")
    if "native_used" not in row:
        return mode
    return f"{mode}, {'used' if row['native_used'] else 'not used'}"


def fmt(x, d=0):
    return "-" if x is None else f"{x:.{d}f}"


def markdown(report):
    m = report["meta"]
    lines = [f"# Cold start: first calls of a fresh process ({m['date']})", "",
             f"Commit `{m['commit']}`, {m['host']}; `python bench/cold_start.py {m['argv']}`."
             + (f" Native eager ops: {m['native']}." if m.get("native") else ""), ""]
    rows = report["rows"]
    if m["compile_only"]:
        lines += ["NVRTC only (`dfgnn.compile` of the default schedules, fresh process, empty cache): wall ms.", "",
                  "| graph | model | H x D | dtype | forward ms | backward ms | compiles | slowest module ms |",
                  "|---|---|---|---|---:|---:|---:|---:|"]
        for r in rows:
            slow = max((c["ms"] for c in r["compiled"]), default=None)
            lines.append(f"| {r['graph']} | {r['model']} | {r['heads']} x {r['dim']} | {r['dtype']} | "
                         f"{fmt(r.get('forward_compile_ms'))} | {fmt(r.get('backward_compile_ms'))} | "
                         f"{r.get('compiles', '-')} | {fmt(slow)} |")
        per_module = [c["ms"] for r in rows for c in r["compiled"]]
        if per_module:
            lines += ["", f"Modules compiled: {len(per_module)}; median {statistics.median(per_module):.0f} ms, "
                      f"max {max(per_module)} ms."]
    else:
        lines += ["| graph | model | H x D | dtype | cache | first fwd ms | first bwd ms | torch's first bwd ms | "
                  "second step ms | compiles | native | modules |",
                  "|---|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
        for r in rows:
            mods = sorted(set(r.get("modules", {}).values()))
            lines.append(f"| {r['graph']} | {r['model']} | {r['heads']} x {r['dim']} | {r['dtype']} | {r['cache']} | "
                         f"{fmt(r.get('first_forward_ms'), 1)} | {fmt(r.get('first_backward_ms'), 1)} | "
                         f"{fmt(r.get('torch_first_backward_ms'), 1)} | {fmt(r.get('second_step_ms'), 1)} | "
                         f"{r.get('compiles', '-')} | {native_cell(r)} | {'; '.join(mods)} |")
        steps = [r for r in rows if r.get("first_forward_steps")]
        if steps:
            lines += ["", "First forward in steps (ms): runtime = libdfgnn's first CUDA runtime call (`dfgnn.has_device`); "
                      "db open = `dfgnn.explain` of another op shape (database layers opened, the GPU's identity "
                      "read); dispatch = `dfgnn.explain` of this op (graph fingerprinted, lookup, decision); module "
                      "= `dfgnn.ops.compile` of the dispatched schedule (a shipped or cached module, else NVRTC); "
                      "native = the native eager ops' library loaded; call = the `dfgnn.torch` call after them "
                      "(plan, workspace, module load onto the GPU, launch, synchronise).", "",
                      "| graph | model | H x D | dtype | cache | runtime | db open | dispatch | module | native | call "
                      "| total |",
                      "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
            for r in steps:
                st = r["first_forward_steps"]
                lines.append(f"| {r['graph']} | {r['model']} | {r['heads']} x {r['dim']} | {r['dtype']} | {r['cache']} | "
                             f"{fmt(st.get('cuda_runtime_ms'), 1)} | {fmt(st.get('db_open_ms'), 1)} | "
                             f"{fmt(st.get('dispatch_ms'), 1)} | {fmt(st.get('module_ms'), 1)} | "
                             f"{fmt(st.get('native_load_ms'), 1)} | "
                             f"{fmt(st.get('call_ms'), 1)} | {fmt(r.get('first_forward_ms'), 1)} |")
        allocated = [r for r in rows if r.get("allocations")]
        if allocated:
            lines += ["", "torch's caching allocator in each phase: new segments (cudaMalloc calls) and MB it took "
                      "from the driver; with --breakdown, the time one fresh allocation of the first forward's "
                      "new bytes takes by itself.", "",
                      "| graph | model | H x D | dtype | cache | first fwd | first bwd | second step | alloc ms |",
                      "|---|---|---|---|---|---|---|---|---:|"]
            cell = lambda a: "-" if a is None else f"{a['segments']} seg, {a['mb']:.0f} MB"
            for r in allocated:
                a = r["allocations"]
                lines.append(f"| {r['graph']} | {r['model']} | {r['heads']} x {r['dim']} | {r['dtype']} | {r['cache']} | "
                             f"{cell(a.get('first_forward'))} | {cell(a.get('first_backward'))} | "
                             f"{cell(a.get('second_step'))} | {fmt(r.get('first_forward_bytes_alloc_ms'), 1)} |")
        spanned = [r for r in rows if r.get("spans")]
        if spanned:
            lines += ["", "Inside the library (its debug \"span\" lines, summed per phase; count x, then ms): what "
                      "the first forward, the first backward and the second step spent on one-time work.", "",
                      "| graph | model | H x D | dtype | cache | phase | spans |", "|---|---|---|---|---|---|---|"]
            for r in spanned:
                for ph, spans in r["spans"].items():
                    text = "; ".join(f"{name} {n}x {ms:.2f}" for name, (n, ms) in
                                     sorted(spans.items(), key=lambda kv: -kv[1][1]))
                    lines.append(f"| {r['graph']} | {r['model']} | {r['heads']} x {r['dim']} | {r['dtype']} | "
                                 f"{r['cache']} | {ph} | {text} |")
        profiled = {}
        for r in rows:  # one profile per cache state: the first backward of the first config
            if r.get("first_backward_profile"):
                profiled.setdefault(r["cache"], r)
        for state, r in profiled.items():
            lines += ["", f"First backward profile, {r['graph']} {r['model']} {r['heads']} x {r['dim']} {r['dtype']}, "
                      f"{state} cache (cProfile, cumulative):", "", "```", r["first_backward_profile"].strip(), "```"]
    if report["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e['case']}: {e['error']}" for e in report["errors"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    commit = os.environ.get("DFGNN_COMMIT") or subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), commit=commit,
                host=f"{platform.node()} ({os.cpu_count()} CPUs)", compile_only=a.compile_only,
                argv=" ".join(sys.argv[1:] if argv is None else argv))
    report = dict(meta=meta, rows=[], errors=[])
    stem = a.out / f"{a.tag}-cold-start"
    datasets = a.datasets
    native_env = None
    if not a.compile_only:  # (the compile-only children run without PyTorch)
        native_env = native_setup(a.native, a.out)
        meta["native"] = "off (DFGNN_TORCH_NATIVE=0)" if a.native == "none" else "prebuilt"
    for graph in a.graphs.split(","):
        for config in configs(a.configs):
            case = dict(graph=graph, model=config[0], heads=config[1], dim=config[2], dtype=config[3])
            with tempfile.TemporaryDirectory(prefix="dfgnn-cold-") as cache:
                try:
                    if a.compile_only:
                        report["rows"].append(dict(case, **child("compile", graph, datasets, config, cache, a.timeout)))
                    else:
                        for state in ("cold", "warm"):
                            report["rows"].append(dict(case, cache=state,
                                                       **child("call", graph, datasets, config, cache, a.timeout,
                                                               a.breakdown, native_env)))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    report["errors"].append(dict(case=" ".join(map(str, case.values())), error=str(e)))
            print(json.dumps(report["rows"][-1] if report["rows"] else report["errors"][-1])[:300], flush=True)
            stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
            stem.with_suffix(".md").write_text(markdown(report))
    print(f"wrote {stem}.json and {stem}.md ({len(report['errors'])} errors)")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
