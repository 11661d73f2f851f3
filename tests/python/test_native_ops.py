"""dfgnn.torch's native eager ops (python_bindings/dfgnn/torch/_native_ops.cpp, built and loaded by
_native.py): a TORCH_LIBRARY op with its autograd in C++, taken by CUDA eager calls whose kind the
Python path has validated and prepared.

Without a GPU: the library builds against the installed torch (once per key: a second build() is
the same file), registers its op and class, refuses CPU tensors by name (after its graph object was
dropped); it is off by default, DFGNN_TORCH_NATIVE=0 and a failing build fall back (with a warning),
DFGNN_TORCH_NATIVE=1 turns a failure into an error.
On a GPU: every model (edge features and dropout, int and device seeds) gives the Python path's
outputs and gradients bitwise (the same kernels), first and warm calls take the native path, a
call it refuses gets the Python path's error, and a backward still runs after its dfgnn.Graph was
dropped (the native Prepared holds a graph reference).
"""

import gc
import pathlib
import shutil

import numpy as np
import pytest

import dfgnn
from conftest import HAS_TORCH, requires_torch, requires_torch_cuda

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt
    from dfgnn.torch import _native


def _buildable():
    if not HAS_TORCH:
        return "PyTorch is not installed"
    try:
        _native._build_inputs()
    except RuntimeError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def native_lib():
    """The library, built into the native cache (conftest: the user's) if not there yet, and loaded
    into torch.ops."""
    reason = _buildable()
    if reason:
        pytest.skip(f"the native ops cannot be built here: {reason}")
    path = _native.build()
    torch.ops.load_library(str(path))
    return path


@pytest.fixture
def fresh_state(monkeypatch):
    """_native decides again (and the decision is undone after the test)."""
    monkeypatch.setattr(_native, "_state", None)
    monkeypatch.setattr(_native, "_builder", None)
    return monkeypatch


@requires_torch
def test_builds_once_and_registers(native_lib):
    assert native_lib.is_file()
    mtime = native_lib.stat().st_mtime_ns
    assert _native.build() == native_lib  # found, not rebuilt
    assert native_lib.stat().st_mtime_ns == mtime
    assert callable(torch.ops.dfgnn_native.attention)
    schema = str(torch.ops.dfgnn_native.attention.default._schema)
    assert "int prepared, Tensor a, Tensor? b, Tensor? c, Tensor? d, Tensor? seed, int seed_value" in schema


_REFUSAL = """
import numpy as np, torch, dfgnn
from dfgnn import _dfgnn
torch.ops.load_library({lib!r})
g = dfgnn.Graph(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), num_nodes=3)
op = dfgnn.op("transformer", "float32", 2, 4)
def prepared():
    return torch.classes.dfgnn_native.Prepared(_dfgnn.default_context()._address, g._h._address, op._address, None)
p = prepared()
gone = prepared()
gone_address = gone.address()
del gone
try:
    torch.classes.dfgnn_native.Prepared(_dfgnn.default_context()._address, g._h._address, op._address, "a\\0b")
except RuntimeError as e:
    assert "the schedule holds a NUL" in str(e), str(e)
else:
    raise AssertionError("a schedule with a NUL was taken")
del g, op  # the Prepared copied the op and holds its own graph reference
import gc; gc.collect()
q = torch.randn(3, 2, 4)
for address, args, want in ((p.address(), [q, q, q], "CUDA tensors only"),
                            (p.address(), [q, q], "3 input tensors expected, got 2"),
                            (p.address(), [q, None, q], "an input tensor follows a None"),
                            (12345, [q, q, q], "12345 is not the address of a live Prepared"),
                            (gone_address, [q, q, q], "is not the address of a live Prepared")):
    try:
        torch.ops.dfgnn_native.attention(address, *args, *[None] * (4 - len(args)), None, 0)
    except RuntimeError as e:
        assert want in str(e), str(e)
    else:
        raise AssertionError("no error")
print("refused")
"""


