"""The code of rewritten functions: which callables the front end rewrites, and the
rewritten function compiled once per code object and bound to a trace's hooks.

``source_rewrite.rewrite_tree`` gives the rewritten ``def``; here it is compiled with the
user's file name and line numbers (tracebacks and guard locations point at the user's
code) inside a factory whose parameters are the hook cell and the function's own closure
cells, so ``bind`` can build a function over the original's live globals, defaults and
cells plus the hooks of one trace (``frontend.Hooks``, or ``eager_rewrite.EagerHooks``).

>>> import numpy as np
>>> def double(x):
...     return x * 2
>>> is_user_function(double), is_user_function(np.tanh)
(True, False)
"""

from __future__ import annotations

import ast
import sys
import types

# astor, not ast.unparse: its printer wraps long lines (the rewritten source nests every
# load in hook calls; ast.unparse puts each statement on one line of hundreds of columns,
# unreadable in `tracejit cache show --source` and Lowered.source).
import astor

from .errors import TraceError
from .locations import is_internal, is_library
from .source_rewrite import HOOK, RewriteUnavailable, rewrite_tree

# (code object, file) -> (rewritten inner code, source) or the refusal it raised. The file
# is part of the key: code objects compare equal by content, not by file, so the same
# function in two files (a copied script) ran the first file's code, whose tracebacks and
# guard locations named that file.
_REWRITTEN = {}
_REWRITTEN_LIMIT = 512
# (code object, file) -> rewritten tree, for the last few rewritten: the disk cache renders the
# function it stores right after tracing it (``render``), which parsed and rewrote it
# again (3 ms of a 30-line train step's first call).
_TREES = {}
_TREES_LIMIT = 16


def is_user_function(function):
    """A plain Python function from the user's files (not tracejit's, NumPy's, the
    standard library's or an installed package's): the front end rewrites it. A
    tracejit library function marked ``__tracejit_rewritten__`` is rewritten too, so the
    calls in its body meet the trace's hooks (``nn.dropout``'s ``generator.random``
    draw is then replayed at every call, as the user's own draws are)."""
    if not isinstance(function, types.FunctionType):
        return False
    if getattr(function, "__tracejit_rewritten__", False):
        return True
    filename = function.__code__.co_filename
    return not (is_internal(filename) or is_library(filename))


def callable_object(function):
    """An instance whose class's ``__call__`` is a user function (a layer object)."""
    call = getattr(type(function), "__call__", None)  # noqa: B004 - the method, to inspect
    return not isinstance(function, (types.FunctionType, types.MethodType, type)) and (
        is_user_function(call))


def rewritten_code(function):
    """The rewritten function's code object and the original source, computed once per
    code object (tracing a function again does not parse and compile it again)."""
    key = _key(function)
    if key not in _REWRITTEN:
        if len(_REWRITTEN) >= _REWRITTEN_LIMIT:
            _REWRITTEN.clear()
        try:
            tree, source = rewrite_tree(function)
            _REWRITTEN[key] = (_compile(function, tree), source)
            if len(_TREES) >= _TREES_LIMIT:
                _TREES.clear()
            _TREES[key] = tree
        except (RewriteUnavailable, TraceError) as error:
            _REWRITTEN[key] = error
    result = _REWRITTEN[key]
    if isinstance(result, Exception):
        raise result
    return result


def _key(function):
    return function.__code__, function.__code__.co_filename


def bind(function, inner, hooks):
    """A function running ``inner`` with ``function``'s globals, defaults and closure cells
    (live), plus a cell holding this trace's hooks."""
    cells = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
    cells[HOOK] = types.CellType(hooks)
    closure = tuple(cells[name] for name in inner.co_freevars)
    rebuilt = types.FunctionType(
        inner, function.__globals__, function.__name__, function.__defaults__, closure
    )
    rebuilt.__kwdefaults__ = function.__kwdefaults__
    rebuilt.__qualname__ = function.__qualname__
    return rebuilt


def _compile(function, tree):
    freevars = function.__code__.co_freevars
    returned = ast.Return(value=ast.Name(id=tree.name, ctx=ast.Load()))
    body, own = [tree, returned], [returned, returned.value]  # own: the factory's nodes
    if tree.name not in freevars:
        # The def binds its name in the factory; a recursive call inside the body must
        # still read the global (as in the original), not a closure cell of the factory.
        body.insert(0, ast.Global(names=[tree.name]))
        own.append(body[0])
    factory = ast.FunctionDef(
        name="__tracejit_factory__",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=name) for name in (HOOK, *freevars)],
            vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
    )
    if sys.version_info >= (3, 12):
        factory.type_params = []
    # ``tree`` has its locations (``rewrite_tree`` fixed them): only the factory's own
    # nodes get one, line 1 as ``ast.fix_missing_locations`` gave them, without a walk of
    # the whole tree again (~0.1 ms a function; the factory's code never runs).
    for node in (factory, *factory.args.args, *own):
        node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 0
    code = compile(ast.Module(body=[factory], type_ignores=[]), function.__code__.co_filename,
                   "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return next(
        c for c in factory_code.co_consts
        if isinstance(c, types.CodeType) and c.co_name == tree.name
    )


def render(function):
    """The rewritten source of ``function`` as text (what the compiled run traced)."""
    tree = _TREES.get(_key(function))
    if tree is None:
        tree, _ = rewrite_tree(function)
    return astor.to_source(tree)
