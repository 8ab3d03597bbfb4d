"""The front end's side of loop capture: which names a ``for`` loop carries and the
rewrite of the loop into a ``loop`` hook call (``tracejit.tracer.loops`` runs it).

``frontend._Rewriter.visit_For`` hands each ``for`` to ``rewrite_for``, which finds the
carried names (``loop_variables``, AutoGraph-style: assigned in the body and read before
assignment in it or read anywhere outside the loop) and, for a loop over ``range`` that
may be captured, rewrites it into ``names = __tracejit__.loop(range, args, body, names,
locals())`` with the body as a nested function of ``(t, *carried)``; a loop it leaves as
written gets a ``loop_note`` hook call saying why (``explain()``).
"""

from __future__ import annotations

import ast

from .hook_calls import hook_call, is_hook_call
from .loop_effects import mark_conditional_effects
from .loop_prints import rewrite_selected_prints
from .loop_selected_appends import rewrite_selected_appends


# --- front end: which names a loop carries -----------------------------------------------
class _Names(ast.NodeVisitor):
    def __init__(self):
        self.loaded, self.stored = set(), set()

    def visit_Name(self, node):
        (self.loaded if isinstance(node.ctx, ast.Load) else self.stored).add(node.id)

    def visit_Expr(self, node):
        # Y[i][labels[i]] = 1 (the front end's set_in hook): a write into Y through a view
        # no name holds, so Y is written in place like Y[i, labels[i]] = 1 (carried)
        if is_hook_call(node.value, "set_in") and node.value.args and (
                root := _subscript_root(node.value.args[0])) is not None:
            self.stored.add(root)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        _nested_body_names(self, node)

    def visit_Call(self, node):
        _nested_hook_reads(self, node)
        self.generic_visit(node)


