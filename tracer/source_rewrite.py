"""The source rewrite: a model function's AST with what tracing must see routed through hooks.

``rewrite_tree(fn)`` parses ``fn``'s source (a lambda's too, found in its line or file)
and rewrites its body: loads from outside the function, calls, subscript and attribute
stores, in-place operators and ``for`` loops become calls of ``__tracejit__.<hook>``
(``HOOK``), the object ``tracejit.tracer.frontend.Hooks`` of the running trace. Nested
definitions stay as written. ``_Scope`` says which names are locals, parameters and
outside names; ``_Rewriter`` is the transformer. A function whose source cannot be read
raises ``RewriteUnavailable`` and runs as written.

>>> import ast
>>> def scale(x):
...     return x * FACTOR
>>> tree, source = rewrite_tree(scale)
>>> "__tracejit__.load(FACTOR" in ast.unparse(tree)
True
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import linecache
import sys
import textwrap
import types

from .deferred_text import defer_printed_text
from .dims import calls_for_the_user
from .errors import TraceError
from .hook_calls import HOOK, hook_call
from .if_selects import expand_if_selects
from .loop_attributes import hoist_attributes
from .loop_frontend import _range_call, rewrite_for
from .loop_sequences import expand_sequence_loops
from .unpacking import needs_split, split_targets
from .while_loops import mark_while_loops, rewrite_while, split_body

_MUTATING_METHODS = {
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
    "popitem", "add", "discard", "sort", "reverse", "fill", "put", "resize", "itemset",
}
_INPLACE = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
    ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul",
    ast.BitAnd: "and_", ast.BitOr: "or_", ast.BitXor: "xor", ast.LShift: "lshift",
    ast.RShift: "rshift",
}
# --- analysis ------------------------------------------------------------------------
class _Scope(ast.NodeVisitor):
    """Which names the function binds locally, which are parameters, which it declares
    ``global``/``nonlocal`` and writes."""

    def __init__(self, function_node):
        arguments = function_node.args
        self.parameters = {
            a.arg
            for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs
            + [arguments.vararg, arguments.kwarg]
            if a is not None
        }
        self.assigned, self.declared, self.problems = set(), {}, []
        for statement in function_node.body:
            self.visit(statement)

    def visit_Name(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.assigned.add(node.id)

    def visit_Global(self, node):
        for name in node.names:
            self.declared[name] = ("global", node.lineno)

    def visit_Nonlocal(self, node):
        for name in node.names:
            self.declared[name] = ("nonlocal", node.lineno)

    def visit_Yield(self, node):
        # A generator the model calls (regions of an image, minibatches) runs rewritten, its
        # hooks live while the traced loop consumes it; loops holding a yield stay Python
        # loops (loop_frontend.unsupported_statements). One that outlives the trace (the
        # jitted function's own) makes the call run eagerly: tracejit.tracer.generators.
        self.generic_visit(node)

    visit_YieldFrom = visit_Yield

    def visit_FunctionDef(self, node):
        self.assigned.add(node.name)  # nested functions are locals; their bodies are theirs

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node):
        pass

    def is_local(self, name):
        return name in self.assigned and name not in self.parameters and name not in self.declared

    def is_argument(self, name):
        """A parameter never rebound here: it holds the caller's object."""
        return name in self.parameters and name not in self.assigned

    def is_outside(self, name):
        """A global or closure variable (not a parameter, not assigned here)."""
        return name in self.declared or (
            name not in self.assigned and name not in self.parameters)


# --- rewriting -----------------------------------------------------------------------
def _is_hook(node):
    """Whether ``node`` is ``__tracejit__.<method>``."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
        node.value.id == HOOK)


def _computed_key(key):
    """A subscript key that may hold a traced array (not a constant, not a slice: those
    cannot be passed to a call as written)."""
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    return not any(isinstance(part, ast.Slice) for part in parts) and not all(
        isinstance(part, ast.Constant) for part in parts)


_EQUALITY = {ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in"}


@calls_for_the_user  # `n in {5, 6}` hashes a dim as the user's lookup (dims._from_user)
def compared(left, right, op):
    """``left <op> right`` for the ops of ``_EQUALITY``, as the user's code would: a dim
    hashed here (``n in {5, 6}``) is specialized to its value, as in the user's frame."""
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == "in":
        return left in right
    return left not in right


