"""Attributes a loop body rebinds, kept in a local for the loop's duration.

A recurrent cell written as a class keeps its state on itself::

    for t in range(T):
        self.h = np.tanh(x[t] @ self.Wx + self.h @ self.Wh)

A captured loop carries local names, not attributes (an attribute write inside a traced
trip would be a write of that trip only: ``attribute_writes`` refuses it, and the loop
unrolls, one compile per length). When nothing in the body can see the attribute other
than through ``self.h`` itself - no method of ``self`` is called, ``self`` is passed to
no call, no ``return`` leaves the loop early - reading and writing a local instead is the
same program: ``h = self.h`` before the loop, ``h`` in the body, ``self.h = h`` after it.

    >>> import ast
    >>> loop = ast.parse("for t in range(n):\\n    self.h = self.h * 2 + x[t]").body[0]
    >>> names = iter(["_h"])
    >>> print("\\n".join(ast.unparse(s) for s in hoist_attributes(loop, names.__next__)))
    _h = self.h
    for t in range(n):
        _h = _h * 2 + x[t]
    self.h = _h

Only a plain attribute may be held so: one that ``self.__dict__`` holds, of an object whose
class neither defines ``__setattr__`` or ``__getattribute__`` nor has a data descriptor of
that name (a property whose setter clips, a ``__slots__`` member). Every other write runs
the class's code, at every trip. The front end keeps the loop as written beside the
hoisted one and the ``hoistable`` hook (``plain_attributes``, asked when the loop starts)
picks one::

    >>> class Clipped:
    ...     w = property(lambda self: self._w, lambda self, v: setattr(self, "_w", v % 1))
    >>> class Plain:
    ...     pass
    >>> clipped, plain = Clipped(), Plain()
    >>> clipped.w = plain.w = 1.5
    >>> plain_attributes((plain, "w")), plain_attributes((clipped, "w"), (plain, "w"))
    (True, False)
"""

from __future__ import annotations

import ast
import collections

from .attribute_writes import class_code

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def hoist_attributes(loop, fresh):
    """``[before..., loop, after...]`` with the attributes ``loop``'s body rebinds held
    in fresh locals (``fresh()`` names one), or None when there is none it may hoist.
    The loop's ``tracejit_live_after`` lists those locals (read after the loop)."""
    rebound = _rebound_attributes(loop)
    if not rebound:
        return None
    locals_ = {key: fresh() for key in sorted(rebound)}
    replace = _Replace(locals_)
    loop.body = [replace.visit(statement) for statement in loop.body]
    if isinstance(loop, ast.While):  # while np.linalg.norm(self.theta - old) > eps:
        loop.test = replace.visit(loop.test)
    loop.tracejit_live_after = set(locals_.values())
    loop.tracejit_hoisted = sorted(locals_)  # the (root, attr) held in locals
    before = [_assign(ast.Name(id=name, ctx=ast.Store()), _attribute(root, attr, ast.Load()),
                      loop) for (root, attr), name in locals_.items()]
    after = [_assign(_attribute(root, attr, ast.Store()), ast.Name(id=name, ctx=ast.Load()),
                     loop) for (root, attr), name in locals_.items()]
    return [*before, loop, *after]


def plain_attributes(*pairs):
    """Whether every ``(owner, name)`` of ``pairs`` is a plain attribute (see the module
    docstring), which a loop may hold in a local: reading and writing it runs no code of
    the owner's class."""
    return all(_plain(owner, name) for owner, name in pairs)


def _plain(owner, name):
    if type(owner).__getattribute__ is not object.__getattribute__ or class_code(
            owner, name) is not None:
        return False  # (a module's, a class's own attributes: their type's hooks too)
    state = getattr(owner, "__dict__", None)
    return type(state) is dict and name in state  # (not a __slots__ member)


def _rebound_attributes(loop):
    """``{(root, attr)}`` for ``root.attr = ...`` in the body, ``root`` a plain name the
    body does not rebind, hand to a call or call a method of; empty when the body may
    leave early (``return``) or has a nested scope."""
    if loop.orelse:  # (it runs before the attribute is written back)
        return set()
    targets, blocked = set(), set()
    stored_names = set()
    for node in _walk(loop.body):
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global,
                             ast.Nonlocal, *_SCOPES)):
            return set()
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stored_names.add(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if isinstance(node.ctx, ast.Store):
                targets.add((node.value.id, node.attr))
            elif isinstance(node.ctx, ast.Del):
                blocked.add(node.value.id)
        if isinstance(node, ast.Call):
            func = node.func
            while isinstance(func, (ast.Attribute, ast.Subscript)):
                func = func.value  # self.cell(...), self.layers[0](...)
            if isinstance(func, ast.Name) and isinstance(node.func, (ast.Attribute,
                                                                      ast.Subscript)):
                blocked.add(func.id)
            for argument in (*node.args, *(keyword.value for keyword in node.keywords)):
                blocked |= _bare_names(argument)
    if isinstance(getattr(loop, "target", None), ast.Name):  # (a while loop has none)
        stored_names.add(loop.target.id)
    # another name that may hold the same object (other = self, or both passed in: m.theta
    # rebound, o.theta read) would read the attribute itself, not the local
    other_roots = collections.defaultdict(set)
    for node in _walk(loop.body):
        if isinstance(node, ast.Attribute):
            root = node.value.id if isinstance(node.value, ast.Name) else None
            other_roots[node.attr].add(root)
    return {(root, attr) for root, attr in targets
            if root not in blocked and root not in stored_names
            and other_roots[attr] == {root}}


def _bare_names(expression):
    """Names an expression hands on as objects (``f(self)``, ``f([self])``), not those
    it only reads an attribute of (``f(self.h)``)."""
    roots = {id(inner.value) for inner in ast.walk(expression)
             if isinstance(inner, ast.Attribute)}
    return {inner.id for inner in ast.walk(expression)
            if isinstance(inner, ast.Name) and id(inner) not in roots}


def _walk(statements):
    for statement in statements:
        yield from ast.walk(statement)


class _Replace(ast.NodeTransformer):
    def __init__(self, locals_):
        self.locals = locals_

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in self.locals:
            name = self.locals[(node.value.id, node.attr)]
            return ast.copy_location(ast.Name(id=name, ctx=node.ctx), node)
        return self.generic_visit(node)


def _attribute(root, attr, ctx):
    return ast.Attribute(value=ast.Name(id=root, ctx=ast.Load()), attr=attr, ctx=ctx)


def _assign(target, value, node):
    return ast.fix_missing_locations(ast.copy_location(ast.Assign(targets=[target],
                                                                  value=value), node))