def _subscript_root(node):
    """``Y`` of ``Y[i]`` or ``Y[i][j]`` (as written, or as the front end's ``index``,
    ``item_at``, ``load`` and ``local`` hook calls), else None."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif node.args if any(is_hook_call(node, name) for name in (
                "index", "item_at", "load", "local")) else False:
            node = node.args[0]
        else:
            return node.id if isinstance(node, ast.Name) else None


def _names(nodes):
    visitor = _Names()
    for node in nodes:
        visitor.visit(node)
    return visitor


def _nested_body_names(visitor, node):
    """A nested loop's body function (``def __tracejit_loop_<line>``, already rewritten:
    the front end rewrites inner loops first) is its own scope: the names it assigns are
    its locals, not the enclosing loop's (``window`` assigned in a ``j`` loop nested in an
    ``i`` loop is not carried by the ``i`` loop); the names it reads and does not assign
    are read from the enclosing body."""
    inner = _names(node.body)
    params = {arg.arg for arg in node.args.args}
    visitor.loaded |= inner.loaded - inner.stored - params
    visitor.stored.add(node.name)


def _nested_hook_reads(visitor, node):
    """``__tracejit__.loop(range, args, body, ("out", ...), locals(), line)`` reads the
    names it carries through ``locals()``: they are loads of the enclosing body."""
    if ((is_hook_call(node, "loop") or is_hook_call(node, "while_loop"))
            and len(node.args) >= 4 and isinstance(node.args[3], ast.Tuple)):
        visitor.loaded |= {element.value for element in node.args[3].elts
                           if isinstance(element, ast.Constant)
                           and isinstance(element.value, str)}


def _read_before_write(statements):
    """Names a straight-line walk of ``statements`` reads before it assigns them."""
    return _walk_straight_line(statements, set())[0]


def _walk_straight_line(statements, assigned):
    """``(names read before assigned, names assigned)`` over ``statements``, starting with
    ``assigned``. An ``if`` reads its test, then either branch; what both branches assign
    is assigned after it (the expanded loops of ``loop_sequences``/``loop_while`` are
    ``if``s whose branches each define and call their body function)."""
    assigned, early = set(assigned), set()
    for statement in statements:
        if isinstance(statement, ast.If):
            early |= _names([statement.test]).loaded - assigned
            body_early, body_assigned = _walk_straight_line(statement.body, assigned)
            else_early, else_assigned = _walk_straight_line(statement.orelse, assigned)
            early |= body_early | else_early
            assigned |= body_assigned & else_assigned
            continue
        if isinstance(statement, (ast.For, ast.While)) and not statement.orelse:
            # its head, then its body (which may not run: it assigns nothing after it)
            head = [statement.test] if isinstance(statement, ast.While) else [statement.iter]
            early |= _names(head).loaded - assigned
            inner = assigned | (_names([statement.target]).stored
                                if isinstance(statement, ast.For) else set())
            early |= _walk_straight_line(statement.body, inner)[0]
            continue
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            early |= _names([statement.value]).loaded - assigned
            if isinstance(statement, ast.AugAssign):
                early |= _names([statement.target]).stored - assigned
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]
            early |= _names(targets).loaded - assigned  # hs in hs[t] = ...
            assigned |= _names(targets).stored
        else:
            early |= _names([statement]).loaded - assigned
            if isinstance(statement, ast.FunctionDef):  # a nested loop's body function
                assigned.add(statement.name)
    return early, assigned


def unsupported_body(node):
    """Why the loop ``node`` (an ``ast.For``) cannot become a helper call, or None."""
    if node.orelse:
        return "a for-else loop"
    if not isinstance(node.target, ast.Name):
        return "the loop target is not a single name"
    iterator = _range_call(node.iter)
    if not (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "range" and not iterator.keywords
            and 1 <= len(iterator.args) <= 3):
        return "not a loop over range(...) or reversed(range(...))"
    return unsupported_statements(node, effects=True, attributes=True)


def unsupported_statements(node, effects=False, attributes=False):
    """What in the body of the loop ``node`` keeps it from becoming a body function
    (``break``, a call for its side effect, ...), or None. The as-written fallbacks of
    counted ``while`` loops (``tracejit.tracer.loop_while``) do not count: the counted
    twin runs where capture can happen. With ``effects``, calls under an ``if`` that
    ``loop_effects.mark_conditional_effects`` marked pass (their hook refuses a trial
    that reaches them). With ``attributes``, ``self.cost_.append(x)`` and ``self.w = ...``
    pass: a counted loop's trips carry them (``loop_attribute_carries``); a loop with an
    exit (``while_loops``) carries none, and its trials would leave them written."""
    for inner in _walk_past_fallbacks(node):
        if isinstance(inner, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom,
                              ast.Global, ast.Nonlocal, ast.FunctionDef, ast.Lambda,
                              ast.ClassDef, ast.AsyncFunctionDef, ast.Await, ast.Delete,
                              ast.Try, ast.With, ast.While)):
            return f"the body has {type(inner).__name__.lower()}"
        if isinstance(inner, ast.Expr) and not isinstance(inner.value, ast.Constant) and not (
            _appended(inner.value) or attributes and _appended_to_attribute(inner.value)
            or _printed(inner.value)
            or effects and getattr(inner, "tracejit_effect", False)
        ):
            return "the body has an expression statement (a call for its side effect)"
        if isinstance(inner, (ast.Assign, ast.AugAssign)):
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store) and (
                            not (attributes and _rooted_at_a_name(part))):
                        return "the body assigns an attribute"
                    if isinstance(part, ast.Starred):
                        return "the body has a starred assignment"
    return None


def _rooted_at_a_name(attribute):
    """``self.w`` or ``self.layer.b``: an attribute of an object a name holds, which the
    trace carries when the loop writes it (``tracejit.tracer.loop_attribute_carries``; a
    write it does not carry refuses the capture at trace time, and the loop unrolls)."""
    owner = attribute.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return isinstance(owner, ast.Name)


def _walk_past_fallbacks(node):
    """``ast.walk(node)`` without the subtrees of nodes marked ``tracejit_fallback``, nor the
    loops with a data-dependent exit ``tracejit.tracer.while_loops`` captures (marked
    ``tracejit_while``)."""
    pending = [node]
    while pending:
        item = pending.pop()
        yield item
        pending.extend(child for child in ast.iter_child_nodes(item)
                       if not getattr(child, "tracejit_fallback", False)
                       and not getattr(child, "tracejit_while", False))


def _range_call(iterator):
    """``range(...)`` of ``for t in range(...)`` or ``for t in reversed(range(...))``."""
    if (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "reversed" and len(iterator.args) == 1
            and not iterator.keywords):
        return iterator.args[0]
    return iterator


def _appended(call):
    """The list name of ``name.append(value)``, else None."""
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
            and len(call.args) == 1 and not call.keywords):
        return call.func.value.id
    return None


def _appended_to_attribute(call):
    """``self.cost_.append(value)``: an append to a list an object keeps (carried by the
    loop at trace time, ``tracejit.tracer.loop_attribute_carries``, or refused there)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "append" and len(call.args) == 1 and not call.keywords):
        return False
    owner = call.func.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return isinstance(owner, ast.Name) and isinstance(call.func.value, ast.Attribute)


