"""Counted ``while`` loops become loops over ``range``, so they are captured too.

NumPy model code written from scratch often walks output positions with ``while`` and
counters instead of ``range``::

    curr_y = out_y = 0
    while curr_y + f <= h:
        ...out[:, out_y] = np.max(x[:, curr_y:curr_y + f])...
        curr_y += s
        out_y += 1

When the condition compares expressions that are affine in counters, and each counter
moves by a loop-invariant step once per trip (``name += step`` at the body's top level),
the trip count has a closed form. ``expand_counted_while`` rewrites such a loop (before
the rest of the front end runs) into::

    __tracejit_trips_12 = __tracejit__.while_trips('<=', <g at trip 0>, <g at trip 1>)
    if __tracejit_trips_12 is not None:
        for __tracejit_w_12 in range(__tracejit_trips_12):
            ...body, counters still moved by it...
    else:
        while curr_y + f <= h:
            ...body as written...

where ``g = left - right`` of the comparison, written out with each counter replaced by
``counter + k * step``. The ``for`` loop is an ordinary loop over ``range`` (captured
when the trip count is a dynamic dim; the counters are carried as the index's affine
functions, ``tracejit.tracer.loops``). ``while_trips`` returns None where the values are
not plain ints (floats, traced values) or the loop would not end, and the loop runs as
written.

>>> import ast
>>> tree = ast.parse("def f(x, s):\\n    i = 0\\n    while i + 2 <= x.shape[0]:\\n"
...                  "        i += s\\n    return i")
>>> print(ast.unparse(expand_counted_while(tree.body[0].body[1], tree.body[0])[0]))
__tracejit_trips_3 = __tracejit__.while_trips('<=', i + 0 * s + 2 - x.shape[0], \
i + 1 * s + 2 - x.shape[0])
>>> while_trips("<=", -7, -4), while_trips("<", 0, 1), while_trips(">", 5, 5)
(3, 0, None)
"""

from __future__ import annotations

import ast
import copy

from .dims import SymInt, expr_of, is_int
from .hook_calls import hook_call
from .loop_frontend import unsupported_statements

# comparison -> (sign of g = left - right in h(k) <= 0, offset): ``l < r`` is
# ``l - r + 1 <= 0`` for ints, ``l >= r`` is ``r - l <= 0``.
_NORMAL_FORMS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


# --- the rewrite (before the front end's own) --------------------------------------------
def expand_counted_while(loop, function_node):
    """``[trips assignment, if]`` for a counted ``while`` loop, else None."""
    test = loop.test
    if loop.orelse or not (isinstance(test, ast.Compare) and len(test.ops) == 1
                           and type(test.ops[0]) in _NORMAL_FORMS):
        return None
    if any(unsupported_statements(statement) is not None for statement in loop.body):
        return None
    steps = _counter_steps(loop)
    if not steps:
        return None
    left, right = test.left, test.comparators[0]
    if not (_affine(left, steps) and _affine(right, steps)):
        return None
    tag = f"{loop.lineno}"
    trips, index = f"__tracejit_trips_{tag}", f"__tracejit_w_{tag}"

    def g_at(k):
        moved = {name: ast.BinOp(ast.Name(id=name, ctx=ast.Load()), ast.Add(),
                                 ast.BinOp(ast.Constant(k), ast.Mult(), copy.deepcopy(step)))
                 for name, step in steps.items()}
        return ast.BinOp(_substituted(left, moved), ast.Sub(), _substituted(right, moved))

    count = ast.Assign(
        targets=[ast.Name(id=trips, ctx=ast.Store())],
        value=hook_call("while_trips", ast.Constant(_NORMAL_FORMS[type(test.ops[0])]),
                        g_at(0), g_at(1)))
    counted = ast.For(
        target=ast.Name(id=index, ctx=ast.Store()),
        iter=ast.Call(func=ast.Name(id="range", ctx=ast.Load()),
                      args=[ast.Name(id=trips, ctx=ast.Load())], keywords=[]),
        body=loop.body, orelse=[])
    as_written = ast.While(test=copy.deepcopy(test), body=copy.deepcopy(loop.body), orelse=[])
    # Capture of an enclosing loop looks past the fallback (tracejit.tracer.loops), and this
    # loop's carried names are those of the counted twin alone.
    as_written.tracejit_fallback = True
    counted.tracejit_twin = as_written
    choice = ast.If(
        test=ast.Compare(left=ast.Name(id=trips, ctx=ast.Load()), ops=[ast.IsNot()],
                         comparators=[ast.Constant(None)]),
        body=[counted], orelse=[as_written])
    return [ast.fix_missing_locations(ast.copy_location(new, loop)) for new in (count, choice)]


