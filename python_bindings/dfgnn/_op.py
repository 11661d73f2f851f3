"""Model and dtype names, op descriptions, and the inputs each model reads."""

import operator
import warnings

from . import _dfgnn
from ._errors import InvalidArgumentError, invalid_argument

Model = _dfgnn.Model
DType = _dfgnn.DType
Direction = _dfgnn.Direction
Op = _dfgnn.Op

#: Every model by its name, from the library's model table (dfgnnModelName).
_MODELS = {_dfgnn.model_name(model): model for model in Model}


def _takes_edge(model):
    try:
        _dfgnn.model_inputs(model, True)
    except InvalidArgumentError:  # "... takes no edge features"
        return False
    return True


#: Inputs each model reads, in dfgnn_inputs_t order (features first, then parameters), from the
#: library's model table (dfgnnModelInputs).
MODEL_INPUTS = {name: tuple(_dfgnn.model_inputs(model)) for name, model in _MODELS.items()}
FEATURE_INPUTS = ("h", "h_dst", "q", "k", "v")
#: Models that take the optional ``edge`` input (PyG's edge_dim): GAT a [E, H] logit term per edge
#: (float32; float64 for reference ops), GATv2 and Transformer [E, H, D] features (feature dtype),
#: one row per edge id (the order of ``Graph.csr()[2]``). Giving it sets ``Op.edge_features``.
EDGE_MODELS = tuple(name for name, model in _MODELS.items() if _takes_edge(model))

_MODEL_NAMES = {**_MODELS, "graph_transformer": Model.TRANSFORMER}
_DTYPE_NAMES = {
    "float32": DType.FLOAT32, "fp32": DType.FLOAT32, "float": DType.FLOAT32,
    "float16": DType.FLOAT16, "fp16": DType.FLOAT16, "half": DType.FLOAT16,
    "bfloat16": DType.BFLOAT16, "bf16": DType.BFLOAT16,
    "float64": DType.FLOAT64, "fp64": DType.FLOAT64, "double": DType.FLOAT64,
}
_DIRECTIONS = {"forward": Direction.FORWARD, "backward": Direction.BACKWARD}


#: The C types of integer arguments: (name, smallest, largest).
INT32 = ("int32", -2**31, 2**31 - 1)
INT64 = ("int64", -2**63, 2**63 - 1)
UINT64 = ("uint64", 0, 2**64 - 1)


def as_int(x, name, ctype=INT64):
    """An integer argument: Python and NumPy integers (anything with __index__); a float such as
    3.9 or a string such as '3' is a TypeError rather than silently truncated or parsed, and a
    value outside the C type it goes into is an InvalidArgumentError naming the argument."""
    if isinstance(x, bool):
        raise TypeError(f"{name} must be an integer, got bool {x!r}")
    try:
        value = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(x).__name__} {x!r}") from None
    type_name, lo, hi = ctype
    if not lo <= value <= hi:
        raise invalid_argument(f"{name} = {value} is out of range: the C API takes it as {type_name} "
                               f"({lo}..{hi})")
    return value


