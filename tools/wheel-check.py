#!/usr/bin/env python3
"""Checks an installed dfgnn wheel from outside the source tree's build: run it with the Python of
the venv that holds the wheel, from the repository root (it reads data/cora and tests/python/npref.py,
the independent NumPy reference). Prints one line per check and exits non-zero on the first failure.

  wheel-check.py                 CPU: import, a graph, the float64 reference ops against NumPy, the
                                 CLIs (--help, dfgnn-graph on Cora); run by tools/wheel-test.sh
  wheel-check.py --no-nvrtc      also: the first compile fails with NOT_SUPPORTED naming what was
                                 searched (wheel-test.sh hides the CUDA Toolkit)
  wheel-check.py --gpu           also: NVRTC found, the GPU ops of all four models against the
                                 reference, and a dfgnn.torch GATConv training step (needs a GPU, torch)
"""

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))  # npref only; dfgnn comes from the venv
import npref  # noqa: E402

# Duplicate edges, a self-loop, a hub (node 2) and node 6 without in-edges.
EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5), (5, 4), (1, 3),
                  (6, 2), (2, 1)])
N = 7


def ok(what):
    print(f"wheel-check: ok: {what}", flush=True)


def check(condition, what):
    if not condition:
        raise SystemExit(f"wheel-check: FAILED: {what}")
    ok(what)


def cpu_checks(dfgnn):
    where = Path(dfgnn.__file__).resolve()
    check(not where.is_relative_to(ROOT / "python_bindings"), f"dfgnn imported from the installed wheel ({where.parent})")
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    row_ptr = g.csr()[0]
    want_ptr = np.concatenate([[0], np.cumsum(np.bincount(EDGES[:, 1], minlength=N))])
    check(list(row_ptr) == list(want_ptr), "a graph's CSR row pointers (in-edges per target) match NumPy")
    rng = np.random.default_rng(7)
    for model in dfgnn.MODEL_INPUTS:  # every model of the library's table
        inputs = npref.random_inputs(model, N, 2, 3, rng)
        out, lse = dfgnn.reference_forward(g, model, inputs)
        want_out, want_lse = npref.forward(model, N, EDGES, inputs)
        np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)
        grad_out = rng.standard_normal(out.shape)
        grads = dfgnn.reference_backward(g, model, inputs, grad_out)
        want = npref.numeric_grads(lambda: npref.forward(model, N, EDGES, inputs)[0], inputs, grad_out)
        for name in inputs:
            np.testing.assert_allclose(grads[name], want[name], rtol=1e-6, atol=1e-7, err_msg=f"{model} d/d{name}")
        ok(f"{model}: reference forward and backward match NumPy")


def cli_checks():
    scripts = Path(sysconfig.get_path("scripts"))
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}  # no LD_LIBRARY_PATH, no CUDA_HOME
    for tool in ["dfgnn-tune", "dfgnn-db", "dfgnn-graph"]:
        r = subprocess.run([str(scripts / tool), "--help"], env=env, capture_output=True, text=True)
        check(r.returncode == 0 and "--help" in r.stdout, f"{tool} --help (exit {r.returncode}) {r.stderr.strip()[:300]}")
    r = subprocess.run([str(scripts / "dfgnn-graph"), str(ROOT / "data" / "cora")], env=env, capture_output=True,
                       text=True)
    check(r.returncode == 0 and "2708" in r.stdout, f"dfgnn-graph data/cora (exit {r.returncode}) {r.stderr.strip()[:300]}")


def no_nvrtc_check(dfgnn):
    op = dfgnn.op("gat", "float32", heads=1, dim=32)
    try:
        dfgnn.ops.compile(op, "forward", "subwarp:lanes=16,groups=8,vec=4", arch=90)
    except dfgnn.NotSupportedError as e:
        message = str(e)
        check("NVRTC" in message and "/usr/local/cuda/lib64/libnvrtc.so" in message and "Tried:" in message,
              f"without NVRTC the first compile raises NotSupportedError listing what was tried:\n{message}")
        return
    raise SystemExit("wheel-check: FAILED: compiling succeeded although NVRTC should be hidden")