@requires_torch
def test_cpu_tensors_are_refused_by_name(native_lib):
    """In a subprocess: on the H200 (torch 2.11) this error crashed the process (the reason the
    native ops are opt-in); here a crash fails the test instead of the session. (The graph's
    reference count is tested in C++, Api.RetainedGraphLivesUntilTheLastRelease, and on a GPU
    by test_backward_after_the_graph_was_dropped.)"""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _REFUSAL.format(lib=str(native_lib))], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "refused" in r.stdout, f"exit {r.returncode}: {r.stderr[-2000:]}"


@requires_torch
def test_auto_by_default(fresh_state):
    fresh_state.delenv("DFGNN_TORCH_NATIVE", raising=False)
    assert _native._mode() == "auto"


@requires_torch
def test_switched_off(fresh_state):
    fresh_state.setenv("DFGNN_TORCH_NATIVE", "0")
    assert _native.ops() is None
    s = _native.status()
    assert s["available"] is False and s["reason"] == "DFGNN_TORCH_NATIVE=0"


@requires_torch
def test_bad_mode_is_named(fresh_state):
    fresh_state.setenv("DFGNN_TORCH_NATIVE", "yes")
    with pytest.raises(ValueError, match="DFGNN_TORCH_NATIVE must be auto, 0 or 1"):
        _native.ops()


@pytest.fixture
def failing_compiler(fresh_state, tmp_path):
    """A fresh cache and a compiler that always fails (CXX=false)."""
    if _buildable():
        pytest.skip(f"the native ops cannot be built here: {_buildable()}")
    fresh_state.setenv("DFGNN_NATIVE_CACHE_DIR", str(tmp_path))
    fresh_state.setenv("CXX", shutil.which("false") or "/bin/false")
    return fresh_state


def _slow_failing_compiler(monkeypatch, tmp_path):
    slow = tmp_path / "slow-failing-cxx"
    slow.write_text("#!/bin/sh\nsleep 3\nexit 1\n")
    slow.chmod(0o755)
    monkeypatch.setenv("CXX", str(slow))
    monkeypatch.setenv("DFGNN_TORCH_NATIVE", "auto")
    monkeypatch.setattr(_native, "_builder", None)


@requires_torch
def test_failed_build_falls_back_with_a_warning(failing_compiler, tmp_path):
    """Mode auto builds in a detached process: calls take the Python path meanwhile, and the call
    after the build failed warns once and stays on it."""
    _slow_failing_compiler(failing_compiler, tmp_path)
    assert _native.ops() is None
    assert _native.status()["reason"].startswith("building in the background")
    with pytest.warns(RuntimeWarning, match="runs its Python call path"):
        s = _native.status(wait=True)
    assert "failed (exit 1" in s["reason"] and not s["available"]
    assert _native._builder is None and _native.ops() is None  # decided: no second build
    assert not list(tmp_path.glob("native-ops-*/*.so")), "a failed build left a temporary library"
    # a later process (a fresh decision, the same compiler) does not compile again, and says why
    # without a warning
    failing_compiler.setattr(_native, "_state", None)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.ops() is None
    s = _native.status()
    assert s["reason"].startswith("an earlier build failed") and "exit 1" in s["reason"], s


@requires_torch
def test_waiting_for_the_status_as_the_first_call_waits(failing_compiler, tmp_path):
    _slow_failing_compiler(failing_compiler, tmp_path)
    with pytest.warns(RuntimeWarning, match="runs its Python call path"):
        s = _native.status(wait=True)
    assert "failed (exit 1" in s["reason"], s


@requires_torch
def test_cuda_headers_are_looked_for_in_order_and_the_wheels_only_when_needed(monkeypatch, tmp_path):
    """CUDA_HOME's headers come first; the nvidia wheels' directories are globbed only when no earlier
    place has them (that glob was 0.4 ms of a process's first call)."""
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.delenv("CUDA_PATH", raising=False)

    def no_wheels():
        raise AssertionError("the wheels were searched although CUDA_HOME has the headers")

    monkeypatch.setattr(_native._nvrtc, "nvidia_roots", no_wheels)
    assert _native._cuda_include_dirs() == [home / "include"]
    # without CUDA_HOME's header, a wheel's directory is found (when /usr/local/cuda has none)
    (home / "include" / "cuda_runtime_api.h").unlink()
    wheel = tmp_path / "nvidia"
    (wheel / "cuda_runtime" / "include").mkdir(parents=True)
    (wheel / "cuda_runtime" / "include" / "cuda_runtime_api.h").write_text("")
    monkeypatch.setattr(_native._nvrtc, "nvidia_roots", lambda: [str(wheel)])
    found = _native._cuda_include_dirs()
    local = pathlib.Path("/usr/local/cuda/include")
    assert found == ([local] if (local / "cuda_runtime_api.h").is_file() else [wheel / "cuda_runtime" / "include"])


