"""Python ints carried by a loop with a data-dependent exit (``tracejit.tracer.while_loops``):
counters, and the index read after the loop.

Iterative model code counts its trips in a Python int and reads it, or the ``for`` index,
after the loop::

    it = 0
    while err > tol and it < max_iter:
        ...
        it += 1
    return x, it

    for i in range(max_iter):
        ...
        if np.abs(step).max() < tol:
            break
    return x, i

Where the loop stops depends on the data, so after it these are run-time values: a
compiled loop carries each as a weak int64 scalar (``conversions.python_number``'s
run-time Python int: the result returns it as an ``int`` and arithmetic promotes it as
Python's), chosen by the exit like any carried array. The front end
(``while_loops.rewrite_while``) names them:

* a counter: a carried name every store of which in the body is ``name += c`` or ``name
  -= c`` with ``c`` an int literal of at most ``MAX_STEP`` in size, so that it cannot leave
  int64 in the at most ``WHILE_BOUND`` trips a loop runs (it enters below ``MAX_START``);
* the index of a ``for`` read after the loop (``index_copy``): the rewrite assigns it
  from the trip number at the top of every trip, so the copy carried out of the loop is
  the last trip's index, as Python leaves it, and the value it had before the loop when
  no trip ran.

Any other Python int a loop carries leaves it running as written (a guard per trip).

>>> import ast
>>> loop = ast.parse("while x > 0:\\n    it += 1\\n    x = x - 1\\n    k = k * 2").body[0]
>>> counters(loop.body, ["it", "k", "x"])
['it']
"""

from __future__ import annotations

import ast

import numpy as np

from . import ops
from .dims import SymInt
from .primitives import bind

MAX_STEP = 1 << 20
MAX_START = 1 << 40


def counters(body, names):
    """The carried ``names`` that ``body`` (the loop's statements) moves only by ``+= c`` or
    ``-= c`` of an int literal."""
    steps, other, stepped = set(), set(), set()
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                stepped.add(id(node.target))
                if isinstance(node.op, (ast.Add, ast.Sub)) and _small_int(node.value):
                    steps.add(node.target.id)
                else:
                    other.add(node.target.id)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and (
                    id(node) not in stepped):
                other.add(node.id)
    return [name for name in names if name in steps and name not in other]


def _small_int(node):
    return (isinstance(node, ast.Constant) and type(node.value) is int
            and abs(node.value) <= MAX_STEP)


def index_copy(index, trip):
    """``index = trip``: the statement that starts each trip of a ``for`` whose index is
    read after the loop (the trip number is the body functions' own parameter)."""
    return ast.Assign(targets=[ast.Name(id=index, ctx=ast.Store())],
                      value=ast.Name(id=trip, ctx=ast.Load()))


def enters(value):
    """Whether a carried int may enter the compiled loop (``as_traced`` makes it a weak
    int64): a Python int, not a bool, small enough for its steps."""
    return type(value) is int and abs(value) < MAX_START


def as_traced(context, value):
    """A Python int or a loop index (a ``SymInt``) as a traced weak int64 scalar of
    ``context``, which a loop may carry; anything else as it is."""
    if type(value) is int:
        atom, _, _ = context.atom(np.asarray(value, np.int64))
        value = context.tracer_for(atom)
    elif not isinstance(value, SymInt):
        return value
    return bind(ops.cast_p, value, dtype=np.dtype(np.int64), weak=True)