def _hook(method, *args, node):
    call = ast.Call(
        func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr=method, ctx=ast.Load()),
        args=list(args),
        keywords=[],
    )
    return ast.copy_location(call, node)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, scope, freevars):
        self.scope = scope
        self.freevars = set(freevars)

    def visit_FunctionDef(self, node):
        return node  # nested definitions run as written (their calls go through ours)

    def visit_ExceptHandler(self, node):
        # ``except Exception:`` in the model must not catch what tracejit raised to stop
        # the trace (NumPy would not have raised it): the handler starts with a check.
        self.generic_visit(node)
        node.body.insert(0, ast.copy_location(ast.Expr(_hook("caught", node=node)), node))
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_While(self, node):
        if getattr(node, "tracejit_while", False):
            return self._exit_loop(node)  # a data-dependent exit: a loop node
        self.generic_visit(node)
        return node

    def _exit_loop(self, node):
        """A loop with a data-dependent exit (``while_loops.rewrite_while``), with the
        attributes its body rebinds held in locals (``while True: self.theta += step``,
        tracer/loop_attributes.py)."""
        as_written = copy.deepcopy(node)
        hoisted = None if getattr(node, "tracejit_unhoisted", False) else hoist_attributes(
            node, self._fresh_name)
        if hoisted is None:
            return rewrite_while(self, node)
        node.tracejit_read_outside = getattr(node, "tracejit_read_outside", set()) | (
            node.tracejit_live_after)
        if split_body(as_written) is None:  # (it splits only with the attributes hoisted)
            as_written.tracejit_while = False
        return self._hoisted(hoisted, node, rewrite_while, as_written)

    def visit_For(self, node):
        if getattr(node, "tracejit_while", False):
            return self._exit_loop(node)  # for ... range(n): ... break
        if not _over_range(node) and isinstance(node.iter, (ast.Name, ast.Attribute,
                                                            ast.Subscript)):
            # for layer in model: a container class's own __iter__ runs rewritten, so the
            # layers it hands out keep their paths (Hooks.iterate)
            node.iter = ast.copy_location(ast.Call(
                func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="iterate",
                                   ctx=ast.Load()), args=[node.iter], keywords=[]), node.iter)
        as_written = copy.deepcopy(node)
        hoisted = hoist_attributes(node, self._fresh_name) if _over_range(node) and not (
            getattr(node, "tracejit_unhoisted", False)) else None
        if hoisted is None:
            return rewrite_for(self, node)  # loops over range(...) may become IR loops
        # self.h = ... in the body: a local for the loop (tracer/loop_attributes.py)
        return self._hoisted(hoisted, node, rewrite_for, as_written)

    def _hoisted(self, hoisted, node, rewrite, as_written):
        """``if <the attributes are plain>: <hoisted> else: <as_written>``, rewritten: the
        statements ``hoist_attributes`` put around loop ``node`` (the loop by ``rewrite``,
        the reads and stores of its attributes as any statement), and the loop as written
        (a property's setter, a ``__setattr__`` runs at every trip:
        ``loop_attributes.plain_attributes``)."""
        statements = []
        for statement in hoisted:
            visited = rewrite(self, statement) if statement is node else self.visit(statement)
            statements.extend(visited if isinstance(visited, list) else [visited])
        as_written.tracejit_unhoisted = True
        unhoisted = self.visit(as_written)
        test = hook_call("hoistable", *[
            ast.Tuple(elts=[ast.Name(id=root, ctx=ast.Load()), ast.Constant(attr)],
                      ctx=ast.Load()) for root, attr in node.tracejit_hoisted])
        choice = ast.If(test=self.visit(test), body=statements, orelse=(
            unhoisted if isinstance(unhoisted, list) else [unhoisted]))
        return ast.fix_missing_locations(ast.copy_location(choice, node))

    # Loads from outside the function (globals, closure cells, the arguments' attributes)
    # go through ``load``: arrays become traced implicit inputs there, and Python scalars
    # get entry guards, so nothing read from outside is frozen into compiled code.
    def _origin(self, node):
        """``(root kind, root name, steps)`` of a load chain rooted at a name, or None."""
        steps = []
        while True:
            if isinstance(node, ast.Attribute):
                steps.append(("attr", node.attr))
                node = node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and (
                isinstance(node.slice.value, (str, int))
            ):
                steps.append(("item", node.slice.value))
                node = node.value
            elif isinstance(node, ast.Name):
                break
            else:
                return None
        name = node.id
        if name in self.scope.parameters:
            kind = "param"
        elif self.scope.is_local(name) or name in self.scope.assigned:
            return None
        elif name in self.freevars:
            kind = "closure"
        else:
            kind = "global"
        return kind, name, tuple(reversed(steps))

    def _load(self, node, original):
        origin = self._origin(original)
        if origin is None and not isinstance(original, ast.Name):
            origin = ("expression", "", ())
        if origin is None:
            return node
        kind, name, steps = origin
        descriptor = ast.Tuple(elts=[ast.Constant(kind), ast.Constant(name),
                                     ast.Constant(steps)], ctx=ast.Load())
        return _hook("load", node, descriptor, node=original)

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load) or node.id in ("super", "__class__", HOOK):
            return node
        if node.id in self.scope.parameters or self.scope.is_local(node.id) or (
            node.id in self.scope.assigned
        ):
            # A local may name a NumPy buffer that a write through another name replaced
            # by its traced copy (b = a; b[0] = v; then a): read the copy.
            return _hook("local", node, node=node)
        return self._load(node, node)

    def visit_Attribute(self, node):
        if not isinstance(node.ctx, ast.Load) or _is_hook(node):
            return self.generic_visit(node)
        original = node
        node = self.generic_visit(ast.Attribute(value=node.value, attr=node.attr, ctx=node.ctx))
        ast.copy_location(node, original)
        if self._origin(original) is None and not (
                getattr(original, "called", False) and original.attr in _MUTATING_METHODS):
            # block.attn.W with block a local (for block in self.blocks), self.layers[i].f,
            # layer.activation(x): the hook reads the attribute, so an object found through
            # a path keeps it (Hooks.member); outs.append stays as the loop rewrites read it
            return _hook("member", node.value, ast.Constant(node.attr), node=original)
        return self._load(node, original)

    def visit_Subscript(self, node):
        if not isinstance(node.ctx, ast.Load):
            return self.generic_visit(node)
        original = node
        # Before visiting rewrites len(...): a key that may be a dim or the loop index.
        dim_key = _key_from_dims(node.slice) or _mentions(node.slice,
                                                          getattr(self, "loop_targets", ()))
        node = self.generic_visit(ast.Subscript(value=node.value, slice=node.slice,
                                                ctx=node.ctx))
        ast.copy_location(node, original)
        if dim_key:
            # hs[len(inputs) - 1]: a dim-valued key (a SymInt) finds no int key in a dict
            node = _hook("item_at", node.value, node.slice, node=original)
        elif _computed_key(node.slice):
            # np.eye(classes)[labels]: a NumPy array indexed by a traced one
            node = _hook("index", node.value, node.slice, node=original)
        return self._load(node, original)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            return node  # zero-argument super() needs the real frame
        if _is_hook(node.func):  # a hook call an earlier rewrite wrote (loop_sequences)
            return self.generic_visit(node)
        original = node.func
        original.called = True  # outs.append(h): the loop rewrites look for it as it is
        # self.ctx.update(...): the receiver as a load, so one from outside is known as such
        receiver = copy.deepcopy(original.value) if isinstance(original, ast.Attribute) else None
        appended = self._append_to_outside(original, node)
        if appended is not None:
            return appended
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(original, ast.Attribute)
            and original.attr in _MUTATING_METHODS
            and isinstance(original.value, ast.Name)
            and not self.scope.is_local(original.value.id)
        ):
            what = ast.Constant(f"{original.value.id}.{original.attr}(...)")
            owner = ast.Name(id=original.value.id, ctx=ast.Load())
            if (original.attr == "setdefault" and original.value.id in self.scope.parameters
                    and 1 <= len(node.args) <= 2 and not node.keywords):
                # config.setdefault('lr', 1e-2) in every course optimizer: no change when
                # the key is there
                return _hook("setdefault_argument", what, owner, *node.args, node=node)
            # neuron.update(I, dt) of the user's class passes the check (Hooks._own_method):
            # through Hooks.call, so the method runs rewritten as its other methods do
            return _then(_hook("outside_mutation", what, owner, node=node),
                         _hooked_call(func, node))
        if (isinstance(original, ast.Attribute) and original.attr == "setdefault"
                and 1 <= len(node.args) <= 2 and not node.keywords
                and _is_load_chain(original.value)):
            # self.config.setdefault("momentum", 0.9), c.setdefault(...) of a local name:
            # a read where the key is there, else a write the hook records or refuses
            what = ast.Constant(f"{ast.unparse(original)}(...)")
            return _hook("setdefault_argument", what, self.visit(receiver), *node.args,
                         node=node)
        if (isinstance(original, ast.Attribute) and original.attr in _MUTATING_METHODS
                and _is_load_chain(original.value)):  # self.history.append(loss)
            what = ast.Constant(f"{ast.unparse(original)}(...)")
            check = _hook("mutation_of", what, self.visit(receiver), node=node)
            return _then(check, _hooked_call(func, node))
        return _hooked_call(func, node)

    def _append_to_outside(self, original, node):
        """``LOSSES.append(loss)``, ``self.hs.append(h)``, ``self.d["Z"].extend(zs)`` on a
        list reached from a global, closure or parameter: ``Hooks.append_to`` gets the list
        as it is (not loaded: its contents are not guarded) and where it was found
        (tracer/list_appends.py). None for any other call."""
        if not (isinstance(original, ast.Attribute) and original.attr in ("append", "extend")
                and len(node.args) == 1 and not node.keywords
                and not isinstance(node.args[0], ast.Starred)
                and _is_load_chain(original.value)):
            return None
        origin = self._origin(original.value)
        if origin is None or (origin[0] == "param" and not origin[2]):
            return None  # a local's list, an argument's (part of the call's structure)
        kind, name, steps = origin
        descriptor = ast.Tuple(elts=[ast.Constant(kind), ast.Constant(name),
                                     ast.Constant(steps)], ctx=ast.Load())
        what = ast.Constant(f"{ast.unparse(original)}(...)")
        root_value = ast.Name(id=name, ctx=ast.Load())
        return _hook("append_to", what, ast.Constant(original.attr), root_value, descriptor,
                     self.visit(node.args[0]), node=node)

    def visit_Assign(self, node):
        if needs_split(node):  # self.h, self.c = h, c: one write per target
            statements = []
            for statement in split_targets(node, self._fresh_name):
                visited = self.visit(statement)
                statements.extend(visited if isinstance(visited, list) else [visited])
            return statements
        # The container's name, before visiting rewrites a global one into a load hook.
        name = _subscripted_name(node.targets[0]) if len(node.targets) == 1 else None
        target_text = ast.unparse(node.targets[0])  # the user's text, for messages
        nested = len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) and (
            isinstance(node.targets[0].value, ast.Subscript))
        written = ast.unparse(node.targets[0])
        self.generic_visit(node)
        if len(node.targets) != 1:
            return node
        target = node.targets[0]
        if nested:  # xs[t][k] = 1: the inner array may be NumPy and the index traced
            call = _hook("set_in", target.value, target.slice, node.value, node=node)
            return ast.copy_location(ast.Expr(call), node)
        if name is not None:
            return self._subscript_store(name, target, node.value, node, written)
        if isinstance(target, ast.Subscript):  # self.cache["x"] = x
            store = _hook("store_item", target.value, target.slice, node.value,
                          ast.Constant(f"{target_text} = ..."), node=node)
            return ast.copy_location(ast.Expr(store), node)
        if isinstance(target, ast.Attribute):  # self.cache = x
            store = _hook("set_attr", target.value, ast.Constant(target.attr), node.value,
                          ast.Constant(f"{target_text} = ..."), node=node)
            return ast.copy_location(ast.Expr(store), node)
        return node

    def visit_Delete(self, node):
        """``del self.cache``: a hook, so a compiled call deletes the attribute too;
        ``del self.cache["x"]``: a hook, so an outside dict is not changed unseen."""
        statements = []
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                call = _hook("del_attr", self.visit(target.value), ast.Constant(target.attr),
                             ast.Constant(f"del {ast.unparse(target)}"), node=node)
                statements.append(ast.copy_location(ast.Expr(call), node))
            elif isinstance(target, ast.Subscript):
                call = _hook("del_item", self.visit(target.value), self.visit(target.slice),
                             ast.Constant(f"del {ast.unparse(target)}"), node=node)
                statements.append(ast.copy_location(ast.Expr(call), node))
            else:
                statements.append(ast.copy_location(
                    ast.Delete(targets=[self.visit(target)]), node))
        return statements

    def _fresh_name(self):
        """A local name for a value the rewrite holds between statements."""
        self.fresh_names = getattr(self, "fresh_names", 0) + 1
        name = f"__tracejit_value{self.fresh_names}"
        self.scope.assigned.add(name)
        return name

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            # y is x: the trace's arrays are not NumPy's objects (Hooks.identical)
            return _hook("identical", node.left, node.comparators[0],
                         ast.Constant(isinstance(node.ops[0], ast.IsNot)), node=node)
        if len(node.ops) == 1 and type(node.ops[0]) in _EQUALITY:
            # layer == self.last, self.act in ACTIVATIONS: an object's default equality is
            # its identity, which the trace must guard (Hooks.compared)
            return _hook("compared", node.left, node.comparators[0],
                         ast.Constant(_EQUALITY[type(node.ops[0])]), node=node)
        return node

    def visit_AugAssign(self, node):
        name = _subscripted_name(node.target)
        written = ast.unparse(node)
        self.generic_visit(node)
        operation = ast.Constant(_INPLACE.get(type(node.op), ""))
        target = node.target
        if isinstance(target, ast.Name):
            value = _hook("inplace", ast.Name(id=target.id, ctx=ast.Load()), node.value,
                          operation, node=node)
            return ast.copy_location(
                ast.Assign(targets=[ast.Name(id=target.id, ctx=ast.Store())], value=value), node
            )
        if name is not None:
            if self.scope.is_outside(name):
                return self._outside_store(written, node)
            value = _hook("update_item", ast.Name(id=name, ctx=ast.Load()), target.slice,
                          node.value, operation, ast.Constant(self.scope.is_argument(name)),
                          node=node)
            return ast.copy_location(
                ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value), node
            )
        if isinstance(target, ast.Subscript):  # self.params["W"] -= lr * g
            update = _hook("update_item_in", target.value, target.slice, node.value,
                           operation, ast.Constant(written), node=node)
            return ast.copy_location(ast.Expr(update), node)
        if isinstance(target, ast.Attribute):  # self.W -= lr * dW
            update = _hook("update_attr", target.value, ast.Constant(target.attr), node.value,
                           operation, ast.Constant(written), node=node)
            return ast.copy_location(ast.Expr(update), node)
        return node

    def _subscript_store(self, name, target, value, node, written):
        if self.scope.is_outside(name):
            return self._outside_store(f"{written} = ...", node)
        call = _hook("set_item", ast.Name(id=name, ctx=ast.Load()), target.slice, value,
                     ast.Constant(self.scope.is_argument(name)), node=node)
        return ast.copy_location(
            ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=call), node
        )

    def _outside_store(self, written, node):
        """``GLOBAL[k] = v`` or ``+=``: compiled runs would skip the write, so the function
        runs eagerly (rebinding the name here would make it a local)."""
        return _refused_statement(written, node)


