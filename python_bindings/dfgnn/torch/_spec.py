"""One spec per model, from which dfgnn.torch makes both of its paths: the autograd Functions
(_autograd) and the torch custom ops (_custom_ops). A spec names the model's tensor inputs (the
library's model table, MODEL_INPUTS), the op options it reads and whether it takes edge features;
the arguments of a call are bound to these names (Signature), never unpacked by position."""

from dataclasses import dataclass
from typing import Any, Callable, Tuple

from .._op import EDGE_MODELS, MODEL_INPUTS, single_attention


def _optional_float(x):
    return None if x is None else float(x)


@dataclass(frozen=True)
class Option:
    """An op option: its name (the keyword of the functions, Functions and custom ops, and the
    make_op field), its default, its custom-op schema type and the conversion to that type."""
    name: str
    default: Any
    schema: str
    convert: Callable[[Any], Any]


NEGATIVE_SLOPE = Option("negative_slope", 0.2, "float", float)
SCALE = Option("scale", None, "float?", _optional_float)  # None: 1/sqrt(D)
#: Every option, in the order of the custom ops' arguments (each custom op takes all of them; a model
#: reads its own).
OPTIONS = (NEGATIVE_SLOPE, SCALE)


class Argument:
    """One argument of a Signature: its name, its default (for a trailing optional one) and, for a
    custom op, its schema type."""
    REQUIRED = object()

    def __init__(self, name, default=REQUIRED, schema=None):
        self.name, self.default, self.schema = name, default, schema

    @property
    def required(self):
        return self.default is Argument.REQUIRED

    def schema_text(self):
        return f"{self.schema} {self.name}" + ("" if self.required else f"={_schema_default(self.default)}")


def _schema_default(value):
    return "None" if value is None else repr(value)


class Signature:
    """Names the positional (and keyword) arguments of a call: bind() gives a dict name -> value,
    with the defaults of the trailing arguments not given (the dispatcher drops trailing arguments
    that equal their schema defaults)."""

    def __init__(self, what, arguments):
        self.what, self.arguments = what, tuple(arguments)
        self.names = tuple(a.name for a in self.arguments)
        self.defaults = {a.name: a.default for a in self.arguments if not a.required}

    def bind(self, args, kwargs=None):
        if len(args) > len(self.names):
            raise TypeError(f"{self.what} takes {len(self.names)} arguments, got {len(args)}")
        bound = dict(zip(self.names, args))
        rest = self.names[len(args):]
        if kwargs and not set(kwargs) <= set(rest):
            raise TypeError(f"{self.what} got unexpected or repeated keyword arguments "
                            f"{sorted(set(kwargs) - set(rest))}")
        for name in rest:
            if kwargs and name in kwargs:
                bound[name] = kwargs[name]
            elif name in self.defaults:
                bound[name] = self.defaults[name]
            else:
                raise TypeError(f"{self.what} is missing the argument {name!r}")
        return bound

    def position(self, name):
        return self.names.index(name)

    def schema_text(self):
        return ", ".join(a.schema_text() for a in self.arguments)


@dataclass(frozen=True)
class ModelSpec:
    """A model as dfgnn.torch runs it."""
    model: str                   # "gat", "gatv2", "transformer", "agnn"
    inputs: Tuple[str, ...]      # tensor inputs in MODEL_INPUTS order: the op's input slots, the custom ops' names
    arguments: Tuple[str, ...]   # the same tensors as the Function and the functions name them
    options: Tuple[Option, ...]  # the op options the model reads
    edge: bool                   # takes the optional edge features ``edge`` (EDGE_MODELS)

    def params(self, dropout, options):
        """The op fields this model reads but the seed, in a fixed order (part of the launch cache key):
        its options (from the dict options, by name) and dropout; the others stay at make_op's
        defaults, so op keys do not vary with options the model ignores."""
        params = {o.name: options[o.name] for o in self.options}
        params["dropout"] = dropout
        return params


# The op options each model reads.
_MODEL_OPTIONS = {"gat": (NEGATIVE_SLOPE,), "gatv2": (NEGATIVE_SLOPE,), "transformer": (SCALE,), "agnn": ()}


def _argument_names(names):
    """The tensor names of a model's Function and function: its input slots, but att for a single
    attention vector (GATv2's att_src)."""
    return tuple("att" if n == "att_src" and single_attention(names) else n for n in names)


SPECS = {model: ModelSpec(model, names, _argument_names(names), _MODEL_OPTIONS[model], model in EDGE_MODELS)
         for model, names in MODEL_INPUTS.items()}
