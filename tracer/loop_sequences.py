"""Loops over an array's rows become loops over ``range``, so they are captured too.

Model code iterates arrays directly as often as it writes ``range``::

    for xt in x:                      # the rows of a (T, D) sequence
    for t, xt in enumerate(x):        # with the step number
    for xt, yt in zip(xs, ys):        # two sequences in step

Which of these is a traced array is known only at run time (``for layer in layers``
walks a Python list), so before the rest of the front end runs, ``expand_sequence_loops``
rewrites each such loop into both forms, chosen when it runs::

    __tracejit_seq_7_4 = (x,)
    if __tracejit__.indexable('items', __tracejit_seq_7_4):
        for __tracejit_i_7_4 in range(__tracejit__.sequence_length('items', __tracejit_seq_7_4)):
            xt = __tracejit__.sequence_item('items', __tracejit_seq_7_4, __tracejit_i_7_4)
            ...body...
    else:
        for xt in __tracejit_seq_7_4[0]:
            ...body...

The first is an ordinary loop over ``range`` (captured as one loop node when its bounds
are dynamic, ``tracejit.tracer.loops``); the second is the loop as written. Python reads
``x[i]`` where iteration yields the rows, which is the same value. Loops whose target is
read after the loop (Python leaves it at the last item), whose body the capture refuses
anyway (``break``, ``return``, calls for side effects) or whose iterable is anything else
(``dict.items()``, ``reversed(x)``) stay as written.

>>> import ast
>>> tree = ast.parse("def f(x):\\n    for xt in x:\\n        h = xt * 2\\n    return 0")
>>> print(ast.unparse(expand_sequence_loops(tree.body[0])).splitlines()[2])
    if __tracejit__.indexable('items', __tracejit_seq_2_4):
"""

from __future__ import annotations

import ast
import copy

from .hook_calls import hook_call
from .loop_frontend import unsupported_statements
from .loop_while import expand_counted_while
from .ops import shape_of


# --- the rewrite (before the front end's own) --------------------------------------------
def expand_sequence_loops(function_node):
    """``function_node`` with its loops over arrays' rows and its counted ``while`` loops
    (``tracejit.tracer.loop_while``) expanded; nested definitions are left as written, as
    the front end leaves them."""
    expander = _Expander(function_node)
    expand_statements(function_node, lambda statement: (
        expander.expand(statement) if isinstance(statement, ast.For)
        else expand_counted_while(statement, function_node)
        if isinstance(statement, ast.While) else None))
    return function_node


def expand_statements(node, expand):
    """Each statement in ``node``'s bodies, innermost first, replaced by the statements
    ``expand(statement)`` gives (None: kept); nested definitions are left as written, as
    the front end leaves them. The rewrites that run before the front end's share it."""
    for field in ("body", "orelse", "finalbody"):
        statements = getattr(node, field, None)
        if not isinstance(statements, list):
            continue
        expanded = []
        for statement in statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                expanded.append(statement)
                continue
            expand_statements(statement, expand)
            for handler in getattr(statement, "handlers", ()):
                expand_statements(handler, expand)
            expanded.extend(expand(statement) or [statement])
        setattr(node, field, expanded)