def _stored_roots(statements):
    """Names the statements may change: assigned, or the root of a written subscript or
    attribute (``out[i] = v`` changes what ``out[0]`` reads)."""
    names = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(
                    node.ctx, (ast.Store, ast.Del)):
                root = node
                while isinstance(root, (ast.Subscript, ast.Attribute)):
                    root = root.value
                if isinstance(root, ast.Name):
                    names.add(root.id)
            elif isinstance(node, ast.Call):  # out.append(...), d.update(...)
                func = node.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    names.add(func.value.id)
    return names


def _counter_steps(loop):
    """``{counter: step expression}`` when every name the condition reads and the body
    changes is moved once per trip by a top-level ``name += step`` (or ``-=``) whose step
    the body does not change; else None."""
    changed = _stored_roots(loop.body)
    read = {node.id for node in ast.walk(loop.test) if isinstance(node, ast.Name)}
    steps = {}
    for statement in loop.body:
        if (isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name)
                and statement.target.id in read and isinstance(statement.op, (ast.Add,
                                                                             ast.Sub))):
            name = statement.target.id
            if name in steps:
                return None
            step = statement.value
            if any(isinstance(node, ast.Name) and node.id in changed
                   for node in ast.walk(step)) or any(
                    isinstance(node, (ast.Call, ast.Subscript)) for node in ast.walk(step)):
                return None
            steps[name] = step if isinstance(statement.op, ast.Add) else ast.UnaryOp(
                ast.USub(), step)
    for name in read & changed:
        stores = sum(isinstance(node, ast.Name) and node.id == name
                     and isinstance(node.ctx, ast.Store)
                     for statement in loop.body for node in ast.walk(statement))
        if name not in steps or stores != 1:
            return None
    return steps


def _affine(node, counters):
    """Whether ``node`` is affine in the counters, built from names, constants, loads like
    ``x.shape[0]``, + and -, and products where one side holds no counter."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return not _mentions(node, counters) and not any(
            isinstance(inner, ast.Call) for inner in ast.walk(node))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _affine(node.operand, counters)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _affine(node.left, counters) and _affine(node.right, counters)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _affine(node.left, counters) and _affine(node.right, counters) and not (
            _mentions(node.left, counters) and _mentions(node.right, counters))
    return False


def _mentions(node, names):
    return any(isinstance(inner, ast.Name) and inner.id in names for inner in ast.walk(node))


def _substituted(node, replacements):
    class _Replace(ast.NodeTransformer):
        def visit_Name(self, name):
            replacement = replacements.get(name.id)
            return copy.deepcopy(replacement) if replacement is not None else name

    return _Replace().visit(copy.deepcopy(node))


# --- run time ------------------------------------------------------------------------------
def while_trips(op, g0, g1):
    """The trips of a counted loop whose condition is ``g(k) op 0`` with ``g`` affine in the
    trip number ``k`` (``g0 = g(0)``, ``g1 = g(1)``): an int, or a symbolic one when the
    condition reads dynamic dims; None when the values are not ints or the loop would not
    end (it then runs as written)."""
    if not all(is_int(value) for value in (g0, g1)):
        return None
    slope = g1 - g0
    if isinstance(slope, SymInt) and isinstance(expr_of(slope), int):
        slope = expr_of(slope)
    if not isinstance(slope, int):
        return None  # a step that is a dim: its sign is not known here
    if op in (">", ">="):  # r - l <= 0
        g0, slope = -g0, -slope
    if op in ("<", ">"):  # strict: one less for ints
        g0 = g0 + 1
    if slope <= 0:  # h(k) = g0 + slope * k <= 0 for every k, or for none
        return 0 if g0 > 0 else None
    trips = (-g0) // slope + 1
    return trips if trips > 0 else 0

