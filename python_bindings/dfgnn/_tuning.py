"""Tuning and dispatch: the tuning database layers, the tune-on-miss switch, tuning, explain."""

import json
import os

from . import _dfgnn
from ._errors import invalid_argument
from ._op import Op, as_direction
from .ops import _graph_handle

_MODES = {"off": 0, "on_miss": 1}


def _context(context):
    return _dfgnn.default_context() if context is None else context


def _checked_op(op):
    if not isinstance(op, Op):
        raise invalid_argument(f"op must be a dfgnn.Op (see dfgnn.op), got {type(op).__name__}", kind="type")
    return op


def set_tune_mode(mode, context=None):
    """Dispatch's tune switch: ``"off"`` (never tune implicitly; the default, env DFGNN_TUNE=off)
    or ``"on_miss"`` (tune a pass when the database has no answer; needs a GPU)."""
    if isinstance(mode, bool):
        mode = "on_miss" if mode else "off"
    if mode not in _MODES:
        raise invalid_argument(f"tune mode must be 'off' or 'on_miss', got {mode!r}")
    _context(context).set_tune_mode(_MODES[mode])


def set_database(user=None, sites=None, context=None):
    """The tuning database layers of a context. ``user``: the writable database file (None: the
    default, $DFGNN_CACHE_DIR/tuning.db, else $XDG_CACHE_HOME/dfgnn/tuning.db, else
    ~/.cache/dfgnn/tuning.db; "": none). ``sites``: read-only databases, highest priority first,
    a list or a ':'-separated string (None: $DFGNN_SITE_DB; "" or []: none). Below them the
    shipped databases (the package's ``data/tuning/*.db``, or $DFGNN_SHIPPED_DB; "off": none). An
    unusable file, or a site or shipped database of another GPU or build, is logged and skipped."""
    if user is not None:
        user = os.fsdecode(user)
    if sites is not None and not isinstance(sites, str):
        sites = [os.fsdecode(s) for s in sites]
        for s in sites:  # the C API splits the joined list at every ':'
            if ":" in s:
                raise invalid_argument(f"sites entry {s!r} contains ':', which separates database paths; "
                                       "rename the file or link it from a path without ':'")
        sites = ":".join(sites)
    _context(context).set_database(user, sites)


def tune(graph, op, direction="forward", budget_seconds=20.0, *, context=None):
    """Tunes an op direction on a graph within ``budget_seconds`` (forward: one pass; backward:
    the row pass, then the column pass), stores the winners in the user database and makes the
    context dispatch them. Needs a GPU. Returns the report: a list with one dict per pass
    (winner, default, speedup, runner-up, counts, reason)."""
    text = _dfgnn.tune(_context(context), _graph_handle(graph), _checked_op(op), as_direction(direction),
                       float(budget_seconds))
    return json.loads(text) if text else []


def explain(graph, op, direction="forward", *, context=None):
    """How dispatch answers for an op direction: a list with one dict per pass.

    ``level`` is the level that answered this call ("cache" once the context answered before,
    else "exact", "nearest", "tuned" or "default"); ``origin`` the level that answered first, kept
    with the cached answer, and ``cached`` whether this call came from memory. ``layer`` names the
    database of an exact, nearest or tuned answer ("user", "site" or "shipped": the database
    installed with the package) and ``source`` its file; a nearest answer has ``distance``,
    ``radius``, ``neighbours`` (the tuned graphs that voted; 1 when the nearest one's winner was
    clear and no vote was needed) and ``neighbour`` (the nearest tuned graph's fingerprint hash,
    bucket key, nodes and edges), a default one its ``rule``. ``origin_detail`` says it in one
    line. ``module`` says where the pass's compiled kernels came from in this process
    ("compiled", "<layer> database <file>", or "not loaded yet"). Also: the schedule and the
    database row's statistics."""
    return json.loads(_dfgnn.explain(_context(context), _graph_handle(graph), _checked_op(op), as_direction(direction)))