def _refused_statement(written, node):
    """The hook that refuses a write to outside state under tracing, then the write itself
    (eager runs of rewritten code, whose hook lets it through, still perform it)."""
    refusal = ast.Expr(_hook("outside_mutation", ast.Constant(written), node=node))
    return [ast.copy_location(refusal, node), node]


def _hooked_call(func, node):
    """``Hooks.call(func, *args, **kwargs)`` for the call ``node`` (its arguments visited)."""
    call = ast.Call(func=ast.Attribute(value=ast.Name(id=HOOK, ctx=ast.Load()), attr="call",
                                       ctx=ast.Load()),
                    args=[func, *node.args], keywords=node.keywords)
    return ast.copy_location(call, node)


def _then(first, second):
    """``(first, second)[1]``: an expression evaluating ``first``, then ``second``."""
    pair = ast.Tuple(elts=[first, second], ctx=ast.Load())
    return ast.copy_location(
        ast.Subscript(value=pair, slice=ast.Constant(1), ctx=ast.Load()), second)


def _key_from_dims(key):
    """A subscript key that may be a dim: it calls ``len`` or reads ``.shape`` (not a slice,
    which reads dims fine)."""
    if isinstance(key, (ast.Slice, ast.Tuple)):
        return False
    return any((isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
                and inner.func.id == "len") or (isinstance(inner, ast.Attribute)
                                                 and inner.attr == "shape")
               for inner in ast.walk(key))


