#!/usr/bin/env python3
"""Where dfgnn.torch's native ops crash when they raise an error (seen on the H200 with torch 2.11:
passing CPU tensors to torch.ops.dfgnn_native.attention ended the process with SIGSEGV instead of a
RuntimeError; the same build raises cleanly on a machine without a GPU).

Builds a copy of python_bindings/dfgnn/torch/_native_ops.cpp with progress markers on stderr and one
extra op that only raises, then runs each case in its own subprocess and prints its exit status and
markers:
- ``throw``: an op with no arguments that raises (is raising from this library enough?);
- ``throw-formatted``: the same with a message of several arguments (TORCH_CHECK formats them
  through an std::ostringstream compiled into this library);
- ``throw-string``: the same with one std::string message (what c10::str hands libc10 after
  formatting, without the formatting);
- ``prepared``: constructing the Prepared of a small host-built graph;
- ``refuse``: the refusal of CPU tensors (the crash);
- ``refuse-after-cuda``: the same after CUDA was initialised;
- ``size``: the refusal of a list of the wrong length;
- ``del-graph``: the refusal after the Python Graph (and the op) were dropped (the Prepared holds a
  graph reference).

    python bench/native_crash_probe.py OUTDIR [--source CPP]   (default: the installed package's source)
"""
import pathlib
import subprocess
import sys

CASE = r'''
import ctypes, sys, numpy as np, torch, dfgnn
from dfgnn import _dfgnn
torch.ops.load_library(sys.argv[1])
case = sys.argv[2]
def mark(s): print("probe:", s, file=sys.stderr, flush=True)
libstdcxx = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libstdc++" in line})
mark("libstdc++ loaded: " + ", ".join(libstdcxx))
if case in ("throw", "throw-formatted", "throw-string"):
    try:
        getattr(torch.ops.dfgnn_native, "probe_" + case.replace("-", "_"))()
    except RuntimeError as e:
        mark("raised " + str(e)[:80])
    sys.exit(0)
if case == "refuse-after-cuda":
    torch.zeros(1, device="cuda"); mark("cuda initialised")
g = dfgnn.Graph(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), num_nodes=3)
op = dfgnn.op("transformer", "float32", 2, 4)
mark("making the Prepared")
p = torch.classes.dfgnn_native.Prepared(_dfgnn.default_context()._address, g._h._address, op._address, None)
mark("prepared")
if case == "prepared":
    sys.exit(0)
if case == "del-graph":
    del g, op
    import gc; gc.collect(); mark("graph and op dropped")
q = torch.randn(3, 2, 4)
try:
    args = [q, q] if case == "size" else [q, q, q]
    torch.ops.dfgnn_native.attention(p.address(), *args, *[None] * (4 - len(args)), None, 0)
except RuntimeError as e:
    mark("raised " + str(e)[:80])
mark("done")
'''


def main():
    import argparse
    a = argparse.ArgumentParser()
    a.add_argument("outdir", type=pathlib.Path)
    a.add_argument("--source", type=pathlib.Path, default=None)
    args = a.parse_args()
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    from dfgnn.torch import _native
    src = (args.source or _native._SOURCE).read_text()
    def patch(anchor, replacement):
        assert anchor in src, f"the probe's anchor is gone from the source: {anchor!r}"
        return src.replace(anchor, replacement)
    src = patch("  // checked before the autograd Function",
                '  std::fprintf(stderr, "probe: attention entered, prepared %p\\n", (void*)prepared.get());\n'
                '  std::fprintf(stderr, "probe: %zu slots, %zu inputs\\n", prepared->slots.size(), inputs.size());\n'
                "  // checked before the autograd Function")
    src = patch("  return Attention::apply(prepared, at::TensorList(inputs), seed, seed_value);",
                '  std::fprintf(stderr, "probe: checks passed\\n");\n'
                "  return Attention::apply(prepared, at::TensorList(inputs), seed, seed_value);")
    src = patch('int seed_value) -> Tensor");',
                'int seed_value) -> Tensor");\n  m.def("probe_throw() -> ()", [] {\n'
                '    std::fprintf(stderr, "probe: about to raise\\n");\n'
                '    TORCH_CHECK(false, "probe error");\n  });\n'
                '  m.def("probe_throw_formatted() -> ()", [] {\n'
                '    std::fprintf(stderr, "probe: about to raise a formatted message\\n");\n'
                '    TORCH_CHECK(false, "probe error ", 3, " formatted by an ostringstream");\n  });\n'
                '  m.def("probe_throw_string() -> ()", [] {\n'
                '    std::fprintf(stderr, "probe: about to raise an std::string message\\n");\n'
                '    TORCH_CHECK(false, std::string("probe error ") + "as one std::string");\n  });')
    src = "#include <cstdio>\n" + src
    probe_src = out / "native_probe.cpp"
    probe_src.write_text(src)
    cmd, _ = _native._build_inputs()
    lib = out / "native_probe.so"
    cmd = [str(probe_src) if c == str(_native._SOURCE) else c for c in cmd]
    r = subprocess.run(cmd[:-1] + ["-o", str(lib)] + cmd[-1:], capture_output=True, text=True)
    print("build:", r.returncode, r.stderr[-2000:], flush=True)
    if r.returncode:
        sys.exit(1)
    print("compiler:", subprocess.run([cmd[0], "--version"], capture_output=True, text=True).stdout.splitlines()[0])
    for case in ("throw", "throw-formatted", "throw-string", "prepared", "refuse", "refuse-after-cuda", "size", "del-graph"):
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CASE, str(lib), case], capture_output=True,
                           text=True, timeout=120)
        markers = [line for line in r.stderr.splitlines() if line.startswith("probe:")]
        print(f"{case}: exit {r.returncode}", *markers, sep="\n  ", flush=True)
        (out / f"{case}.stderr").write_text(r.stderr)


if __name__ == "__main__":
    main()