@requires_torch
@pytest.mark.parametrize("name", ["_SOURCE", "_CORE"])
def test_a_missing_source_is_named(name, monkeypatch, tmp_path):
    """A package without the op's source or the prepared-call core it includes cannot build the native
    ops: the reason names the file (and auto mode falls back as for any other missing build input)."""
    missing = tmp_path / getattr(_native, name).name
    monkeypatch.setattr(_native, name, missing)
    with pytest.raises(RuntimeError, match=f"{missing.name} missing"):
        _native._build_inputs()


@requires_torch
def test_auto_without_what_the_build_needs_warns_at_once(fresh_state):
    """Nothing to build with (here no CUDA runtime headers): mode auto starts no builder process and
    says why at once."""
    fresh_state.setenv("DFGNN_TORCH_NATIVE", "auto")
    fresh_state.setattr(_native, "_cuda_include_dirs", lambda: [])
    with pytest.warns(RuntimeWarning, match="no CUDA runtime headers"):
        assert _native.ops() is None
    assert _native._builder is None


@requires_torch
def test_an_interrupted_build_is_not_remembered_as_failed(failing_compiler, tmp_path):
    """A compiler killed by a signal (Ctrl-C reaches it) leaves no failure marker: the next process
    builds again."""
    import sys
    killed = tmp_path / "killed-cxx"
    # SIGINT restored first: a shell started where SIGINT is ignored (a job run in the background
    # without job control, as CI may run it) cannot be interrupted by it, nor reset it.
    killed.write_text(f"#!{sys.executable}\nimport os, signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                      "os.kill(os.getpid(), signal.SIGINT)\n")
    killed.chmod(0o755)
    failing_compiler.setenv("CXX", str(killed))
    failing_compiler.setenv("DFGNN_TORCH_NATIVE", "1")
    with pytest.raises(RuntimeError, match="failed .exit -2"):
        _native.ops()
    assert not list(tmp_path.glob(f"native-ops-*/{_native._FAILED}"))


@requires_torch
def test_auto_loads_a_built_library_at_once(native_lib, fresh_state):
    """Mode auto with the library built (the cache this module's fixture filled): loaded by the first call."""
    fresh_state.setenv("DFGNN_TORCH_NATIVE", "auto")
    fresh_state.setattr(_native, "_builder", None)
    assert _native.ops() is not None
    s = _native.status()
    assert s["available"] and s["library"] == str(native_lib)


def _import_state(env_updates):
    """What a fresh process's `import dfgnn.torch` decided about the native ops, before any call: the
    status it stored (or None) and whether it started a builder."""
    import json, os, subprocess, sys
    env = dict(os.environ, **env_updates)
    code = ("import json, dfgnn.torch._native as n; "
            "print(json.dumps([None if n._state is None else n._state[1], n._builder is not None]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@requires_torch
def test_import_loads_a_built_library(native_lib):
    """A built library loads with the package, so a process's first call does not pay its load; the
    import builds nothing, and DFGNN_TORCH_NATIVE=0 keeps it unloaded."""
    cache = {"DFGNN_NATIVE_CACHE_DIR": str(native_lib.parents[1])}
    state, building = _import_state(dict(cache, DFGNN_TORCH_NATIVE="auto"))
    assert state == {"mode": "auto", "available": True, "library": str(native_lib), "reason": None}
    assert not building
    assert _import_state(dict(cache, DFGNN_TORCH_NATIVE="0")) == [None, False]


@requires_torch
def test_import_without_a_built_library_starts_no_build(tmp_path):
    """Without a built library the import decides nothing (no builder, no warning): the first CUDA call does."""
    assert _import_state({"DFGNN_NATIVE_CACHE_DIR": str(tmp_path), "DFGNN_TORCH_NATIVE": "auto"}) == [None, False]
    assert _import_state({"DFGNN_NATIVE_CACHE_DIR": str(tmp_path), "DFGNN_TORCH_NATIVE": "1"}) == [None, False]
    assert _import_state({"DFGNN_TORCH_NATIVE": "bogus"}) == [None, False]  # the first call names the bad mode
    assert not list(tmp_path.iterdir())


@requires_torch
def test_messages_reach_torch_check_as_one_string():
    """On the H200 a TORCH_CHECK with several message arguments (formatted through an ostringstream
    in this library) crashed the process, while one C string raised cleanly (the native crash probe):
    every message goes through raise(), the only TORCH_CHECK of the source."""
    source = _native._SOURCE.read_text()
    assert source.count("TORCH_CHECK(") == 1 and "TORCH_CHECK(false, message.c_str())" in source
    assert "TORCH_INTERNAL_ASSERT" not in source and "AT_ERROR" not in source


@requires_torch
def test_a_dead_builders_temporary_file_is_removed(failing_compiler, tmp_path):
    """A process that exited during its background build leaves its temporary library behind; the
    next build (which holds the lock, so no other builder is at work) removes it."""
    failing_compiler.setenv("DFGNN_TORCH_NATIVE", "1")
    directory = tmp_path / f"native-ops-{_native._build_inputs()[1]}"
    directory.mkdir()
    stale = directory / f"{_native._TEMP_PREFIX}dead.so"
    stale.write_bytes(b"half a library")
    with pytest.raises(RuntimeError, match="failed"):
        _native.ops()
    assert not stale.exists()
    assert not list(directory.glob("*.so"))


@requires_torch
def test_a_forked_child_forgets_the_parents_build(fresh_state):
    """A forked child (a DataLoader worker) did not start the builder; it decides again when it needs the ops."""
    import os
    fresh_state.setattr(_native, "_builder", {"process": None, "stderr": None, "next_poll": 0.0})
    fresh_state.setattr(_native, "_state", (None, {}))
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _native._builder is None and _native._state is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _native._builder is not None  # the parent's is untouched


@requires_torch
def test_a_compiler_that_writes_nothing_is_a_failed_build(failing_compiler, tmp_path):
    """A compiler exiting 0 without output (mkstemp's empty file stays empty) is a failed build that
    says so, not a library that cannot be loaded."""
    failing_compiler.setenv("CXX", shutil.which("true") or "/bin/true")
    failing_compiler.setenv("DFGNN_TORCH_NATIVE", "1")
    with pytest.raises(RuntimeError, match="the compiler exited 0 but wrote no library"):
        _native.ops()
    assert not list(tmp_path.glob("native-ops-*/*.so"))


@requires_torch
def test_required_and_failing_is_an_error(failing_compiler):
    failing_compiler.setenv("DFGNN_TORCH_NATIVE", "1")
    with pytest.raises(RuntimeError, match="required .DFGNN_TORCH_NATIVE=1. but unavailable"):
        _native.ops()


# ---------------------------------------------------------------- on a GPU

def _opted_in(monkeypatch):
    """The native ops with DFGNN_TORCH_NATIVE=1 (opt-in), decided afresh."""
    monkeypatch.setenv("DFGNN_TORCH_NATIVE", "1")
    monkeypatch.setattr(_native, "_state", None)
    ops = _native.ops()
    assert ops is not None, _native.status()
    return ops


def _model_call(model, g, t, edge, dropout, seed):
    kw = dict(dropout=dropout, dropout_seed=seed)
    if model == "gat":
        return dt.gat(g, t["h"], t["att_src"], t["att_dst"], edge=edge, **kw)
    if model == "gatv2":
        return dt.gatv2(g, t["h"], t["h_dst"], t["att"], edge=edge, **kw)
    if model == "transformer":
        return dt.transformer(g, t["q"], t["k"], t["v"], edge=edge, **kw)
    return dt.agnn(g, t["h"], t["beta"], **kw)


def _tensors(model, n, e, heads, dim, edge_features, device):
    gen = torch.Generator(device="cpu").manual_seed(7)

    def r(*shape):
        return torch.randn(*shape, generator=gen).to(device).requires_grad_()
    t = {"gat": lambda: dict(h=r(n, heads, dim), att_src=r(heads, dim), att_dst=r(heads, dim)),
         "gatv2": lambda: dict(h=r(n, heads, dim), h_dst=r(n, heads, dim), att=r(heads, dim)),
         "transformer": lambda: dict(q=r(n, heads, dim), k=r(n, heads, dim), v=r(n, heads, dim)),
         "agnn": lambda: dict(h=r(n, heads, dim), beta=r(1))}[model]()
    edge = None
    if edge_features and model != "agnn":
        edge = r(e, heads) if model == "gat" else r(e, heads, dim)
    return t, edge


def _run(model, g, t, edge, dropout, seed, go):
    for v in list(t.values()) + ([edge] if edge is not None else []):
        v.grad = None
    out = _model_call(model, g, t, edge, dropout, seed)
    out.backward(go)
    grads = [v.grad.clone() for v in t.values()] + ([edge.grad.clone()] if edge is not None else [])
    return out.detach().clone(), grads


@requires_torch_cuda
@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer", "agnn"])
@pytest.mark.parametrize("edge_features", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_native_matches_the_python_path_bitwise(model, edge_features, dropout, monkeypatch):
    if edge_features and model == "agnn":
        pytest.skip("AGNN takes no edge features")
    device = torch.device("cuda")
    n, e = 300, 2400
    gen = torch.Generator().manual_seed(1)
    ei = torch.randint(0, n, (2, e), generator=gen)
    g = dfgnn.Graph(ei.numpy(), num_nodes=n)
    t, edge = _tensors(model, n, g.num_edges, 2, 16, edge_features, device)
    go = torch.randn(n, 2, 16, device=device)
    seeds = [12345, torch.tensor([987654321], device=device)] if dropout else [0]
    calls = []
    real_ops = _opted_in(monkeypatch)
    for seed in seeds:
        monkeypatch.setattr(_native, "ops", lambda: None)
        python = [_run(model, g, t, edge, dropout, seed, go) for _ in range(2)]  # first call, then warm
        monkeypatch.setattr(_native, "ops", lambda: _Counting(real_ops, calls))
        calls.clear()
        native = _run(model, g, t, edge, dropout, seed, go)
        assert calls == ["attention"], "the warm call did not take the native path"
        for a, b in zip([python[1][0]] + python[1][1], [native[0]] + native[1]):
            torch.testing.assert_close(b, a, rtol=0, atol=0)


@requires_torch_cuda
@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer", "agnn"])
@pytest.mark.parametrize("edge_features", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_native_first_calls_match_the_python_path_bitwise(model, edge_features, dropout, monkeypatch):
    """A new graph's first call and backward, native against Python: every model, with edge
    features and dropout (a device seed tensor), as each mini-batch step runs them."""
    if edge_features and model == "agnn":
        pytest.skip("AGNN takes no edge features")
    device = torch.device("cuda")
    n, e = 200, 1500
    ei = torch.randint(0, n, (2, e), generator=torch.Generator().manual_seed(3))
    seed = torch.tensor([424242], device=device)
    real_ops = _opted_in(monkeypatch)
    results = []
    for native in (False, True):
        g = dfgnn.Graph(ei.numpy(), num_nodes=n)  # a new graph: the first call of its kind
        t, edge = _tensors(model, n, g.num_edges, 2, 8, edge_features, device)
        go = torch.randn(n, 2, 8, device=device, generator=torch.Generator(device=device).manual_seed(5))
        calls = []
        monkeypatch.setattr(_native, "ops", (lambda: _Counting(real_ops, calls)) if native else (lambda: None))
        results.append(_run(model, g, t, edge, dropout, seed, go))
        assert calls == (["attention"] if native else [])
    (out_p, grads_p), (out_n, grads_n) = results
    for a, b in zip([out_p] + grads_p, [out_n] + grads_n):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@requires_torch_cuda
def test_first_calls_take_the_native_path(monkeypatch):
    """A new kind (here a new graph, as every mini-batch step brings) is prepared and run by the
    native path from its first call, forward and backward, with the Python path's results."""
    device = torch.device("cuda")
    q, k, v = (torch.randn(5, 1, 8, device=device, requires_grad=True) for _ in range(3))
    go = torch.randn(5, 1, 8, device=device)
    results = {}
    real_ops = _opted_in(monkeypatch)
    for native in (False, True):
        g = dfgnn.Graph(np.array([[0, 1, 2, 3, 4, 2], [1, 2, 3, 4, 0, 0]]), num_nodes=5)  # a new graph each time
        calls = []
        monkeypatch.setattr(_native, "ops", (lambda: _Counting(real_ops, calls)) if native else (lambda: None))
        q.grad = k.grad = v.grad = None
        out = dt.transformer(g, q, k, v)
        out.backward(go)
        assert calls == (["attention"] if native else [])
        results[native] = [out.detach()] + [t.grad.clone() for t in (q, k, v)]
    for a, b in zip(results[False], results[True]):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@requires_torch_cuda
def test_a_refused_first_call_raises_the_python_paths_error(monkeypatch):
    """The native op refuses a first call whose tensors the binding would refuse (here k with its
    heads and channels swapped: the same number of elements), and the Python path then raises its
    typed error; nothing is cached for the refused kind."""
    from dfgnn.torch import _calls
    device = torch.device("cuda")
    g = dfgnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    q, v = torch.randn(4, 2, 4, device=device), torch.randn(4, 2, 4, device=device)
    k = torch.randn(4, 4, 2, device=device)
    calls = []
    real_ops = _opted_in(monkeypatch)
    monkeypatch.setattr(_native, "ops", lambda: _Counting(real_ops, calls))
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"\[.k.\] must have shape \[N, H, D\]"):
        dt.transformer(g, q, k, v)
    assert calls == [] and not _calls._launches.get(g)


@requires_torch_cuda
@pytest.mark.parametrize("case", ["att_src [H, D+1]", "edge [E, 2H]"])
def test_refused_gat_inputs_raise_the_python_paths_error(case, monkeypatch):
    """The native op's shape checks beyond the features: a wrong attention vector, a wrong GAT edge
    input (the binding's messages, through the Python path; nothing cached)."""
    from dfgnn.torch import _calls
    device = torch.device("cuda")
    g = dfgnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    h = torch.randn(4, 2, 4, device=device)
    att_src, att_dst = torch.randn(2, 4, device=device), torch.randn(2, 4, device=device)
    edge = None
    if case.startswith("att_src"):
        att_src, want = torch.randn(2, 5, device=device), r"must have shape \[H, D\]"
    else:
        edge, want = torch.randn(g.num_edges, 4, device=device), r"must have shape \[E, H\]"
    calls = []
    real_ops = _opted_in(monkeypatch)
    monkeypatch.setattr(_native, "ops", lambda: _Counting(real_ops, calls))
    with pytest.raises(dfgnn.InvalidArgumentError, match=want):
        dt.gat(g, h, att_src, att_dst, edge=edge)
    assert calls == [] and not _calls._launches.get(g)


@requires_torch_cuda
def test_attention_vectors_shaped_as_pyg_parameters_run_natively(monkeypatch):
    """[1, H, D] attention vectors (PyG's parameter shape), which the binding accepts, run natively
    with the Python path's results."""
    device = torch.device("cuda")
    h = torch.randn(6, 2, 4, device=device)
    att_src, att_dst = torch.randn(1, 2, 4, device=device), torch.randn(1, 2, 4, device=device)
    real_ops = _opted_in(monkeypatch)
    outs = []
    for native in (False, True):
        g = dfgnn.Graph(np.array([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]), num_nodes=6)
        calls = []
        monkeypatch.setattr(_native, "ops", (lambda: _Counting(real_ops, calls)) if native else (lambda: None))
        outs.append(dt.gat(g, h, att_src, att_dst))
        assert calls == (["attention"] if native else [])
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)


class _Counting:
    """torch.ops.dfgnn_native seen through a recorder of the op calls that returned (a failed native
    call falls back to the Python path, which must not count as the native path taken)."""
    def __init__(self, ops, calls):
        self._ops, self._calls = ops, calls

    def __getattr__(self, name):
        op = getattr(self._ops, name)

        def call(*args):
            out = op(*args)
            self._calls.append(name)
            return out
        return call


@requires_torch_cuda
def test_backward_after_the_graph_was_dropped(monkeypatch):
    import weakref
    real_ops = _opted_in(monkeypatch)
    device = torch.device("cuda")
    n = 64
    ei = torch.randint(0, n, (2, 400), generator=torch.Generator().manual_seed(3))
    q, k, v = (torch.randn(n, 2, 8, device=device, requires_grad=True) for _ in range(3))
    go = torch.randn(n, 2, 8, device=device)
    g = dfgnn.Graph(ei.numpy(), num_nodes=n)
    monkeypatch.setattr(_native, "ops", lambda: None)
    for _ in range(2):                           # Python path: prepares both directions, then the reference
        q.grad = k.grad = v.grad = None
        dt.transformer(g, q, k, v).backward(go)
    expected = [t.grad.clone() for t in (q, k, v)]
    q.grad = k.grad = v.grad = None
    calls = []
    monkeypatch.setattr(_native, "ops", lambda: _Counting(real_ops, calls))
    out = dt.transformer(g, q, k, v)
    assert calls == ["attention"], "the call did not take the native path"
    alive = weakref.ref(g)
    del g
    gc.collect()
    assert alive() is None, "the dfgnn.Graph is still referenced: the test would not show the native reference"
    out.backward(go)                             # its Prepared keeps the C graph alive
    for t, want in zip((q, k, v), expected):
        torch.testing.assert_close(t.grad, want, rtol=0, atol=0)


@requires_torch_cuda
@pytest.mark.parametrize("native", [False, True])
def test_a_seed_changed_before_backward_is_caught(native, monkeypatch):
    """The backward regenerates the forward's dropout mask from the seed tensor, so both paths save
    it for backward: changing it in place in between raises instead of giving a wrong gradient."""
    real_ops = _opted_in(monkeypatch)
    device = torch.device("cuda")
    g = dfgnn.Graph(np.array([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 3]]), num_nodes=5)
    q, k, v = (torch.randn(5, 1, 8, device=device, requires_grad=True) for _ in range(3))
    seed = torch.tensor([5], device=device)
    monkeypatch.setattr(_native, "ops", lambda: None)
    dt.transformer(g, q, k, v, dropout=0.3, dropout_seed=seed).sum().backward()  # prepares the kind
    calls = []
    monkeypatch.setattr(_native, "ops", (lambda: _Counting(real_ops, calls)) if native else (lambda: None))
    out = dt.transformer(g, q, k, v, dropout=0.3, dropout_seed=seed)
    assert calls == (["attention"] if native else [])
    out.sum().backward(retain_graph=True)  # unchanged: runs
    seed.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@requires_torch_cuda
@pytest.mark.parametrize("native", [False, True])
def test_double_backward_is_refused(native, monkeypatch):
    """Both paths' backward is once differentiable: a second backward through their gradients raises
    (it would otherwise miss its terms silently)."""
    real_ops = _opted_in(monkeypatch)
    device = torch.device("cuda")
    g = dfgnn.Graph(np.array([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 3]]), num_nodes=5)
    q, k, v = (torch.randn(5, 1, 8, device=device, requires_grad=True) for _ in range(3))
    monkeypatch.setattr(_native, "ops", lambda: None)
    dt.transformer(g, q, k, v).sum().backward()  # prepares the kind on the Python path
    calls = []
    monkeypatch.setattr(_native, "ops", (lambda: _Counting(real_ops, calls)) if native else (lambda: None))
    out = dt.transformer(g, q, k, v)
    assert calls == (["attention"] if native else [])
    # (a gradient that requires grad: only then does a second backward reach the op's backward;
    # with a constant one, torch's once_differentiable, too, returns gradients without a graph)
    (gq,) = torch.autograd.grad(out, q, torch.randn_like(out).requires_grad_(), create_graph=True)
    assert gq.requires_grad
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gq.sum().backward()
