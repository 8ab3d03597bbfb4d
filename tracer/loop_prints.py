"""A print under a test of the loop index: a line per selected trip, written after the loop.

Course training loops print their cost every so many trips::

    for i in range(num_iterations):
        ...
        if print_cost and i % 100 == 0 or i == num_iterations - 1:
            print("Cost after iteration {}: {}".format(i, np.squeeze(cost)))

Traced as written, the test decides on the index (the loop unrolls: seconds of tracing,
one compile per count). The front end (``rewrite_selected_prints``) turns the loop's
print (bare, or alone under an ``if`` whose test reads the index and names the loop leaves
alone) into the selected appends' machinery (``tracejit.tracer.loop_selected_appends``)::

    (__tracejit_printed_L_0,) = __tracejit__.printed_rows(("__tracejit_printed_L_0",))
    for i in range(num_iterations):
        ...
        __tracejit__.print_when(__tracejit_printed_L_0, i, lambda i: <test>,
                                (<the printed values>), (print, <layout>, sep, end))
    __tracejit__.print_rows((__tracejit_printed_L_0,), ((print, <layout>, sep, end),),
                            ("__tracejit_printed_L_0",))

The entry (the index and the values the print formats, ``deferred_text``'s values or the
print's own arguments) is kept at every trip, and after a captured loop the list holds the
selected trips' rows: ``print_rows`` records one print effect over those rows (``rows``:
a line per row, ``tracejit.tracer.ops.control.print_text``), written by compiled code
after every guard passed, so the loop compiles natively once for every count. Eagerly the
hook prints at the trip (``EagerHooks.print_when``); a loop that unrolls prints its rows
after it. Either way the lines are eager's, in eager's order: another print in the loop
(a helper's) would land between them, so ``print_rows`` refuses a loop in which anything
else printed (the call runs eagerly).

Several prints (each alone under its own index test, or bare) keep a list each, and
``print_rows`` prints them as one effect whose lines follow the trips' order
(``merged_effect``). Left as written: a print under an ``else`` or beside other statements
(an append beside it is split off first: ``loop_selected_appends``), a print in a helper,
``file=``, values that call anything but the conversions a cost goes through, a print of
the index and constants alone (no kept value).
(``flush=True`` is taken: the rows are written at once after the loop.)
"""

from __future__ import annotations

import ast

import numpy as np

from . import ops
from .deferred_text import DeferredText, eager_kind, segment
from .hook_calls import hook_call, is_hook_call
from .ir import Effect
from .loop_selected_appends import _TEST_NODES, _bound, _plain_value, selected_call, selection
from .ops.control import print_text

# The most prints one loop's rows are kept for (each a list of its own)
_PRINTS = 8

# --- front end ---------------------------------------------------------------------------
def rewrite_selected_prints(node, assigned_before, scope):
    """``(before, after)`` statements around the loop ``node`` (an ``ast.For`` over
    ``range``) whose prints this rewrites into ``print_when`` hook calls, or None (the loop
    as it was): every print of the loop, each alone under its own index test or bare in
    the body, keeps its rows in a list of its own, and ``print_rows`` prints them all after
    the loop, in the trips' order. ``assigned_before`` as ``rewrite_selected_appends`` takes
    it; the hidden lists' names join ``scope``'s assigned names."""
    index = node.target.id
    printed = [inner for inner in ast.walk(node) if isinstance(inner, ast.Call) and isinstance(
        inner.func, ast.Name) and inner.func.id == "print"]
    if not printed or len(printed) > _PRINTS:
        return None
    stored = {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)
              and isinstance(inner.ctx, (ast.Store, ast.Del))}
    rewritten = {}  # body position -> the print_when statement
    names, shown = [], []
    for position, statement in enumerate(node.body):
        found = next((found for call in printed if (
            found := _printed_statement(statement, call, index, stored)) is not None), None)
        if found is None:
            continue
        test, call = found
        layout, values, sep, end = _layout(call, index)
        bound = {index, *assigned_before(node.body[:position])}
        if layout is None or not values or not all(
                _plain_value(value) and _bound(value, bound, stored) for value in values):
            return None
        rows = f"__tracejit_printed_{node.lineno}_{len(names)}"
        names.append(rows)
        shown.append(ast.Tuple(elts=[ast.Name(id="print", ctx=ast.Load()),
                                     ast.Constant(layout), ast.Constant(sep),
                                     ast.Constant(end)], ctx=ast.Load()))
        entry = ast.Tuple(elts=values, ctx=ast.Load())
        hook = selected_call("print_when", [ast.Name(id=rows, ctx=ast.Load())], index, test,
                             entry, [shown[-1]])
        rewritten[position] = _located(ast.Expr(value=hook), statement)
    if len(names) != len(printed):
        return None  # a print elsewhere (under an else, beside other statements)
    for position, statement in rewritten.items():
        node.body[position] = statement
    scope.assigned.update(names)
    before = ast.Assign(targets=[_names(names, ast.Store)],
                        value=hook_call("printed_rows", ast.Constant(tuple(names))))
    after = ast.Expr(value=hook_call("print_rows", _names(names, ast.Load),
                                      ast.Tuple(elts=[_copy(one) for one in shown],
                                                ctx=ast.Load()),
                                      ast.Constant(tuple(names))))
    return _located(before, node), _located(after, node)


