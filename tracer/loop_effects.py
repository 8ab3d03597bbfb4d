"""Calls for their side effect under an ``if`` in a loop body: captured when not taken.

Training loops report through a callback or a flag that is off on most calls::

    for i in range(epochs):
        ...
        if i % 50 == 0:
            if verbose:
                print(...)
            if callback is not None:
                callback(i, params_values)

A call as a statement (``callback(...)``, ``history.clear()``) may change state outside
the loop; a captured body is traced once for every trip, so such a call kept the whole
loop from being captured, and a long loop unrolled past what one program may hold (the
call ran eagerly). The front end (``mark_conditional_effects``, before it decides whether
the loop is captured) puts a ``__tracejit__.loop_effect(line)`` hook call before each
such statement that sits under an ``if`` in the body, and marks both (``tracejit_effect``)
so ``loop_frontend.unsupported_statements`` lets them pass. At trace time the hook raises
``Refused`` when a captured loop's trial reaches it (before the call runs: the loop
unrolls from that trip, as it did), and does nothing elsewhere (an unrolled trip,
iteration 0, eager code). So the loop is captured exactly when no trial takes the
branch: a false flag (``callback is None``, read from the function's arguments and
guarded at entry) decides nothing on the index.

The ``if <index test>:`` around such flags is split too
(``loop_selected_appends.rewrite_selected_appends``): ``if i % 50 == 0:`` holding only
``if <flag>:`` statements becomes ``if <flag> and i % 50 == 0:`` for each, so a false
flag never asks about the index.

>>> import ast
>>> loop = ast.parse('''
... for i in range(n):
...     w = w - g
...     if callback is not None:
...         callback(i, w)
... ''').body[0]
>>> mark_conditional_effects(loop)
>>> print(ast.unparse(loop))
for i in range(n):
    w = w - g
    if callback is not None:
        __tracejit__.loop_effect(5)
        callback(i, w)
"""

from __future__ import annotations

import ast

from .hook_calls import hook_call, is_hook_call
from .loop_generalize import Refused


def mark_conditional_effects(node):
    """Put a ``loop_effect`` hook call before each call statement under an ``if`` of the
    loop ``node``'s body (not in nested function definitions), marking both."""
    for statement in node.body:
        _mark(statement, under_if=False)


def _mark(statement, under_if):
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                              ast.Lambda)):
        return
    for field in ("body", "orelse"):
        block = getattr(statement, field, None)
        if not isinstance(block, list):
            continue
        inner_if = under_if or isinstance(statement, ast.If)
        marked = []
        for inner in block:
            if inner_if and is_effect_call(inner):
                marked.append(_hook_call(inner))
                inner.tracejit_effect = True
            else:
                _mark(inner, inner_if)
            marked.append(inner)
        setattr(statement, field, marked)


def is_effect_call(statement):
    """A call as a statement that is neither ``name.append(value)`` nor ``print(...)``
    (those have their own handling: ``loop_frontend``)."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    if getattr(statement, "tracejit_effect", False) or is_append_or_print(statement):
        return False
    return not is_hook_call(statement.value)


def is_append_or_print(statement):
    """``name.append(value)`` or ``print(...)`` as a statement."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    function = statement.value.func
    return (isinstance(function, ast.Name) and function.id == "print") or (
        isinstance(function, ast.Attribute) and function.attr == "append"
        and isinstance(function.value, ast.Name) and len(statement.value.args) == 1)


def _hook_call(statement):
    hook = ast.Expr(hook_call("loop_effect", ast.Constant(statement.lineno)))
    hook.tracejit_effect = True
    return ast.fix_missing_locations(ast.copy_location(hook, statement))


def refuse_in_trial(context, line):
    """The hook at trace time: a captured loop's trial reached the call (``Refused``:
    the loop unrolls, and that trip calls it as written); elsewhere nothing."""
    if getattr(context, "loop_indices", None):
        raise Refused(f"a call for its side effect at line {line} runs in the body")
