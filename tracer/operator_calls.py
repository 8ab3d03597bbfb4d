"""Operators of the user's classes run as calls do: rewritten, through the hooks.

Autograd engines in NumPy (micrograd's ``Value``, tape ``Node`` classes) build their graph
in operator methods: ``a * b`` runs ``Value.__mul__``, which makes the result node
(``out = Value(self.data * other.data)``) and its ``_backward`` closure. Python calls
those methods itself, so without this module they ran as written: the node made inside
was not known as made in the call, and a later ``v.grad = ...`` on it was refused as a
write to outside state (``a.mul(b)`` compiled: the call went through ``Hooks.call``).

``route_operators`` rewrites the binary and unary operators of a rewritten function's
body into ``__tracejit__.binary("mul", a, b)`` and ``__tracejit__.unary("neg", a)``;
``binary`` and ``unary`` run Python's own operator protocol (the data model's order of
``__mul__`` and ``__rmul__``, a subclass's reflected method first, ``NotImplemented``),
calling a method the user wrote through the hooks' ``call`` and anything else (arrays,
traced values, numbers) as the operator does. Nested definitions stay as written (their
calls are rewritten when made), as do lambdas.

>>> import ast
>>> tree = ast.parse("def f(x, y):\\n    return -x * y")
>>> print(ast.unparse(route_operators(tree.body[0])))
def f(x, y):
    return __tracejit__.binary('mul', __tracejit__.unary('neg', x), y)
"""

from __future__ import annotations

import ast
import operator

from .dims import calls_for_the_user
from .errors import as_numpy_would
from .hook_calls import hook_call
from .locations import is_library, is_tracejit
from .primitives import is_traced_array
from .rewritten_code import is_user_function
from .traced_array import FORMATTED_FLOAT, trace_error

_BINARY_NAMES = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
    ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul",
    ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "lshift",
    ast.RShift: "rshift",
}
_UNARY_NAMES = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert"}
_SYMBOLS = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "pow": "** or pow()", "matmul": "@", "and": "&", "or": "|", "xor": "^", "lshift": "<<",
    "rshift": ">>",
}
BINARY = {name: getattr(operator, name + "_" if name in ("and", "or") else name)
          for name in _BINARY_NAMES.values()}
UNARY = {name: getattr(operator, name) for name in _UNARY_NAMES.values()}