def _mentions(node, names):
    return bool(names) and any(isinstance(inner, ast.Name) and inner.id in names
                               for inner in ast.walk(node))


def _over_range(loop):
    """``for t in range(...)`` or ``for t in reversed(range(...))``."""
    call = _range_call(loop.iter)
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and (
        call.func.id == "range")


def _is_load_chain(node):
    """``a.b[k].c``: attributes and constant items from a name (evaluating it twice, for
    a check and for the call, reads the same object)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            return False
        node = node.value
    return isinstance(node, ast.Name)


def _subscripted_name(target):
    """``name`` for an assignment target ``name[...]``, else None."""
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        return target.value.id
    return None


class RewriteUnavailable(Exception):
    """The function runs as written (no readable source, a lambda, ...)."""


@functools.lru_cache(maxsize=16)
def _file_lambdas(text, first_line=1):
    """The lambdas of a whole file's source (or of the part of it starting at line
    ``first_line``), parsed once per text: a file's lambdas in a list or call spanning lines
    each fall back to it (four lambdas: four parses)."""
    tree = ast.parse(text)
    if first_line != 1:
        ast.increment_lineno(tree, first_line - 1)
    return tuple(node for node in ast.walk(tree) if isinstance(node, ast.Lambda))


def _last_line(code):
    """The last source line ``code`` or a function nested in it covers (None if unknown)."""
    if hasattr(code, "co_positions"):
        ends = [end for _, end, _, _ in code.co_positions() if end is not None]
    else:  # Python 3.10: line numbers only, from co_lines
        ends = [line for _, _, line in code.co_lines() if line is not None]
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            ends.append(_last_line(constant))
    return None if not ends or None in ends else max(ends)


def _enclosing_definition(function, lines):
    """``(source, first line)`` of the module-level function that defines the lambda
    ``function`` (by its qualified name: ``make.<locals>.<lambda>``), or None. Parsing that
    definition instead of the whole file saves about 3 ms per file of 300 lines."""
    outer_name = function.__qualname__.split(".")[0]
    if outer_name == "<lambda>":
        return None
    outer = getattr(sys.modules.get(function.__module__), outer_name, None)
    code = getattr(outer, "__code__", None)
    if not isinstance(code, types.CodeType) or (
            code.co_filename != function.__code__.co_filename):
        return None
    first, last = code.co_firstlineno, _last_line(code)
    if last is None or not first <= function.__code__.co_firstlineno <= last:
        return None
    return "".join(lines[first - 1: last]), first


def _lambda_node(function, module, line=None, first_line=1):
    """The one lambda in ``module`` (a tree, or the text of a file from its line
    ``first_line``) with ``function``'s parameters (on ``line`` when given), as a ``def``."""
    code = function.__code__
    names = code.co_varnames[: code.co_argcount]
    lambdas = (_file_lambdas(module, first_line) if isinstance(module, str)
               else [node for node in ast.walk(module) if isinstance(node, ast.Lambda)])
    found = [node for node in lambdas
             if tuple(arg.arg for arg in node.args.args) == names
             and line in (None, node.lineno)]
    if len(found) > 1 and not hasattr(code, "co_positions"):  # Python 3.10: no columns
        raise RewriteUnavailable("the lambda's line holds other lambdas with its parameters")
    if len(found) > 1:  # the same parameters twice on a line: where its body starts
        starts = {(lineno, column) for lineno, _, column, _ in code.co_positions()}
        found = [node for node in found if (node.body.lineno, node.body.col_offset) in starts]
    if len(found) != 1:
        raise RewriteUnavailable("the lambda's line holds other lambdas with its parameters")
    lambda_node = copy.deepcopy(found[0])  # the rewriter edits it; the file's stays
    body = [ast.copy_location(ast.Return(value=lambda_node.body), lambda_node.body)]
    node = ast.FunctionDef(name="<lambda>", args=lambda_node.args, body=body,
                           decorator_list=[], returns=None)
    if sys.version_info >= (3, 12):
        node.type_params = []
    return ast.copy_location(node, lambda_node)


