"""A ``return`` at the top level of a loop body becomes a ``break`` and a ``return`` after the
loop, so ``tracejit.tracer.while_loops`` captures the loop.

Search loops often return from inside::

    for i in range(max_iter):
        x = x * 2.0
        if x.sum() > limit:
            return x, i
    return x, -1

``expand_returns`` rewrites such a loop (before any other rewrite) into::

    __tracejit_returned_12 = 0
    for i in range(max_iter):
        x = x * 2.0
        if x.sum() > limit:
            __tracejit_returned_12 = 1
            break
    if __tracejit_returned_12:
        return x, i
    return x, -1

which Python runs alike: the returned expression reads the names as the ``break`` leaves
them, which is how a loop with an exit carries them out (the index too, ``exit_ints``),
and nothing runs between the ``break`` and the ``return``. The flag is a Python int the
loop carries (``exit_ints``); the ``if`` on it after the loop is a guard, so a function
compiles at most its two outcomes, not one per trip count. Only a loop with one such
``if <test>: return ...`` and no other ``return`` in its body is rewritten.

>>> import ast
>>> tree = ast.parse("def f(x):\\n    for i in range(9):\\n        if x[i] > 0:\\n"
...                  "            return i\\n    return -1")
>>> print(ast.unparse(expand_returns(tree.body[0])))
def f(x):
    __tracejit_returned_2 = 0
    for i in range(9):
        if x[i] > 0:
            __tracejit_returned_2 = 1
            break
    if __tracejit_returned_2:
        return i
    return -1
"""

from __future__ import annotations

import ast

FLAG = "__tracejit_returned_"


def expand_returns(function_node):
    """``function_node`` with each loop of its statement lists that returns from its body's
    top level rewritten (in place)."""
    for node in list(ast.walk(function_node)):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and any(
                    isinstance(item, (ast.For, ast.While)) for item in statements):
                setattr(node, field, _expanded(statements))
    return function_node


def _expanded(statements):
    result = []
    for statement in statements:
        at = _returning_if(statement) if isinstance(statement, (ast.For, ast.While)) else None
        if at is None:
            result.append(statement)
            continue
        flag = f"{FLAG}{statement.lineno}"
        returning = statement.body[at]
        start = ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                             value=ast.Constant(0)), statement)
        statement.body[at] = ast.copy_location(ast.If(test=returning.test, body=[
            ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                         value=ast.Constant(1)), returning.body[0]),
            ast.copy_location(ast.Break(), returning.body[0])], orelse=[]), returning)
        after = ast.copy_location(ast.If(test=ast.Name(id=flag, ctx=ast.Load()),
                                         body=[returning.body[0]], orelse=[]), returning)
        result += [ast.fix_missing_locations(start), statement,
                   ast.fix_missing_locations(after)]
    return result


def _returning_if(loop):
    """The position of the body's one top-level ``if <test>: return ...``, or None (none,
    several, or another ``return`` in the body)."""
    found = [position for position, statement in enumerate(loop.body)
             if isinstance(statement, ast.If) and not statement.orelse
             and len(statement.body) == 1 and isinstance(statement.body[0], ast.Return)]
    returns = sum(isinstance(node, ast.Return) for statement in loop.body
                  for node in _walk_own(statement))
    return found[0] if len(found) == 1 and returns == 1 else None


def _walk_own(node):
    """``ast.walk`` without nested definitions (their returns are theirs)."""
    pending = [node]
    while pending:
        item = pending.pop()
        yield item
        pending.extend(child for child in ast.iter_child_nodes(item) if not isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))