class _Operators(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        if node.name.startswith("__tracejit"):  # a loop body the rewrite made: ours
            self.generic_visit(node)
        return node  # the user's nested def: as written (rewritten when called)

    def visit_Lambda(self, node):
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda

    def visit_BinOp(self, node):
        self.generic_visit(node)
        name = _BINARY_NAMES.get(type(node.op))
        if name is None or (isinstance(node.left, ast.Constant)
                            and isinstance(node.right, ast.Constant)):
            return node  # 2 ** 10: constants only
        return ast.copy_location(hook_call("binary", ast.Constant(name), node.left, node.right),
                                 node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        name = _UNARY_NAMES.get(type(node.op))
        if name is None or isinstance(node.operand, ast.Constant):
            return node  # -1, not x
        return ast.copy_location(hook_call("unary", ast.Constant(name), node.operand), node)


def route_operators(function_node):
    """``function_node`` (a rewritten ``def``) with its operators made hook calls."""
    function_node.body = [_Operators().visit(statement) for statement in function_node.body]
    return function_node


_DUNDERS = (*(f"__{prefix}{name}__" for name in BINARY for prefix in ("", "r", "i")),
            *(f"__{name}__" for name in UNARY))


def _user_methods(methods, kind):
    """The operator methods the user wrote on ``kind`` (``{"__mul__": function}``, empty
    for NumPy's, tracejit's and Python's own types), cached per trace in ``methods``."""
    found = methods.get(kind)
    if found is None:
        found = methods[kind] = {name: method for name in _DUNDERS
                                 if is_user_function(method := getattr(kind, name, None))}
    return found


@calls_for_the_user  # "%s" % n, n * 2 of a dim: the user's operator
def binary(call, methods, name, left, right):
    """``left <op> right`` as Python computes it, a method the user wrote run by ``call``
    (``Hooks.call``: rewritten, so what it makes and writes is seen)."""
    if name == "mod" and isinstance(left, (str, bytes)) and _any_traced_float(right):
        raise trace_error(FORMATTED_FLOAT)  # "cost %f" % cost: why, at FORMATTED_FLOAT
    left_kind, right_kind = type(left), type(right)
    if not _user_methods(methods, left_kind) and (
            right_kind is left_kind or not _user_methods(methods, right_kind)):
        return as_written(BINARY[name], left, right)  # arrays, traced values, numbers
    forward = getattr(left_kind, f"__{name}__", None)
    reflected = None if right_kind is left_kind else getattr(right_kind, f"__r{name}__", None)
    attempts = [(forward, left, right), (reflected, right, left)]
    if reflected is not None and issubclass(right_kind, left_kind) and (
            reflected is not getattr(left_kind, f"__r{name}__", None)):
        attempts.reverse()  # a subclass's own reflected method goes first
    for method, first, second in attempts:
        if method is None:
            continue
        result = call(method, first, second) if is_user_function(method) else method(
            first, second)
        if result is not NotImplemented:
            return result
    raise TypeError(f"unsupported operand type(s) for {_SYMBOLS[name]}: "
                    f"'{left_kind.__name__}' and '{right_kind.__name__}'")


def _any_traced_float(values):
    """Whether a ``%`` format's operand (one value, a tuple or a mapping of them) holds a
    traced float."""
    items = values.values() if isinstance(values, dict) else (
        values if isinstance(values, tuple) else (values,))
    return any(is_traced_array(item) and item.dtype.kind == "f" for item in items)


@calls_for_the_user
def inplace(call, methods, name, target, value):
    """``target <op>= value`` as Python computes it: the target's ``__i<op>__``, else (none,
    or ``NotImplemented``) ``binary``. A method the user wrote runs by ``call``: an
    accumulator's ``__iadd__`` that sets ``self.total`` in a loop is seen as a write to an
    object made in the call (run as Python ran it, the write was the first trip's value)."""
    if not _user_methods(methods, type(target)) and not _user_methods(methods, type(value)):
        return as_written(getattr(operator, f"i{name}"), target, value)  # iand, imatmul
    method = getattr(type(target), f"__i{name}__", None)
    if method is not None:
        result = call(method, target, value) if is_user_function(method) else method(
            target, value)
        if result is not NotImplemented:
            return result
    return binary(call, methods, name, target, value)


@calls_for_the_user
def unary(call, methods, name, operand):
    """``<op> operand`` as Python computes it (see ``binary``)."""
    method = _user_methods(methods, type(operand)).get(f"__{name}__")
    if method is None:
        return as_written(UNARY[name], operand)
    return call(method, operand)


@calls_for_the_user
def as_written(operation, *operands):
    """``operation(*operands)``; an error raised by the operator itself (or by library
    code under it) is the user's line's, as it was before the operator became a call
    here: ``1 / 0`` in the model is its own ZeroDivisionError, not tracejit's."""
    try:
        return operation(*operands)
    except Exception as error:
        trace = error.__traceback__.tb_next  # past this frame
        while trace is not None:
            filename = trace.tb_frame.f_code.co_filename
            if is_tracejit(filename) or not is_library(filename):
                # (``trace`` dropped first: this frame holding the traceback whose frames
                # hold this one is a cycle that keeps their arrays alive until a collection,
                # and a refused loop trip's views would stay in their base's WeakSet)
                del trace
                raise  # an inner frame decides whose it is
            trace = trace.tb_next
        try:
            as_numpy_would(error)
        except (AttributeError, TypeError):  # an error type without attributes
            pass
        raise
