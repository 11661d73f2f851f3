#!/usr/bin/env python3
"""Host time per call of the designs for dfgnn's torch ops, on PubMed GT (H=1, D=128, float32, a
PubMed-sized random graph as in op_overhead.py), same kernels and same graph:
- dfgnn.torch.transformer through its Python autograd Function over the nanobind extension's
  prepared launches (the path before the native ops, still taken where they cannot be built);
- dfgnn.torch.transformer through its native ops (dfgnn/torch/_native_ops.cpp: a TORCH_LIBRARY op
  with its autograd in C++; the default for warm CUDA eager calls);
- the native op called directly with the arguments dfgnn.torch passes it (the front end's share);
- the bench prototype that measured the design first (bench/torch_library_op.cpp: the same kind of
  op with a workspace size query per call; the graph and context travel as the dfgnn handles).
Forward and forward+backward; the metrics of op_overhead.py (host_us, profiler_cpu_us, event_us).

    PYTHONUNBUFFERED=1 python bench/torch_library_compare.py OUTDIR [--build-dir DIR]

Writes OUTDIR/torch_library_compare.json and .md. Needs a GPU and a C++ compiler (each library
builds in well under a minute the first time).
"""
import argparse
import json
import os
import pathlib
import sys

import torch

os.environ.setdefault("DFGNN_TORCH_NATIVE", "1")  # opt-in (see dfgnn.torch.native_status)
import dfgnn  # noqa: E402
import dfgnn.torch as dt
from dfgnn import _dfgnn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import op_overhead as oo  # noqa: E402


def build(build_dir):
    """Compiles torch_library_op.cpp into a shared library (g++ directly: torch.utils.cpp_extension
    needs ninja, which a machine may lack) and loads it into torch.ops."""
    import subprocess
    from torch.utils import cpp_extension
    package = pathlib.Path(dfgnn.__file__).resolve().parent
    build_dir.mkdir(parents=True, exist_ok=True)
    lib = build_dir / "dfgnn_bench_torch_library_op.so"
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = ["g++", "-O2", "-shared", "-fPIC", "-std=c++20", str(HERE / "torch_library_op.cpp"), "-o", str(lib),
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           f"-I{HERE.parent / 'runtime' / 'include'}", f"-I{cuda}/include"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [f"-L{p}" for p in cpp_extension.library_paths()] + [f"-Wl,-rpath,{p}" for p in cpp_extension.library_paths()]
    cmd += ["-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", f"-L{package}", "-l:libdfgnn.so.1",
            f"-Wl,-rpath,{package}"]
    subprocess.run(cmd, check=True)
    torch.ops.load_library(str(lib))
    return torch.ops.dfgnn_bench.transformer


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir", type=pathlib.Path)
    p.add_argument("--build-dir", type=pathlib.Path, default=None, help="the extension's build directory")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median over them)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_library_compare: needs a CUDA device")
    op = build(args.build_dir or args.outdir / "torch_library_build")
    device = torch.device("cuda")
    n, e = oo.PUBMED["nodes"], oo.PUBMED["edges"]
    ei = oo.with_self_loops(oo.random_edge_index(n, e, device), n)
    g = dt.graph(ei, n)
    ctx, handle = _dfgnn.default_context()._address, g._h._address
    torch.manual_seed(0)
    q, k, v = (torch.randn(n, 1, 128, device=device, requires_grad=True) for _ in range(3))
    go = torch.randn(n, 1, 128, device=device)
    from dfgnn.torch import _native
    native_ops = _native.ops()
    if native_ops is None:
        sys.exit(f"torch_library_compare: dfgnn.torch's native ops are unavailable: {_native.status()}")

    def python_path():
        _native.ops = lambda: None  # dfgnn.torch's Python autograd Function (the nanobind launches)
        try:
            return dt.transformer(g, q, k, v)
        finally:
            _native.ops = lambda: native_ops
    _native.ops = lambda: native_ops
    for _ in range(2):  # the first calls validate and prepare (Python path), then the warm paths
        dt.transformer(g, q, k, v).backward(go)
    # the native op as dfgnn.torch calls it, without the front end: what the Python front end costs
    from dfgnn.torch import _calls
    (prep,) = _calls._launches[g].values()
    address = prep.native[1]
    calls = {"dfgnn.torch, Python autograd Function (nanobind launches)": python_path,
             "dfgnn.torch, native ops (C++ autograd)": lambda: dt.transformer(g, q, k, v),
             "the native op alone (as dfgnn.torch calls it)":
                 lambda: native_ops.attention(address, q, k, v, None, None, 0),
             "bench prototype (C++ op, size query per call)": lambda: op(q, k, v, ctx, handle)}
    outs = [f() for f in calls.values()]
    for other in outs[1:]:
        torch.testing.assert_close(other, outs[0], rtol=0, atol=0)  # the same kernels
    # Rounds interleave the designs (a host's speed drifts over a run; the previous order put each
    # design in its own stretch of time); each figure is the median over the rounds.
    samples = {}
    for _ in range(args.rounds):
        for name, forward in calls.items():
            def fwd(forward=forward):
                with torch.no_grad():
                    forward()

            def fwd_bwd(forward=forward):
                forward().backward(go)
            for passes, step in (("forward", fwd), ("forward+backward", fwd_bwd)):
                for _ in range(10):
                    step()
                s = samples.setdefault((name, passes), dict(host_us=[], profiler_cpu_us=[], event_us=[]))
                s["host_us"].append(oo.host_us(step, device, args.batch, args.repeats))
                s["profiler_cpu_us"].append(oo.profiler_cpu_us(step, device, 20))
                s["event_us"].append(oo.event_us(step, device, args.calls))
    import statistics
    rows = []
    for (name, passes), s in samples.items():
        row = dict(impl=name, passes=passes, rounds=args.rounds, **{k: statistics.median(v) for k, v in s.items()})
        rows.append(row)
        print(f"{name:60} {passes:17} host {row['host_us']:7.1f} us  profiler {row['profiler_cpu_us']:7.1f} us  "
              f"event {row['event_us']:7.1f} us", flush=True)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, dfgnn=dfgnn.__version__,
                graph=dict(nodes=n, edges=e, edges_with_loops=int(ei.shape[1])), model="transformer H=1 D=128 fp32")
    args.outdir.mkdir(parents=True, exist_ok=True)
    (args.outdir / "torch_library_compare.json").write_text(json.dumps(dict(meta=meta, results=rows), indent=2) + "\n")
    lines = [f"# nanobind path vs C++ TORCH_LIBRARY op ({meta['device']}, torch {meta['torch']})", "",
             "| impl | passes | host us | profiler us | event us |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['impl']} | {r['passes']} | {r['host_us']:.1f} | {r['profiler_cpu_us']:.1f} | {r['event_us']:.1f} |"
              for r in rows]
    (args.outdir / "torch_library_compare.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
