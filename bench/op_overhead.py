#!/usr/bin/env python3
"""Host-side cost of one layer call, dfgnn.torch vs PyG, on Cora (launch-bound: every kernel is a few
microseconds of GPU work, so a call's wall time is the Python and launch time of the host).

For each layer (GATConv 8x8, TransformerConv 4x64, 1433 -> hidden), times forward+backward per call
as the wall time of N back-to-back calls (one synchronize at the end), the GPU time of the same calls
with CUDA events, and prints a cProfile of dfgnn's calls (the functions with the most own time).

    python bench/op_overhead.py [--calls 300] [--profile 25]
"""
import argparse
import cProfile
import pathlib
import pstats
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
from train_cora import load_planetoid  # noqa: E402


def step_fn(layer, x, edge_index):
    def step():
        out = layer(x, edge_index)
        out.sum().backward()
    return step


def wall_per_call(step, calls):
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def gpu_per_call(step, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--profile", type=int, default=25, help="rows of the cProfile table (0: none)")
    args = p.parse_args()
    import torch_geometric.nn as pyg
    import dfgnn.torch as dt

    data = load_planetoid(REPO / "data" / "cora")
    dev = torch.device("cuda")
    x = torch.as_tensor(data["x"], dtype=torch.float32, device=dev)
    ei = torch.as_tensor(data["edge_index"], dtype=torch.long, device=dev)
    f = x.shape[1]
    layers = {
        "GATConv 8x8": (lambda m: m.GATConv(f, 8, heads=8)),
        "TransformerConv 4x64": (lambda m: m.TransformerConv(f, 64, heads=4)),
    }
    print(f"Cora: {x.shape[0]} nodes, {ei.shape[1]} edges; {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{'layer':24} {'impl':6} {'wall us/call':>13} {'gpu us/call':>12}")
    for name, make in layers.items():
        torch.manual_seed(0)
        for impl, mod in (("dfgnn", dt), ("pyg", pyg)):
            layer = make(mod).to(dev)
            step = step_fn(layer, x, ei)
            wall = wall_per_call(step, args.calls)
            gpu = gpu_per_call(step, args.calls)
            print(f"{name:24} {impl:6} {wall:13.1f} {gpu:12.1f}")
        if args.profile:
            layer = make(dt).to(dev)
            step = step_fn(layer, x, ei)
            for _ in range(20):
                step()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(100):
                step()
            torch.cuda.synchronize()
            prof.disable()
            print(f"--- cProfile, dfgnn {name}, 100 calls (tottime = own time)")
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
