"""dfgnn.torch as torch custom ops: registration (torch.library.opcheck), torch.compile with
fullgraph=True, CUDA graph capture and torch.autocast. The CPU tests run the float64 reference path
(torch only); the CUDA tests skip without a device."""

import copy
import gc

import numpy as np
import pytest

import dfgnn
from conftest import HAS_TORCH, REPO, requires_torch, requires_torch_cuda

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt

EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N = 7
SHAPES = {"gat": [(N, 2, 3), (2, 3), (1, 2, 3)], "gatv2": [(N, 2, 3), (N, 2, 3), (2, 3)],
          "transformer": [(N, 2, 3)] * 3, "agnn": [(N, 2, 3), (1,)]}
FEATURES = ("h", "h_dst", "q", "k", "v")


def _op_args(model, spec, device="cpu", dtype=None, dropout=None):
    """Arguments of the forward custom op; dropout=(p, seed) adds the two trailing options (left
    out, they take their schema defaults 0.0 and 0)."""
    dtype = dtype or torch.float64
    names = dfgnn.MODEL_INPUTS[model]
    xs = []
    for name, shape in zip(names, SHAPES[model]):
        t = torch.randn(shape, dtype=dtype if name in FEATURES or dtype == torch.float64 else torch.float32,
                        device=device)
        xs.append(t.requires_grad_())
    return (*xs, *spec, 0.2, None, None) + (tuple(dropout) if dropout else ())


def _specs(device="cpu"):
    ei = torch.tensor(EDGES.T.copy(), device=device)
    g = dt.graph(ei, N)
    return g, [(None, g.key, False), (ei, 0, False), (ei, 0, True)]


if HAS_TORCH:
    class Stack(torch.nn.Module):
        """One layer of each kind, as a compiled model would hold them."""

        def __init__(self, cin=16):
            super().__init__()
            self.gat = dt.GATConv(cin, 8, heads=4)
            self.gt = dt.TransformerConv(32, 8, heads=2)
            self.gatv2 = dt.GATv2Conv(16, 4, heads=2, concat=False)
            self.agnn = dt.AGNNConv()

        def forward(self, x, g):
            x = torch.relu(self.gat(x, g))
            x = torch.relu(self.gt(x, g))
            x = self.gatv2(x, g)
            return self.agnn(x, g)

    class DropoutStack(Stack):
        """Stack with attention dropout in the three layers that have it."""

        def __init__(self, cin=16, p=0.3):
            super().__init__(cin)
            for layer in (self.gat, self.gt, self.gatv2):
                layer.dropout = p


def _cora(device):
    ei = np.loadtxt(REPO / "data" / "cora" / "edges.txt", dtype=np.int64, comments="#").T.copy()
    return torch.from_numpy(ei).to(device), 2708