def _names(names, context):
    return ast.Tuple(elts=[ast.Name(id=name, ctx=context()) for name in names],
                     ctx=context())


def _printed_statement(statement, call, index, stored):
    """``(test, print call)`` when ``statement`` is the print ``call`` alone or alone under
    an ``if`` whose test reads only the index and names the loop leaves alone."""
    if isinstance(statement, ast.Expr) and statement.value is call:
        return ast.Constant(True), call
    if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1
            and isinstance(statement.body[0], ast.Expr) and statement.body[0].value is call):
        return None
    for inner in ast.walk(statement.test):
        if not isinstance(inner, _TEST_NODES) or (
                isinstance(inner, ast.Name) and inner.id != index and inner.id in stored):
            return None
    return statement.test, call


def _layout(call, index):
    """``(layout, value expressions, sep, end)`` of a print call: per argument its text, the
    entry position of its value, or its ``deferred_text`` template and the entry positions
    of its values (the entry's item 0 is the index); ``(None, ...)`` for one this leaves."""
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    flush = keywords.pop("flush", ast.Constant(False))  # (the rows are written at once)
    if not set(keywords) <= {"sep", "end"} or not all(
            isinstance(value, ast.Constant) and type(value.value) is str
            for value in keywords.values()) or not (
            isinstance(flush, ast.Constant) and type(flush.value) is bool):
        return None, [], None, None
    sep = keywords["sep"].value if "sep" in keywords else " "
    end = keywords["end"].value if "end" in keywords else "\n"
    layout, values = [], []

    def position(value):  # the index is the rows' own (an int is no entry of a list)
        if isinstance(value, ast.Name) and value.id == index:
            return 0
        values.append(value)
        return len(values)

    for arg in call.args:
        if isinstance(arg, ast.Constant):
            layout.append(("text", str(arg.value)))
        elif _is_deferred(arg):
            template, parts = arg.args[0].value, arg.args[1].elts
            layout.append(("deferred", template, tuple(position(part) for part in parts)))
        elif isinstance(arg, ast.Starred):
            return None, [], None, None
        else:
            layout.append(("value", position(arg)))
    return tuple(layout), values, sep, end


def _is_deferred(node):
    return is_hook_call(node, "deferred_text") and isinstance(node.args[1], ast.Tuple)


def _copy(node):
    return ast.Tuple(elts=[ast.Name(id="print", ctx=ast.Load()), *node.elts[1:]],
                     ctx=ast.Load())


def _located(statement, where):
    return ast.fix_missing_locations(ast.copy_location(statement, where))


# --- trace time ---------------------------------------------------------------------------
def print_rows(hooks, rows, shown, names, location):
    """``Hooks.print_rows``: after the loop, one print effect over a captured loop's
    selected rows (of every print of the loop: ``rows``, ``shown`` and ``names`` hold one
    item a print), or the rows of an unrolled one printed one by one in the order the trips
    kept them. Refused (the call runs eagerly) when anything else printed since the loop
    began (``hooks.print_marks``), or ``print`` is not the builtin."""
    # cycle: loops -> while_loops -> loop_frontend -> here (the front end's rewrite)
    from .loops import emit_prints
    from .stacked_containers import StackedList
    from .traced_array import trace_error

    marks = [hooks.print_marks.pop(name, None) for name in names]
    if any(one[0] is not print for one in shown) or any(
            mark != hooks.print_count for mark in marks):
        raise trace_error("a print under a test of the loop index in a loop that prints "
                          "something else too (or a `print` that is not the builtin): "
                          "its lines would be written out of order")
    context = hooks.context
    if all(isinstance(one, StackedList) for one in rows):
        made = [rows_effect(context, one, layout, sep, end, location)
                for one, (_, layout, sep, end) in zip(rows, shown)]
        if all(one is not None for one in made):
            effect, values = made[0] if len(made) == 1 else merged_effect(
                made, _direction(rows[0]._carry), location)
            try:
                written = print_text(effect, values)
            except Exception as error:  # noqa: BLE001 - eager raises or warns itself
                raise trace_error(f"printing the loop's rows raised {type(error).__name__}: "
                                  f"{error}") from None
            context.body.append(effect)
            hooks.print_count += 1
            trial = getattr(context, "trial_prints", None)
            if trial is not None:  # (a loop in a traced trip of another)
                trial.append(written)
            else:
                emit_prints(context, [written])
            return
    lines = []
    for one, (_, layout, sep, end) in zip(rows, shown):
        kept = hooks.print_indices.pop(id(one), [])
        entries = list(one)
        if len(kept) != len(entries):
            raise trace_error("a print under a test of the loop index whose rows are not its "
                              "trips' (the loop ran another way)")
        lines += [(order, layout, sep, end, index, entry)
                  for (order, index), entry in zip(kept, entries)]
    for _, layout, sep, end, index, entry in sorted(lines, key=lambda line: line[0]):
        hooks.print(*printed_arguments(layout, index, entry), sep=sep, end=end)