class _Expander:
    def __init__(self, function_node):
        self.function_node = function_node

    def expand(self, loop):
        """``[assignment, if]`` for a loop over an array's rows, else None."""
        form = _form(loop)
        if form is None or unsupported_statements(
                loop, attributes=True) is not None or self._read_after(loop):
            return None
        kind, call, sources = form
        tag = f"{loop.lineno}_{loop.col_offset}"
        sequences, index = f"__tracejit_seq_{tag}", f"__tracejit_i_{tag}"

        def load(name):
            return ast.Name(id=name, ctx=ast.Load())

        def hook(method, *args):
            return hook_call(method, ast.Constant(kind), *args)

        bind = ast.Assign(targets=[ast.Name(id=sequences, ctx=ast.Store())],
                          value=ast.Tuple(elts=list(sources), ctx=ast.Load()))
        element = ast.Assign(targets=[copy.deepcopy(loop.target)],
                             value=hook("sequence_item", load(sequences), load(index)))
        by_index = ast.For(
            target=ast.Name(id=index, ctx=ast.Store()),
            iter=ast.Call(func=load("range"), args=[hook("sequence_length", load(sequences))],
                          keywords=[]),
            body=[element, *loop.body], orelse=[])
        parts = [ast.Subscript(value=load(sequences), slice=ast.Constant(position),
                               ctx=ast.Load()) for position in range(len(sources))]
        as_written = ast.For(
            target=copy.deepcopy(loop.target),
            iter=parts[0] if call is None else ast.Call(func=copy.deepcopy(call.func),
                                                        args=parts, keywords=[]),
            body=copy.deepcopy(loop.body), orelse=[])
        by_index.tracejit_twin = as_written  # tracejit.tracer.loops.loop_variables
        if kind == "enumerate":
            by_index.tracejit_index_names = (loop.target.elts[0].id,)
        choice = ast.If(test=hook("indexable", load(sequences)), body=[by_index],
                        orelse=[as_written])
        return [ast.fix_missing_locations(ast.copy_location(new, loop))
                for new in (bind, choice)]

    def _read_after(self, loop):
        """Whether a name the loop's target binds is read outside the loop."""
        bound = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        inside = {id(n) for n in ast.walk(loop)}
        return any(isinstance(n, ast.Name) and n.id in bound and id(n) not in inside
                   for n in ast.walk(self.function_node))


def _form(loop):
    """``(kind, call, sources)`` of a loop over ``x``, ``enumerate(x)`` or
    ``zip(x, y, ...)``; None for other loops."""
    if loop.orelse:
        return None
    iterable = loop.iter
    if isinstance(iterable, (ast.Name, ast.Attribute, ast.Subscript)) or _arange(iterable):
        return "items", None, [iterable]
    if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
            and iterable.args and not iterable.keywords
            and not any(isinstance(arg, ast.Starred) for arg in iterable.args)):
        return None
    name = iterable.func.id
    if name == "enumerate" and len(iterable.args) == 1 and isinstance(
            loop.target, ast.Tuple) and len(loop.target.elts) == 2 and isinstance(
            loop.target.elts[0], ast.Name):
        return "enumerate", iterable, iterable.args
    if name == "zip":
        return "zip", iterable, iterable.args
    return None


def _arange(iterable):
    """Whether ``iterable`` is ``np.arange(...)`` (any module name before ``.arange``): RNN
    code steps through time as ``for t in np.arange(T)``, and ``np.arange`` of a dynamic
    length is a traced array whose rows are the steps (``np.int64`` numbers, as NumPy
    iterates them); a length known in the trace gives a NumPy array, iterated as written."""
    return (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)
            and iterable.func.attr == "arange" and isinstance(iterable.func.value, ast.Name))


# --- run time ------------------------------------------------------------------------------
def indexable(kind, sequences):
    """Whether the loop runs by index: every sequence is a traced array with an axis to
    walk (anything else iterates as written)."""
    return all(getattr(type(sequence), "__tracejit_priority__", 0) >= 2
               and hasattr(sequence, "shape") and len(shape_of(sequence)) >= 1
               for sequence in sequences)


def sequence_length(kind, sequences):
    """The trip count: the first axis (a symbolic dim when dynamic), the shortest for
    ``zip``."""
    return min(shape_of(sequence)[0] for sequence in sequences)


def sequence_item(kind, sequences, index):
    """What iteration binds at trip ``index``."""
    if kind == "items":
        return sequences[0][index]
    if kind == "enumerate":
        return index, sequences[0][index]
    return tuple(sequence[index] for sequence in sequences)
