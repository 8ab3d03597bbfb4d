"""The calls the source rewrite writes into a user's function: ``__tracejit__.<method>(...)``.

Every rewrite (operators, if-selects, loops, prints, effects) routes a construct through
the hooks object bound to ``HOOK`` in the rewritten function (``frontend.Hooks`` while
tracing, ``eager_rewrite.EagerHooks`` eagerly), so they all build and recognise the same
node here.

>>> import ast
>>> node = hook_call("unary", ast.Constant("neg"), ast.Name("x", ast.Load()))
>>> ast.unparse(node), is_hook_call(node), is_hook_call(node, "binary")
("__tracejit__.unary('neg', x)", True, False)
"""

from __future__ import annotations

import ast

HOOK = "__tracejit__"


def hook_call(method, *args, keywords=()):
    """The node ``__tracejit__.<method>(*args, **keywords)``."""
    return ast.Call(func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr=method,
                                       ctx=ast.Load()), args=list(args), keywords=list(keywords))


def is_hook_call(node, method=None):
    """Whether ``node`` is a call of a hook (of ``method``, when given)."""
    function = getattr(node, "func", None) if isinstance(node, ast.Call) else None
    return (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
            and function.value.id == HOOK and method in (None, function.attr))