def _direction(carry):
    """1 when a captured loop's printed index grows trip by trip, -1 when it falls."""
    _, scale = carry.index_map
    return 1 if scale * carry.step > 0 else -1


def merged_effect(made, direction, location):
    """One print effect over several prints' rows effects (``rows_effect``): each row's
    line goes where its trip printed it, the trips in order (``direction``: the printed
    index, atom 0 of each, grows or falls trip by trip) and in a trip the prints in the
    body's order (``ops.control.print_text``'s ``groups``)."""
    atoms, values, groups = [], [], []
    for effect, effect_values in made:
        params = dict(effect.params)
        groups.append((params["segments"], params["sep"], params["end"], len(effect.inputs)))
        atoms += effect.inputs
        values += effect_values
    params = (("end", ""), ("groups", tuple(groups)), ("order", direction), ("rows", True),
              ("segments", ()), ("sep", ""), ("stream", "stdout"))
    return Effect("print", tuple(atoms), params, location), values


# --- run time -----------------------------------------------------------------------------
def printed_arguments(layout, index, entry):
    """The print's arguments for one trip's ``index`` and ``entry`` (formatted text
    deferred)."""
    entry = (index, *entry)
    arguments = []
    for part in layout:
        if part[0] == "text":
            arguments.append(part[1])
        elif part[0] == "value":
            arguments.append(entry[part[1]])
        else:
            arguments.append(DeferredText(part[1], [entry[k] for k in part[2]]))
    return arguments


def rows_effect(context, rows, layout, sep, end, location):
    """The print effect of a captured loop's selected rows (``StackedList`` ``rows``) and
    the text the trace prints; None when the rows are no flat entry of arrays (printed
    one by one instead)."""
    carry = rows._carry
    if rows._list is not None or rows._prefix or carry.structure is None or any(
            part is not None for part in carry.structure):
        return None
    # the selected trips' indices, beside the values: row k of the buffers is trip rows[k].
    # A strided loop runs over its trip number: the test reads, and the line prints, the
    # user's index offset + scale * it (the rows were selected so: ContainerCarry.after)
    offset, scale = carry.index_map
    trips, _ = selection(carry.selected, offset + scale * carry.first, carry.count,
                         scale * carry.step, rows._buffers[0])
    indices = ops.iota(carry.count, np.int64, like=rows._buffers[0])[trips]
    buffers = [offset + scale * (indices * carry.step + carry.first), *rows._buffers]
    kinds = [("int",), *(eager_kind(context, leaf) for leaf in carry.leaves0)]
    atoms = [context.atom(buffer)[0] for buffer in buffers]
    segments = []
    for part in layout:
        if part[0] == "text":
            segments.append(part)
        elif part[0] == "value":
            segments.append(("value", part[1]))
        else:
            stand_ins = [_Leaf(k, kinds[k]) for k in part[2]]
            formatted, _ = segment(context, DeferredText(part[1], stand_ins),
                                   lambda leaf: leaf.position, lambda value: True,
                                   kind_of=lambda leaf: leaf.kind)
            segments.append(formatted)
    params = (("end", end), ("rows", True), ("segments", tuple(segments)), ("sep", sep),
              ("stream", "stdout"))
    effect = Effect("print", tuple(atoms), params, location)
    return effect, [np.asarray(buffer.value) for buffer in buffers]


class _Leaf:
    """A row buffer standing for a formatted value: its entry position and eager kind."""

    def __init__(self, position, kind):
        self.position, self.kind = position, kind
