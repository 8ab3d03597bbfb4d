"""``if`` on a traced 0-d bool whose branches only store into arrays: a select, no guard.

From-scratch CNNs route a max pool's gradient with an ``if`` per element::

    if im_region[i2, j2, f2] == amax[f2]:
        d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]

As a guard, each call's data takes its own path through hundreds of such ``if``s: a new
path (a compile) per image, or a captured loop whose guard fails on every call. NumPy's
result is the same as storing ``np.where(cond, new, old)`` into each place either branch
stores into, which is what this rewrite makes of it (AutoGraph's ``if`` conversion, for
stores): before the front end's rewrite, such an ``if`` becomes ::

    __tracejit_cond1 = <cond>
    if __tracejit__.selects(__tracejit_cond1, d_input):  # traced 0-d bool; arrays
        d_input[...] = __tracejit__.select(__tracejit_cond1, d_out[...], d_input[...])
    elif __tracejit_cond1:
        <the branch as written>
    else:
        <the other branch as written>

Only branches of subscript stores (``x[...] = value``, one target, no calls, no
comprehensions) qualify: their stores have no other effect, and evaluating a store of the
branch NumPy skips changes nothing when the select keeps the old value. A store that
raises where the condition is false (an index past the end) raises out of the trace, and
the call runs eagerly as a call that raised while traced does (NumPy then skips it). No
``try`` guards it: a loop whose body holds one is not captured.
"""

from __future__ import annotations

import ast
import copy

from .hook_calls import hook_call
from .loop_sequences import expand_statements


def expand_if_selects(function_node):
    """``function_node`` with each qualifying ``if`` rewritten (nested definitions are left
    as written, as the front end leaves them)."""
    expander = _Expander()
    expand_statements(function_node, lambda statement: (
        expander.expand(statement) if _qualifies(statement) else None))
    return function_node


def _is_store(statement):
    """``x[...] = value``: one subscript target on a name or attribute chain, nothing in it
    that calls, yields, binds or builds a function."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Subscript)):
        return False
    root = statement.targets[0].value
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    forbidden = (ast.Call, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda,
                 ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Starred)
    return not any(isinstance(node, forbidden) for node in ast.walk(statement))


def _qualifies(statement):
    if not isinstance(statement, ast.If) or not statement.body:
        return False
    if statement.orelse and not all(_is_store(item) for item in statement.orelse):
        return False  # (an elif is an If: not a store)
    return all(_is_store(item) for item in statement.body)


class _Expander:
    def __init__(self):
        self.count = 0

    def expand(self, statement):
        self.count += 1
        cond = f"__tracejit_cond{self.count}"

        def name(context=ast.Load):
            return ast.Name(id=cond, ctx=context())

        def selected(store, taken):
            """``store`` made ``x[...] = select(cond, value, x[...])`` (``taken``: whether
            the store belongs to the branch run where the condition holds)."""
            store = copy.deepcopy(store)  # the branch as written keeps its own nodes
            target = store.targets[0]
            old = ast.Subscript(value=copy.deepcopy(target.value),
                                slice=copy.deepcopy(target.slice), ctx=ast.Load())
            values = (store.value, old) if taken else (old, store.value)
            return ast.Assign(targets=[target], value=hook_call("select", name(), *values))

        stores = [selected(item, True) for item in statement.body]
        stores += [selected(item, False) for item in statement.orelse]
        as_written = ast.If(test=name(), body=statement.body, orelse=statement.orelse)
        # the arrays stored into, checked at run time (a dict's item is no array element)
        containers = [copy.deepcopy(item.targets[0].value)
                      for item in statement.body + statement.orelse]
        replacement = [
            ast.Assign(targets=[name(ast.Store)], value=statement.test),
            ast.If(test=hook_call("selects", name(), *containers), body=stores,
                   orelse=[as_written]),
        ]
        for node in replacement:
            ast.copy_location(node, statement)
            for child in ast.walk(node):
                if not hasattr(child, "lineno"):
                    ast.copy_location(child, statement)
        return replacement