def _run(model, x, g):
    """Output and the gradients of x and every parameter for loss = sum(out^2)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    out = model(x, g)
    out.float().square().sum().backward()
    return [out.detach()] + [x.grad] + [p.grad for p in model.parameters()]


def _assert_all_close(got, want, tol):
    """Norm-wise relative errors below tol, for the output, dx and every parameter gradient. The
    denominator has a floor (a tenth of the largest norm) because TransformerConv's key bias has an
    analytically zero gradient (softmax ignores a per-row shift): only rounding noise is left there."""
    floor = 0.1 * max(b.double().norm().item() for b in want)
    errors = [((a.double() - b.double()).norm() / max(b.double().norm().item(), floor, 1e-300)).item()
              for a, b in zip(got, want)]
    assert len(got) == len(want) and max(errors) < tol, \
        f"relative errors (output, dx, parameter gradients): {[f'{e:.2g}' for e in errors]}"


# ---------------------------------------------------------------- CPU (float64 reference path)


@requires_torch
@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer", "agnn"])
def test_opcheck(model):
    """Schema, fake (meta) implementation, autograd registration and AOT dispatch of the custom op,
    with the graph given by key and as an edge_index tensor (with and without added self-loops)."""
    torch.manual_seed(0)
    _g, specs = _specs()
    for spec in specs:
        torch.library.opcheck(dt.OPS[model], _op_args(model, spec))
        torch.library.opcheck(dt.OPS[model], _op_args(model, spec, dropout=(0.3, 1234)))


@requires_torch
def test_compile_fullgraph_attention_dropout():
    """Layers in training mode with attention dropout draw a seed per call with
    torch.randint(...).item() inside forward: torch.compile(fullgraph=True) traces the draw (a
    data-dependent symbolic int passed to the custom op as a SymInt) without a graph break, does not
    recompile for new seeds, and under the same torch.manual_seed gives eager's masks, outputs and
    gradients (aot_eager runs the traced torch.randint on the same generator; inductor may draw
    other values, equally reproducible)."""
    torch.manual_seed(0)
    ei = torch.randint(0, 60, (2, 400))
    g = dt.graph(ei, 60, add_self_loops=True)
    model = DropoutStack().double().train()
    x = torch.randn(60, 16, dtype=torch.float64)
    torch._dynamo.reset()
    frames = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def backend(gm, inputs):
        frames.append(gm)
        return aot_eager(gm, inputs)

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    outs = []
    for step in range(3):
        torch.manual_seed(100 + step)
        want = _run(model, x, g)
        torch.manual_seed(100 + step)
        got = _run(compiled, x, g)
        _assert_all_close(got, want, 1e-12)
        outs.append(got[0])
    assert not torch.equal(outs[0], outs[1]), "the same mask in two steps"
    assert len(frames) == 1, f"{len(frames)} compilations for 3 seeds"
    torch._dynamo.reset()


@requires_torch
@pytest.mark.parametrize("graph_kind", ["Graph", "edge_index"])
def test_compile_fullgraph_matches_eager(graph_kind):
    """torch.compile(fullgraph=True) traces a stack of the four layers without a graph break (it
    raises otherwise) and gives eager's output and gradients. aot_eager keeps the CPU test fast; the
    CUDA test below uses inductor."""
    torch.manual_seed(0)
    ei = torch.randint(0, 60, (2, 400))
    g = dt.graph(ei, 60, add_self_loops=True) if graph_kind == "Graph" else ei
    model = Stack().double()
    x = torch.randn(60, 16, dtype=torch.float64)
    want = _run(model, x, g)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for _ in range(2):
        _assert_all_close(_run(compiled, x, g), want, 1e-12)


@requires_torch
def test_compile_new_graph_does_not_keep_recompiling():
    """A Graph travels by its integer key: after one recompile the key becomes symbolic, so
    mini-batch training with a new Graph per step reuses the compiled code."""
    torch.manual_seed(0)
    layer = dt.GATConv(8, 4, heads=2).double()
    torch._dynamo.reset()
    frames = []
    compiled = torch.compile(layer, fullgraph=True, backend=lambda gm, _inputs: frames.append(gm) or gm.forward)
    for _ in range(5):
        ei = torch.randint(0, 40, (2, 160))
        g = dt.graph(ei, 40, add_self_loops=True)
        x = torch.randn(40, 8, dtype=torch.float64)
        torch.testing.assert_close(compiled(x, g), layer(x, g), rtol=1e-12, atol=1e-12)
    assert len(frames) <= 2, f"{len(frames)} compilations for 5 graphs"
    torch._dynamo.reset()  # drop the compiled code and its references to the graphs


@requires_torch
def test_temporary_graph_lives_until_backward():
    g_edges = np.ascontiguousarray(EDGES.T)
    h = torch.randn(N, 2, 3, dtype=torch.float64, requires_grad=True)
    a = torch.randn(2, 3, dtype=torch.float64)
    out = dt.gat(dfgnn.Graph(g_edges, N), h, a, a)     # nothing else holds this Graph
    gc.collect()
    out.sum().backward()
    out = dt.gat(g_edges, h, a, a)                      # a NumPy edge_index: a Graph made on the fly
    gc.collect()
    out.sum().backward()


@requires_torch
def test_freed_graph_key_is_a_clear_error():
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), N)
    key = g.key
    del g
    gc.collect()
    h = torch.randn(N, 2, 3, dtype=torch.float64)
    a = torch.randn(2, 3, dtype=torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match="no longer exists"):
        dt.OPS["gat"](h, a, a, None, key, False, 0.2, None, None)


@requires_torch
def test_errors_pass_through_the_op():
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), N)
    a = torch.randn(2, 3, dtype=torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match="the graph has 7 nodes"):
        dt.gat(g, torch.randn(5, 2, 3, dtype=torch.float64), a, a)


# ---------------------------------------------------------------- CUDA


@requires_torch_cuda
@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer", "agnn"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_cuda_opcheck(model, dtype_name):
    torch.manual_seed(0)
    _g, specs = _specs("cuda")
    for spec in specs[:2]:
        torch.library.opcheck(dt.OPS[model], _op_args(model, spec, "cuda", getattr(torch, dtype_name)),
                              atol=1e-2 if dtype_name == "bfloat16" else None,
                              rtol=1e-2 if dtype_name == "bfloat16" else None)


@requires_torch_cuda
@pytest.mark.parametrize("graph_kind,backend", [("Graph", "inductor"), ("edge_index", "aot_eager")])
def test_cuda_compile_matches_eager(graph_kind, backend):
    """fullgraph compilation on CUDA (inductor once; aot_eager for the edge_index variant, which
    traces the same way and saves an inductor compile)."""
    torch.manual_seed(0)
    ei, n = _cora("cuda")
    g = dt.graph(ei, n, add_self_loops=True) if graph_kind == "Graph" else ei
    model = Stack().cuda()
    x = torch.randn(n, 16, device="cuda")
    want = _run(model, x, g)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    for _ in range(2):
        # inductor fuses the linear layers' epilogues differently: float32 rounding, not bitwise
        _assert_all_close(_run(compiled, x, g), want, 1e-5)


@requires_torch_cuda
def test_cuda_compile_reduce_overhead():
    """torch.compile's CUDA graphs (mode="reduce-overhead"): the ops are recorded, not skipped, and
    replays on new inputs give eager's results."""
    from torch._dynamo.utils import counters
    torch.manual_seed(0)
    ei, n = _cora("cuda")
    g = dt.graph(ei, n, add_self_loops=True)
    model = Stack().cuda()
    xs = [torch.randn(n, 16, device="cuda") for _ in range(3)]
    want = [_run(model, x, g) for x in xs]
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        for x, w in zip(xs, want):
            got = [t.clone() for t in _run(compiled, x, g)]   # replays overwrite the static outputs
            _assert_all_close(got, w, 1e-5)
    assert counters["inductor"]["cudagraph_skips"] == 0, "inductor skipped CUDA graphs (see the log)"


