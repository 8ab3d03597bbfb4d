"""An entry of a list or dict a captured loop fills (``tracejit.tracer.loop_containers``):
its array leaves and its structure, and the buffer rows they are written to and read from.

An entry is one array or a tuple of them, nested (``caches.append((x, h))``); each leaf
gets a buffer of its own, and ``rebuild_entry`` puts a row of each back in the entry's
structure::

    leaves, structure = entry_leaves(entry)
    rebuild_entry(leaves, structure)   # the entry again
"""

from __future__ import annotations

import numpy as np

from .dims import SymInt, expr_of
from .traced_array import Tracer


def plain_dim(value):
    """An int for a dim whose expression is a constant (``(s0 - 1) - s0 + 1``)."""
    if isinstance(value, SymInt) and isinstance(expr_of(value), int):
        return expr_of(value)
    return value


def is_index(key):
    return isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))


def same_dim(a, b):
    """``a`` and ``b`` (ints or dims) are the same expression (no guard recorded)."""
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return False
    if not (is_index(a) or isinstance(a, SymInt)) or not (is_index(b) or isinstance(b, SymInt)):
        return False
    difference = plain_dim(a - b)
    return isinstance(difference, (int, np.integer)) and difference == 0


def as_tracer(context, value):
    if isinstance(value, Tracer):
        return value
    atom, concrete, aval = context.atom(np.asarray(value) if not isinstance(
        value, (int, float, bool)) else value)
    return Tracer(context, atom, concrete, aval.shape) if hasattr(atom, "name") else value


def entry_leaves(value):
    """An entry's arrays and its structure: one array, or tuples of arrays, nested
    (``caches.append((x, h))``, ``(linear_cache, activation_cache)``). Anything else in a
    tuple that is no array or number (deeplearning.ai's ``cache = (a_next, a_prev, xt,
    parameters)``) is kept in the structure as it is: every trip must append that very
    object (``_same_structure``), and each entry read back holds it."""
    if type(value) is tuple:
        parts = [entry_leaves(item) for item in value]
        return [leaf for leaves, _ in parts for leaf in leaves], tuple(
            structure for _, structure in parts)
    if isinstance(value, (Tracer, np.ndarray, np.generic, int, float, complex)):
        return [value], None
    return [], Kept(value)


class Kept:
    """An object an entry holds that is no array (a dict of parameters): kept, not stacked."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):  # the same object, whatever its == says
        return isinstance(other, Kept) and other.value is self.value

    __hash__ = None


def rebuild_entry(leaves, structure):
    """The entry of ``structure`` (``entry_leaves``) holding ``leaves``."""
    rebuilt, rest = _rebuilt(list(leaves), structure)
    return rebuilt


def _rebuilt(leaves, structure):
    if structure is None:
        return leaves[0], leaves[1:]
    if isinstance(structure, Kept):
        return structure.value, leaves
    items = []
    for part in structure:
        item, leaves = _rebuilt(leaves, part)
        items.append(item)
    return tuple(items), leaves


def read_row(buffer, row):
    if isinstance(row, SymInt):  # tracer indexing takes dims in slices
        return buffer[row: row + 1][0]
    return buffer[row]


def write_row(buffer, row, value):
    if isinstance(row, SymInt):
        buffer[row: row + 1] = value[None]
    else:
        buffer[row] = value


def number_kind(leaf):
    """Whether an entry's leaf reads back as a Python number (``float(h.sum())``), not as an
    array or a NumPy scalar: as ``ContainerCarry.python_numbers`` has it for the entries."""
    if type(leaf) in (bool, int, float):  # (np.float64 is a float, and stays np.float64)
        return True
    aval = getattr(leaf, "aval", None)
    return aval is not None and bool(aval.weak)


def entry_signature(value):
    """Shape (as dim expressions) and dtype of an entry's array."""
    if hasattr(value, "ir_var"):
        return tuple(expr_of(dim) for dim in value.shape), np.dtype(value.dtype)
    array = np.asarray(value)
    return array.shape, array.dtype
