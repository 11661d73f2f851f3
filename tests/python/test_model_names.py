"""Every list of model names in the tree agrees with the library's model table (dfgnnModelName):
the package's and dfgnn.torch's come from it, the benchmark scripts' are checked against it (the
tools' in tests/cpu/test_cli.cpp)."""

import ast

import pytest

import dfgnn
from dfgnn import _dfgnn
from conftest import REPO, requires_torch

TABLE = [_dfgnn.model_name(model) for model in dfgnn.Model]  # dfgnn_model_t order


def test_names_round_trip():
    assert TABLE == ["gat", "gatv2", "transformer", "agnn"]
    for value, name in enumerate(TABLE):
        model = _dfgnn.model_from_name(name)
        assert model == dfgnn.Model(value)
        assert model.name == name.upper()


def test_unknown_name_names_the_models():
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=r"'resnet' is no model \(the models are gat, gatv2, transformer, agnn\)"):
        _dfgnn.model_from_name("resnet")
    with pytest.raises(dfgnn.InvalidArgumentError, match="expected one of gat, gatv2, transformer, agnn"):
        dfgnn.op("resnet", "float32", 1, 4)


def test_package_lists():
    assert list(dfgnn.MODEL_INPUTS) == TABLE
    assert [dfgnn.op(name, "float32", 1, 4).model for name in TABLE] == list(dfgnn.Model)


@requires_torch
def test_torch_lists():
    import dfgnn.torch as dt
    from dfgnn.torch import _autograd, _spec
    assert list(_spec.SPECS) == TABLE
    assert list(_spec._MODEL_OPTIONS) == TABLE
    assert list(_autograd._DOCS) == TABLE
    assert all(callable(getattr(dt, name)) for name in TABLE)


def _literal(path, variable):
    """The value of the first assignment to `variable` in a Python file (at any depth)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} assigns no {variable}")


# Lists indexed by the model's value keep the table's order; the others hold its names.
@pytest.mark.parametrize("script, variable, ordered", [
    ("tools/fit_default_rule.py", "MODEL_NAMES", True),
    ("bench/tune_twice_summary.py", "MODELS", True),
    ("tools/calibrate_nearest.py", "models", True),
    ("bench/pyg_compare.py", "MODELS", False),
    ("bench/pyg_compare.py", "PYG_LAYER", False),
    ("bench/tuning_acceptance.py", "MODELS", False),
])
def test_bench_lists(script, variable, ordered):
    value = _literal(REPO / script, variable)
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value)] if ordered else list(value)
    assert (list(value) if ordered else sorted(value)) == (TABLE if ordered else sorted(TABLE))