def _lambda_function_node(function, source, margin=0):
    """A lambda's ``def``: from its lines alone (``source``, dedented by ``margin``
    columns), or, where they do not parse on their own (a lambda inside a dict or call
    spanning lines), from its whole file.

    The lines' tree is put at the file's lines and columns before the lambda is looked
    for, so a line holding several lambdas with the same parameters (``fs = [lambda a:
    a + 1,`` then ``lambda a: a * 10`` below it) gives the one whose body the code starts
    at: the lines' own numbering took the next line's lambda for the first's."""
    line = function.__code__.co_firstlineno
    try:
        tree = ast.parse(source)
        ast.increment_lineno(tree, line - 1)
        for child in ast.walk(tree):
            if hasattr(child, "col_offset"):
                child.col_offset += margin
                child.end_col_offset += margin
        node = _lambda_node(function, tree, line)
    except (SyntaxError, RewriteUnavailable):
        filename = inspect.getsourcefile(function)
        lines = linecache.getlines(filename, function.__globals__) if filename else []
        node, enclosing = None, _enclosing_definition(function, lines)
        if enclosing is not None:
            text, first_line = enclosing
            try:
                node = _lambda_node(function, text, line, first_line)
            except (SyntaxError, RewriteUnavailable):
                node = None  # the whole file decides
        try:
            node = node or _lambda_node(function, "".join(lines), line)
        except SyntaxError:
            raise RewriteUnavailable("the lambda's source does not parse") from None
        source = "".join(lines[line - 1: node.end_lineno])
    return ast.fix_missing_locations(node), source