def _enum_value(x):
    """An enum's integer value given as a plain integer (not a bool, float or string), else None."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def as_model(model):
    """A Model from a Model, its value, or a name ("gat", "gatv2", "transformer", "agnn")."""
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        key = model.lower()
        if key in _MODEL_NAMES:
            return _MODEL_NAMES[key]
        raise invalid_argument(f"unknown model {model!r}; expected one of {', '.join(MODEL_INPUTS)}")
    try:
        return Model(_enum_value(model))
    except (TypeError, ValueError):
        raise invalid_argument(f"unknown model {model!r}; expected one of {', '.join(MODEL_INPUTS)}") from None


def model_name(model):
    return _dfgnn.model_name(as_model(model))


def as_dtype(dtype):
    """A DType from a DType, a name ("float32", "bf16", ...), a NumPy dtype or a torch dtype."""
    if isinstance(dtype, DType):
        return dtype
    name = str(getattr(dtype, "name", None) or dtype).lower()
    name = name.replace("torch.", "").replace("numpy.", "")
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        try:
            return DType(dtype)
        except ValueError:
            pass
    raise invalid_argument(f"unsupported dtype {dtype!r}; dfgnn ops take float32, float16, bfloat16 "
                           "(GPU) or float64 (reference)", kind="dtype")


def as_direction(direction):
    if isinstance(direction, Direction):
        return direction
    if isinstance(direction, str) and direction.lower() in _DIRECTIONS:
        return _DIRECTIONS[direction.lower()]
    try:
        return Direction(_enum_value(direction))
    except (TypeError, ValueError):
        raise invalid_argument(f"direction must be 'forward' or 'backward', got {direction!r}") from None


#: Seeds the C API takes (dfgnn_op_t.dropout_seed is a uint64_t).
_SEED_LIMIT = 1 << 64


def check_dropout(dropout):
    """``dropout`` as a float in [0, 1), or InvalidArgumentError."""
    if isinstance(dropout, bool):
        raise invalid_argument(f"dropout must be a probability in [0, 1), got {dropout!r}", kind="type")
    try:
        p = float(dropout)
    except (TypeError, ValueError):
        raise invalid_argument(f"dropout must be a probability in [0, 1), got {dropout!r}", kind="type") from None
    if not 0.0 <= p < 1.0:  # also rejects NaN
        raise invalid_argument(f"dropout must be a probability in [0, 1), got {p!r} (1 would drop every edge)")
    return p


def check_dropout_seed(seed, limit=_SEED_LIMIT, limit_text="2**64"):
    """``seed`` as an int in [0, limit), or InvalidArgumentError."""
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise invalid_argument(f"dropout_seed must be an int in [0, {limit_text}), got {type(seed).__name__}",
                               kind="type")
    seed = int(seed.__index__())
    if not 0 <= seed < limit:
        raise invalid_argument(f"dropout_seed must be an int in [0, {limit_text}), got {seed}")
    return seed


def make_op(model, dtype="float32", heads=1, dim=1, *, negative_slope=None, scale=None, deterministic=None,
            dropout=0.0, dropout_seed=0, edge_features=False):
    """A :class:`dfgnn.Op` with PyG's defaults (slope 0.2, scale 1/sqrt(D), no dropout), overridden
    where given. ``scale=None`` keeps 1/sqrt(D). Every kernel is deterministic (bitwise reproducible).

    ``deterministic``: deprecated and ignored (a DeprecationWarning when given); it goes in the next
    release. The op no longer has the field (C ABI version 1).

    ``dropout``: attention dropout probability in [0, 1): each (edge, head) weight is dropped with
    that probability and the kept ones are scaled by 1 / (1 - dropout); the softmax normaliser (and
    lse) are unchanged. The mask is a hash of (``dropout_seed``, edge CSR position, head), an int in
    [0, 2**64): the backward must get the forward's dropout and seed.

    ``edge_features``: the op takes the ``edge`` input (see ``EDGE_MODELS``); not for AGNN."""
    heads, dim = as_int(heads, "heads", INT32), as_int(dim, "dim", INT32)
    if heads < 1 or dim < 1:
        raise invalid_argument(f"heads and dim must be >= 1, got heads={heads}, dim={dim}")
    dropout = check_dropout(dropout)
    dropout_seed = check_dropout_seed(dropout_seed)
    op = Op(as_model(model), as_dtype(dtype), heads, dim)
    if negative_slope is not None:
        op.negative_slope = float(negative_slope)
    if scale is not None:
        op.scale = float(scale)
    if deterministic is not None:
        warnings.warn("make_op(deterministic=...) is deprecated and ignored: every dfgnn kernel is deterministic",
                      DeprecationWarning, stacklevel=2)
    if dropout > 0:  # without dropout the seed is not used: ops stay equal whatever seed was given
        op.dropout = dropout
        if not op.dropout < 1.0:
            raise invalid_argument(f"dropout must be a probability in [0, 1), got {dropout!r}, which is 1 as the "
                                   "float the op holds")
        op.dropout_seed = dropout_seed
    if edge_features:
        if model_name(op.model) not in EDGE_MODELS:
            raise invalid_argument(f"{model_name(op.model)} takes no edge features")
        op.edge_features = 1
    return op


def _shape(x):
    shape = getattr(x, "shape", None)
    if shape is None:
        return tuple(_dfgnn.array_info(x)["shape"])
    return tuple(int(s) for s in shape)


def single_attention(inputs):
    """Whether a model's inputs hold one attention vector (GATv2's att_src), which it may call att, as PyG does."""
    return "att_src" in inputs and "att_dst" not in inputs


def check_input_names(model, inputs, what="inputs"):
    """Checks the keys of an inputs dict against the model; returns the model name."""
    name = model_name(model)
    if not isinstance(inputs, dict):
        raise invalid_argument(f"{what} must be a dict {{name: array}}, got {type(inputs).__name__}", kind="type")
    wanted = MODEL_INPUTS[name]
    optional = ("edge",) if name in EDGE_MODELS else ()
    keys = ["att_src" if (k == "att" and single_attention(wanted)) else k for k in inputs]
    for k in keys:
        if k not in wanted and k not in optional:
            takes = ", ".join(wanted + tuple(f"{o} (optional)" for o in optional))
            raise invalid_argument(f"{what} has {k!r}, but {name} takes {takes}")
    for k in wanted:
        if k not in keys:
            raise invalid_argument(f"{what} lacks {k!r}: {name} takes {', '.join(wanted)}")
    return name


def infer_heads_dim(model, inputs, heads=None, dim=None):
    """H and D from the first feature input ([N, H, D]); [N, H*D] features need ``heads``."""
    name = check_input_names(model, inputs)
    first = next(k for k in MODEL_INPUTS[name] if k in inputs)
    shape = _shape(inputs[first])
    if len(shape) == 3:
        return (int(heads) if heads is not None else shape[1]), (int(dim) if dim is not None else shape[2])
    if len(shape) == 2:
        if heads is None and dim is None:
            raise invalid_argument(f"inputs[{first!r}] has shape {list(shape)}: pass heads (and dim) for [N, H*D] "
                                   "features, or give them as [N, H, D]", kind="shape")
        if (heads is None) != (dim is None):  # the one given must divide the H*D channels
            name, given = ("heads", heads) if dim is None else ("dim", dim)
            given = as_int(given, name, INT32)
            if given < 1 or shape[1] % given:
                raise invalid_argument(f"inputs[{first!r}] has shape {list(shape)}: {name}={given} does not "
                                       f"divide its {shape[1]} channels into H x D", kind="shape")
        if heads is None:
            heads = shape[1] // int(dim)
        if dim is None:
            dim = shape[1] // int(heads)
        return int(heads), int(dim)
    raise invalid_argument(f"inputs[{first!r}] must have shape [N, H, D] or [N, H*D], got {list(shape)}",
                           kind="shape")