@requires_torch_cuda
@pytest.mark.parametrize("graph_kind", ["Graph", "edge_index"])
def test_cuda_graph_capture_replay(graph_kind):
    """Forward and backward captured in a CUDA graph (torch.cuda.graph, after warm-up on a side
    stream) and replayed on new inputs give what eager gives (same kernels: only cuBLAS may differ)."""
    torch.manual_seed(0)
    ei, n = _cora("cuda")
    g = dt.graph(ei, n, add_self_loops=True) if graph_kind == "Graph" else ei
    model = Stack().cuda()
    reference = copy.deepcopy(model)
    static_x = torch.randn(n, 16, device="cuda", requires_grad=True)

    def step():
        out = model(static_x, g)
        out.float().square().sum().backward()
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):    # warm-up: kernels compiled, plans built, allocator pools settled
            model.zero_grad(set_to_none=True)
            static_x.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    static_x.grad = None
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        static_out = step()
    static = [static_out, static_x.grad] + [p.grad for p in model.parameters()]
    for seed in range(3):
        torch.manual_seed(100 + seed)
        x = torch.randn(n, 16, device="cuda")
        with torch.no_grad():
            static_x.copy_(x)
        cuda_graph.replay()
        got = [t.clone() for t in static]
        _assert_all_close(got, _run(reference, x, g), 1e-6)


@requires_torch_cuda
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_cuda_autocast(dtype_name):
    """Under torch.autocast the attention runs in the autocast dtype (attention vectors stay
    float32), gradients reach the float32 parameters, and the result stays near float32's."""
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    ei, n = _cora("cuda")
    g = dt.graph(ei, n, add_self_loops=True)
    model = Stack().cuda()
    x = torch.randn(n, 16, device="cuda")
    want = _run(model, x, g)
    h = torch.randn(n, 4, 8, device="cuda")
    a = torch.randn(1, 4, 8, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        assert dt.gat(g, h, a, a).dtype == dtype
        got = _run(model, x, g)
    for p in model.parameters():
        assert p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
    _assert_all_close(got, want, 5e-2)


@requires_torch_cuda
def test_cuda_compile_autocast_bf16():
    """Autocast inside a fullgraph-compiled model (dynamo traces the autocast dtype choice; aot_eager
    runs the traced graphs without an inductor compile)."""
    torch.manual_seed(0)
    ei, n = _cora("cuda")
    g = dt.graph(ei, n, add_self_loops=True)
    model = Stack().cuda()
    x = torch.randn(n, 16, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = _run(model, x, g)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        got = _run(compiled, x, g)
    _assert_all_close(got, want, 2e-2)