def _printed(call):
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and (
        call.func.id == "print")


def _appended_names(statements):
    """Lists the body appends to (``outs.append(h)``, also once rewritten to
    ``__tracejit__.call(outs.append, h)``): carried like assigned names."""
    names = set()
    for statement in statements:
        for inner in ast.walk(statement):
            if isinstance(inner, ast.Attribute) and inner.attr == "append" and isinstance(
                inner.ctx, ast.Load
            ):
                name = _local_name(inner.value)
                if name is not None:
                    names.add(name)
            elif ((is_hook_call(inner, "append_when") or is_hook_call(inner, "print_when"))
                  and inner.args):
                name = _local_name(inner.args[0])  # tracejit.tracer.loop_selected_appends
                if name is not None:
                    names.add(name)
    return names


def _local_name(node):
    """The name ``node`` reads: ``outs``, also once the front end has rewritten the load
    to ``__tracejit__.local(outs)``; else None."""
    if is_hook_call(node, "local") and len(node.args) == 1:
        node = node.args[0]
    return node.id if isinstance(node, ast.Name) else None


def _loop_node_ids(node):
    """``id`` of every node of the loop ``node``. A loop over an array's rows runs by index
    or, for other sequences, as written (tracejit.tracer.loop_sequences): the written twin
    is part of the loop too."""
    inside = {id(n) for n in ast.walk(node)}
    twin = getattr(node, "tracejit_twin", None)
    if twin is not None:
        inside.update(id(n) for n in ast.walk(twin))
    return inside


def loop_variables(node, function_node, inside=None, names=None):
    """The names the loop ``node`` carries, in a stable order. ``inside``
    (``_loop_node_ids(node)``) and ``names`` (the ``ast.Name`` nodes of ``function_node``)
    when the caller has them already: each is a walk of the function."""
    body = _names(node.body)
    inside = _loop_node_ids(node) if inside is None else inside
    if names is None:
        names = [n for n in ast.walk(function_node) if isinstance(n, ast.Name)]
    live_after = {n.id for n in names if isinstance(n.ctx, ast.Load) and id(n) not in inside}
    live_after |= getattr(node, "tracejit_live_after", set())  # hoisted attributes
    assigned = body.stored - {node.target.id}
    early = _read_before_write(node.body)
    carried = assigned & (live_after | early)
    # a list the body appends to, unless each trip binds it anew before using it and
    # nothing reads it after the loop (gy910210's forward = [(None, None, X)], appended
    # per layer: the list of one trip)
    carried |= {name for name in _appended_names(node.body) - {node.target.id}
                if name not in assigned or name in live_after or name in early}
    return sorted(carried)


# --- the front end's rewrite ---------------------------------------------------------


def _noted(node, reason):
    """``node`` as written, after a hook call that notes why it is not captured (for loops
    over ``range``; other loops are not candidates)."""
    if reason.startswith("not a loop over range"):
        return node
    note = ast.Expr(hook_call("loop_note", ast.Constant(node.lineno), ast.Constant(reason)))
    return [ast.fix_missing_locations(ast.copy_location(note, node)), node]