def _function_node(function):
    try:
        written = inspect.getsource(function)
    except (OSError, TypeError) as error:
        raise RewriteUnavailable(f"source unavailable: {error}") from None
    source = textwrap.dedent(written)
    if function.__code__.co_name == "<lambda>":
        margin = len(written.split("\n", 1)[0]) - len(source.split("\n", 1)[0])
        return _lambda_function_node(function, source, margin)
    try:
        module = ast.parse(source)
    except SyntaxError:
        raise RewriteUnavailable("the source snippet does not parse on its own") from None
    node = module.body[0] if module.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != function.__code__.co_name:
        raise RewriteUnavailable("source does not start with the function's def")
    # The snippet's line 1 is co_firstlineno (the first decorator's line, or the def's).
    ast.increment_lineno(node, function.__code__.co_firstlineno - 1)
    node.decorator_list = []
    return node, source


def rewrite_tree(function):
    """The rewritten ``FunctionDef`` of ``function`` and its original source."""
    node, source = _function_node(function)
    node = defer_printed_text(node)  # print("%f" % cost): the text made when printed
    node = expand_sequence_loops(node)  # for xt in x: by index when x is traced
    mark_while_loops(node)  # loops with a data-dependent exit, before any rewrite
    node = expand_if_selects(node)  # if x[i] == m: d[i] = g: a select when x is traced
    scope = _Scope(node)
    for name, (kind, line) in scope.declared.items():
        if name in scope.assigned:
            raise TraceError(
                f"{function.__code__.co_filename}:{line}: `{kind} {name}` is written inside "
                f"{function.__qualname__}; compiled runs would skip writes to outside state. "
                "Return the new value instead"
            )
    if scope.problems:
        line, message = scope.problems[0]
        raise TraceError(f"{function.__code__.co_filename}:{line}: {message}")
    # The body only: nested definitions stay as written.
    rewriter = _Rewriter(scope, function.__code__.co_freevars)
    rewriter.function_node = node  # loop capture reads which names are live after a loop
    rewritten = rewriter.generic_visit(node)
    # Last, so the rewrites above see operators as written (loop counters, dim keys).
    from .operator_calls import route_operators  # cycle: operator_calls -> rewritten_code
    rewritten = route_operators(rewritten)  # -> here
    if "__class__" in function.__code__.co_freevars:
        # Keep the __class__ cell that zero-argument super() reads.
        keep = ast.Expr(ast.Name(id="__class__", ctx=ast.Load()))
        rewritten.body.insert(0, ast.copy_location(keep, rewritten.body[0]))
    return ast.fix_missing_locations(rewritten), source
