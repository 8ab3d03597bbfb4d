"""Assignments whose targets are not all plain names, split into one write per target.

``self.h, self.c = h, c``, ``out[t], cache = step(x[t])`` and ``a = self.x = v`` write
attributes and items inside one statement; the front end routes single writes through
its hooks (``set_attr``, ``set_item``) and would see none of these. Python assigns
targets left to right after evaluating the value once, and unpacks before it writes; the
split keeps both: the value goes into fresh names first, then each target gets its own
assignment (visited again, so nested tuples split too).

    >>> import ast
    >>> tree = ast.parse("self.h, self.c = h, c")
    >>> names = iter(["_t0", "_t1"])
    >>> print("\\n".join(ast.unparse(s) for s in split_targets(tree.body[0], names.__next__)))
    _t0, _t1 = (h, c)
    self.h = _t0
    self.c = _t1
"""

from __future__ import annotations

import ast


def needs_split(node):
    """Whether an ``ast.Assign`` writes something other than plain names through a tuple,
    a list or several targets (a single ``x.a = v`` or ``x[i] = v`` needs no split)."""
    if len(node.targets) > 1:
        return any(not isinstance(target, ast.Name) for target in node.targets)
    target = node.targets[0]
    return isinstance(target, (ast.Tuple, ast.List)) and not _only_names(target)


def _only_names(target):
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, ast.Starred):
        return _only_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_only_names(element) for element in target.elts)
    return False


def split_targets(node, fresh):
    """The statements replacing ``node`` (``needs_split(node)``); ``fresh()`` gives a new
    local name for each value held between the unpacking and the writes."""
    if len(node.targets) > 1:
        name = fresh()
        statements = [_assign(ast.Name(id=name, ctx=ast.Store()), node.value, node)]
        for target in node.targets:
            statements.append(_assign(target, ast.Name(id=name, ctx=ast.Load()), node))
        return statements
    target = node.targets[0]
    names = [fresh() for _ in target.elts]
    holders = [ast.Starred(value=ast.Name(id=name, ctx=ast.Store()), ctx=ast.Store())
               if isinstance(element, ast.Starred) else ast.Name(id=name, ctx=ast.Store())
               for name, element in zip(names, target.elts)]
    statements = [_assign(type(target)(elts=holders, ctx=ast.Store()), node.value, node)]
    for name, element in zip(names, target.elts):
        written = element.value if isinstance(element, ast.Starred) else element
        statements.append(_assign(written, ast.Name(id=name, ctx=ast.Load()), node))
    return statements


def _assign(target, value, node):
    return ast.copy_location(ast.Assign(targets=[target], value=value), node)