def shipped_modules_check(dfgnn):
    shipped = Path(dfgnn.__file__).resolve().parent / "data" / "tuning" / "sm90-modules.db"
    size = f"{shipped.stat().st_size / 2**20:.1f} MiB" if shipped.is_file() else "missing"
    check(shipped.is_file(), f"the shipped modules are installed ({shipped}: {size})")
    g = dfgnn.Graph.from_file(ROOT / "data" / "cora", add_self_loops=True)
    op = dfgnn.op("gat", "float32", heads=8, dim=8)
    for direction in ("forward", "backward"):
        dfgnn.ops.compile(op, direction, graph=g, arch=90)
    check(dfgnn.ops.cache_counters()["compiles"] == 0,
          "without NVRTC, GAT 8 x 8 on Cora (PyG's examples/gat.py) compiles nothing: its modules load from the "
          "shipped file")


def gpu_checks(dfgnn):
    available, reason = dfgnn.has_device()
    check(available, f"a CUDA device ({reason or 'available'})")
    import torch
    import dfgnn.torch as dt
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    rng = np.random.default_rng(11)
    heads, dim = 2, 32
    for model in dfgnn.MODEL_INPUTS:  # every model of the library's table
        host = npref.random_inputs(model, N, heads, dim, rng)
        dev = {k: torch.from_numpy(v.astype(np.float32)).cuda() for k, v in host.items()}
        out = torch.empty(N, heads, dim, device="cuda")
        lse = torch.empty(N, heads, device="cuda")
        dfgnn.ops.forward(g, model, dev, out, lse, stream=torch.cuda.current_stream().cuda_stream,
                          allocator=lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        ref_in = {k: v.astype(np.float32).astype(np.float64) for k, v in host.items()}
        want, _ = dfgnn.reference_forward(g, model, ref_in)
        err = float(np.max(np.abs(out.cpu().numpy() - want)))
        check(err < 1e-4, f"{model}: GPU forward matches the float64 reference (max abs error {err:.2e})")
    with open("/proc/self/maps") as maps:
        nvrtc = sorted({line.split()[-1] for line in maps if "libnvrtc.so" in line})
    check(bool(nvrtc), f"NVRTC loaded at run time from {', '.join(nvrtc)}")
    # One training step of a GATConv on Cora-sized random data: the loss falls and gradients are finite.
    torch.manual_seed(0)
    n, e, f, classes = 2708, 10556, 64, 7
    ei = torch.randint(0, n, (2, e), device="cuda")
    x = torch.randn(n, f, device="cuda")
    y = torch.randint(0, classes, (n,), device="cuda")
    conv1, conv2 = dt.GATConv(f, 8, heads=8).cuda(), dt.GATConv(64, classes, heads=1).cuda()
    params = list(conv1.parameters()) + list(conv2.parameters())
    opt = torch.optim.Adam(params, lr=0.01)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        logits = conv2(torch.nn.functional.elu(conv1(x, ei)), ei)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        check(all(p.grad is not None and torch.isfinite(p.grad).all() for p in params), "finite gradients")
        opt.step()
        losses.append(float(loss))
    check(losses[-1] < losses[0], f"dfgnn.torch GATConv training steps lower the loss ({losses[0]:.4f} -> {losses[-1]:.4f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-nvrtc", action="store_true", help="NVRTC is hidden: expect the clear error")
    parser.add_argument("--gpu", action="store_true", help="also the GPU ops and a dfgnn.torch training step")
    args = parser.parse_args()
    os.chdir(tempfile.mkdtemp(prefix="dfgnn-wheel-check-"))  # away from the source tree's python_bindings
    os.environ["DFGNN_CACHE_DIR"] = os.getcwd()  # an empty user cache: modules come from the package or NVRTC
    import dfgnn
    ok(f"import dfgnn {dfgnn.__version__}")
    cpu_checks(dfgnn)
    cli_checks()
    if args.no_nvrtc:
        no_nvrtc_check(dfgnn)
        shipped_modules_check(dfgnn)
    if args.gpu:
        gpu_checks(dfgnn)
    print("wheel-check: all checks passed")


if __name__ == "__main__":
    main()