def rewrite_for(rewriter, node):
    """``node`` (an ``ast.For``) with its body rewritten by ``rewriter``, and, when it is a
    loop over ``range`` that may be captured, turned into a ``loop`` hook call."""
    if getattr(rewriter, "function_node", None) is not None:
        mark_conditional_effects(node)  # if callback is not None: callback(i, w)
    reason = unsupported_body(node)
    reversed_loop = _range_call(node.iter) is not node.iter  # before visiting rewrites it
    if reason is None and any(isinstance(arg, ast.Starred)
                              for arg in _range_call(node.iter).args):
        reason = "starred range arguments"
    # Subscripts whose key mentions the index go through item_at (a Python list read at
    # it specializes the index: tracejit.tracer.loop_index refuses the capture).
    targets = getattr(rewriter, "loop_targets", ())
    if isinstance(node.target, ast.Name):
        # (and enumerate's index, bound from it: tracejit.tracer.loop_sequences)
        rewriter.loop_targets = (*targets, node.target.id,
                                 *getattr(node, "tracejit_index_names", ()))
    scope = getattr(rewriter, "scope", None)
    if reason is None and isinstance(node.target, ast.Name) and scope is not None:
        # if i % 100 == 0: costs.append(cost) -> an append_when hook call (a local list
        # only: an argument's or a global's append is the rewriter's outside_mutation)
        rewrite_selected_appends(
            node, lambda statements: _walk_straight_line(statements, set())[1],
            scope.is_local)
        # if i % 100 == 0: print(...) -> a print_when hook call, its rows printed after
        around = rewrite_selected_prints(
            node, lambda statements: _walk_straight_line(statements, set())[1], scope)
        if around is not None:
            before, after = around
            rewriter.generic_visit(before)
            rewriter.generic_visit(after)
            result = _rewrite_for(rewriter, node, reason, reversed_loop, targets)
            return [before, *(result if isinstance(result, list) else [result]), after]
    return _rewrite_for(rewriter, node, reason, reversed_loop, targets)


def _rewrite_for(rewriter, node, reason, reversed_loop, targets):
    try:
        rewriter.generic_visit(node)
    finally:
        rewriter.loop_targets = targets
    function_node = getattr(rewriter, "function_node", None)
    if function_node is None:
        return node
    if reason is not None:
        return _noted(node, reason)
    in_loop = _loop_node_ids(node)
    inside = set(in_loop)
    # Other loops over the same name (a forward and a backward loop over t) rebind it
    # before they read it; so does a loop already rewritten into a body function of t.
    # (One walk of the function finds them and its names, which loop_variables reads too.)
    name_nodes = []
    for other in ast.walk(function_node):
        if isinstance(other, ast.Name):
            name_nodes.append(other)
            continue
        rebinds = isinstance(other, ast.For) and isinstance(other.target, ast.Name) and (
            other.target.id == node.target.id
        ) or isinstance(other, ast.FunctionDef) and node.target.id in {
            arg.arg for arg in other.args.args}
        if rebinds and other is not node:
            inside.update(id(inner) for inner in ast.walk(other))
    if any(n.id == node.target.id and id(n) not in inside for n in name_nodes):
        # Python leaves the index at its last value after the loop
        return _noted(node, f"the index `{node.target.id}` is read after the loop")
    names = loop_variables(node, function_node, in_loop, name_nodes)
    iterator = node.iter  # __tracejit__.call(<range>, *args) after the rewrite
    if not (isinstance(iterator, ast.Call) and iterator.args):
        return node
    reverse = ast.Constant(None)
    if reversed_loop:
        # __tracejit__.call(<reversed>, __tracejit__.call(<range>, *args))
        if len(iterator.args) != 2 or not (isinstance(iterator.args[1], ast.Call)
                                           and iterator.args[1].args):
            return node
        reverse, iterator = iterator.args[0], iterator.args[1]
    range_function, range_args = iterator.args[0], iterator.args[1:]
    body_name = f"__tracejit_loop_{node.lineno}"
    result = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Load()) for name in names],
                       ctx=ast.Load())
    definition = ast.FunctionDef(
        name=body_name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=node.target.id)]
                           + [ast.arg(arg=name) for name in names],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[*node.body, ast.Return(value=result)],
        decorator_list=[],
        returns=None,
    )
    call = hook_call(
        "loop", range_function, ast.Tuple(elts=list(range_args), ctx=ast.Load()),
        ast.Name(id=body_name, ctx=ast.Load()),
        ast.Tuple(elts=[ast.Constant(name) for name in names], ctx=ast.Load()),
        ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]),
        ast.Constant(node.lineno),
        keywords=[ast.keyword(arg="reverse", value=reverse)]
        if not (isinstance(reverse, ast.Constant) and reverse.value is None) else [],
    )
    if names:
        target = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Store()) for name in names],
                           ctx=ast.Store())
        statement = ast.Assign(targets=[target], value=call)
    else:
        statement = ast.Expr(value=call)
    for new in (definition, statement):
        ast.copy_location(new, node)
    return [ast.fix_missing_locations(definition), ast.fix_missing_locations(statement)]
