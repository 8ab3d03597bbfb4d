"""A loop's exit test joined by ``and``/``or``, negated by ``not`` or chained
(``lo < err < hi``), decided as one traced bool (``tracejit.tracer.while_loops``).

Iterative solvers stop on more than one condition::

    while err > tol and it < max_iter:
        ...
    for it in range(max_iter):
        ...
        if not np.isfinite(loss) or abs(loss - prev) < tol:
            break

Python's ``and``, ``or`` and ``not`` ask each operand for a bool: traced, that is a guard
per trip, so the loop would unroll (one compile per trip count). ``combined`` rewrites the
test's boolean structure (only there: an ``and`` inside a call's argument is the call's)
into calls of a ``Logic`` object handed to the test, each operand a thunk::

    err > tol and it < max_iter  ->  logic.all_of(lambda: err > tol, lambda: it < max_iter)

``Logic`` keeps Python's meaning where an operand is a Python value (a short circuit on
it, and what ``and`` returns), and joins traced operands with ``np.logical_and`` /
``logical_or`` / ``logical_not``, which give the truth value Python's operators give
(``bool`` of a 0-d array is its ``!= 0``; NaN is true). Traced, the right operand of an
``and`` is evaluated even where the left one is false; if that raises, the decision is
taken as Python takes it (a guard on the left operand), so the capture is refused and the
loop runs as written where it would differ.

>>> import ast
>>> print(ast.unparse(combined(ast.parse("a > 1 and not b < c < d", mode="eval").body)))
__tracejit_logic.all_of(lambda: a > 1, lambda: __tracejit_logic.negate(__tracejit_logic.\
chain((lambda: b, lambda: c, lambda: d), ('<', '<'))))
>>> combined(ast.parse("x.max() > tol", mode="eval").body) is None
True
>>> logic = Logic()
>>> logic.all_of(lambda: 0, lambda: 1 / 0), logic.any_of(lambda: [], lambda: 'yes')
(0, 'yes')
"""

from __future__ import annotations

import ast
import operator

import numpy as np

from .hook_calls import HOOK, is_hook_call

LOGIC = "__tracejit_logic"  # the name of the Logic parameter of the combined test

_COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                ast.NotEq: "!="}
_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
              "==": operator.eq, "!=": operator.ne}


def combined(test):
    """``test`` with its ``and``/``or``/``not``/chained comparisons as ``Logic`` calls, or
    None when it has none (the test is then taken as written)."""
    rewritten = _combined(test)
    return None if rewritten is test else rewritten


def _combined(node):
    if isinstance(node, ast.BoolOp):
        method = "all_of" if isinstance(node.op, ast.And) else "any_of"
        new = _call(method, [_thunk(_combined(value)) for value in node.values])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        new = _call("negate", [_combined(node.operand)])
    elif (isinstance(node, ast.Compare) and len(node.ops) > 1
            and all(type(op) in _COMPARISONS for op in node.ops)):
        operands = ast.Tuple(elts=[_thunk(item) for item in (node.left, *node.comparators)],
                             ctx=ast.Load())
        ops = ast.Tuple(elts=[ast.Constant(_COMPARISONS[type(op)]) for op in node.ops],
                        ctx=ast.Load())
        new = _call("chain", [operands, ops])
    elif _calls_allclose(node):
        # np.allclose answers a Python bool: a guard per trip (Gauss-Seidel's `if
        # np.allclose(x, x_new): break`); the test only needs its truth, a traced bool
        new = _call("call", [ast.Name(id=HOOK, ctx=ast.Load()), *node.args], node.keywords)
    else:
        return node
    for inner in ast.walk(new):  # guards recorded in it name the user's line
        if "lineno" in inner._attributes and not hasattr(inner, "lineno"):
            ast.copy_location(inner, node)
    return new


def _thunk(node):
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                         kw_defaults=[], kwarg=None, defaults=[]),
                      body=node)


def _call(method, args, keywords=()):
    return ast.Call(func=ast.Attribute(value=ast.Name(id=LOGIC, ctx=ast.Load()), attr=method,
                                       ctx=ast.Load()),
                    args=args, keywords=list(keywords))


def _calls_allclose(node):
    """``__tracejit__.call(<...allclose>, ...)``: a call the rewrite routed through the
    hooks whose function is spelled ``allclose`` (``Logic.call`` checks it is NumPy's)."""
    return (is_hook_call(node, "call") and node.args and any(
                isinstance(inner, ast.Attribute) and inner.attr == "allclose"
                or isinstance(inner, ast.Name) and inner.id == "allclose"
                for inner in ast.walk(node.args[0])))


def _traced(value):
    from .traced_array import Tracer  # cycle: traced_array -> ... -> source_rewrite -> here
    return isinstance(value, Tracer)


class Logic:
    """Python's ``and``/``or``/``not`` and chained comparisons, with traced operands joined
    into one traced bool instead of decided one by one."""

    def all_of(self, *thunks):
        return self._join(thunks, np.logical_and, stop_at=False)

    def any_of(self, *thunks):
        return self._join(thunks, np.logical_or, stop_at=True)

    def call(self, hooks, function, *args, **kwargs):
        """A call in the test, made through the rewritten code's ``hooks`` as written; but
        ``np.allclose`` of traced values is the traced ``np.all(np.isclose(...))`` it is
        made of (NumPy's gives the same truth as a Python bool, a guard per trip)."""
        if function is np.allclose and any(_traced(value) for value in (*args,
                                                                        *kwargs.values())):
            return np.all(np.isclose(*args, **kwargs))
        return hooks.call(function, *args, **kwargs)

    def negate(self, value):
        return np.logical_not(value) if _traced(value) else not value

    def chain(self, operands, ops):
        """``a < b < c``: ``a < b and b < c`` with ``b`` evaluated once."""
        values = [operands[0]()]

        def compared(index):
            def thunk():
                values.append(operands[index + 1]())
                return _OPERATORS[ops[index]](values[index], values[index + 1])
            return thunk

        return self.all_of(*(compared(index) for index in range(len(ops))))

    def _join(self, thunks, join, stop_at):
        value = thunks[0]()
        for thunk in thunks[1:]:
            if not _traced(value):
                if bool(value) is stop_at:
                    return value  # Python's short circuit, on a Python value
                value = thunk()
                continue
            try:
                other = thunk()
            except Exception:
                # Python would not evaluate ``other`` where ``value`` decides: decide as
                # Python does (a guard), and raise where Python raises
                if bool(value) is stop_at:
                    return value
                raise
            value = join(value, other)
        return value
