"""A compiled call's result, as one generated function per output plan.

``variants.OutputPlan`` records how a program's outputs become the function's result: each
leaf's kind, the arguments returned as they are (``w -= lr * dw; return w``), outside
arrays updated in place and returned, views NumPy may copy, results NumPy makes from the
caller's array, the writes the call stores and the containers it hands back. Walking
those records at every call costs more than the call on a small model (most are empty);
``result_function`` writes the plan as straight-line Python instead, the way
``tracer/write_source.py`` writes the stores (their statements are inlined here), so a
call does only what its plan has:

    >>> import numpy as np
    >>> from tracejit.runtime.variants import OutputPlan
    >>> from tracejit.tracer import pytree
    >>> plan = OutputPlan(pytree.flatten((0, 0, 0))[1],
    ...                   [("array", 0), ("static", 7), ("array", 1)], {1: 1}, {2: 1})
    >>> result = result_function(plan)
    >>> x, w = np.zeros(2), np.ones(2)
    >>> y, seven, w_out = result((x + 1, w - 1), [x, w], lambda value: value)
    >>> seven, w_out is w, w
    (7, True, array([0., 0.]))
    >>> print(result.source)  # doctest: +ELLIPSIS
    def result(outputs, argument_leaves, wrap, arguments=None):
        _copy_into(argument_leaves[1], outputs[1])
        leaf0 = wrap(outputs[0])
        leaf1 = _K0
        leaf2 = argument_leaves[1]
        return (leaf0, leaf1, leaf2)
    <BLANKLINE>

Each step keeps ``OutputPlan``'s order: targets of aliased outside arrays are found before
the writes (one may rebind the place the array was read from), the writes are stored
before updated arguments are copied into, and a leaf's later rules override its earlier
ones (an alias, then an outside alias, then a refreshed view, then NumPy's result).
"""

from __future__ import annotations

import operator

import numpy as np

from tracejit.tracer import pytree, write_source
from tracejit.tracer.argument_writes import CallArguments, put_back
from tracejit.tracer.generated_code import Source
from tracejit.tracer.result_identity import numpy_result
from tracejit.tracer.tensor_methods import stored_outputs

from .tensor import copy_into, unwrap

# Nesting of a result's structure written as one expression (Python's parser refuses
# about 200 levels of brackets); a deeper one is rebuilt by ``pytree.unflatten``.
_MAX_DEPTH = 40

_NAMES = {"_CallArguments": CallArguments, "_copy_into": copy_into, "_unwrap": unwrap,
          "_asarray": np.asarray, "_ndarray": np.ndarray, "_array": np.array,
          "_may_share_memory": np.may_share_memory, "_numpy_result": numpy_result,
          "_diagonal": np.diagonal, "_put_back": put_back, "_unflatten": pytree.unflatten}


def result_function(plan, views=frozenset(), identity=None):
    """``result(outputs, argument_leaves, wrap, arguments=None)``: the result of a call
    under ``plan`` (a ``variants.OutputPlan``), as ``OutputPlan`` defines it; ``arguments``
    (``(args, kwargs)``) receive the writes. ``views``: program outputs that are NumPy
    views of inputs or of other outputs, copied first when ``wrap`` is not ``identity``
    (Tensor results get their own memory: ``variants.Path``)."""
    source = Source()
    source.bind(_NAMES)
    constant = source.constant
    source.add("def result(outputs, argument_leaves, wrap, arguments=None):", depth=0)
    wrapped = plan.wrapped
    views = frozenset(views) & wrapped  # (an ndarray result stays NumPy's view)
    if views:
        source.add(f"if wrap is not {constant(identity, 'I')}:")
        source.add(f"    outputs = [_array(value) if index in {constant(views, 'V')} "
                   "else value for index, value in enumerate(outputs)]")
    stored = sorted(wrapped & stored_outputs(plan.writes))
    if stored:  # Tensors eagerly that the writes store (self.last = h under no_grad)
        source.add("outputs = list(outputs)")
        for index in stored:
            source.add(f"outputs[{_index(index)}] = wrap(outputs[{_index(index)}])")
    if plan.writes:
        source.add("arguments = _CallArguments(arguments)  # (flattened once, if anything asks)")
    for position, write in plan.outside_aliases.items():
        source.add(f"aliased{_index(position)} = {constant(plan.writes[write], 'W')}"
                   ".target(arguments)")
    if plan.writes:
        known = plan.argument_tree is not None and plan.argument_tree.kind == "tuple" and len(
            plan.argument_tree.children) == 2  # (args, kwargs)
        write_source.add_statements(source, plan.writes, write_source.argument_leaf_text(
            plan.argument_tree, constant) if known else None)
    for position, index in plan.mutated.items():
        source.add(f"_copy_into(argument_leaves[{_index(position)}], "
                   f"outputs[{_index(index)}])")
    replaced = plan.aliases.keys() | plan.outside_aliases.keys()
    names = [f"leaf{position}" for position in range(len(plan.leaves))]
    for position, (kind, value) in enumerate(plan.leaves):
        if position not in replaced:  # (else nothing of this one is seen)
            _leaf_statements(source, names[position], kind, value, value in wrapped)
    for position, argument in plan.aliases.items():
        source.add(f"leaf{_index(position)} = argument_leaves[{_index(argument)}]")
    for position in plan.outside_aliases:
        source.add(f"leaf{_index(position)} = aliased{_index(position)}")
    for position, (argument, index) in plan.refreshed.items():
        leaf = f"leaf{_index(position)}"
        source.add(f"if not _may_share_memory(_unwrap({leaf}), _unwrap(argument_leaves["
                   f"{_index(argument)}])):  # (a copy is new memory)")
        source.add(f"    {leaf} = {_wrapped_text(index, wrapped)}")
    for position, (argument, kind, params) in plan.numpy_results.items():
        leaf = f"leaf{_index(position)}"
        if argument is None:  # (self.W itself, or the wrapper's view of x)
            source.add(f"{leaf} = _numpy_result({constant(kind)}, {constant(params)}, {leaf})")
        elif kind == "diagonal":
            source.add(f"{leaf} = _diagonal(argument_leaves[{_index(argument)}], "
                       f"*{constant(params)})")
        else:
            source.add(f"if argument_leaves[{_index(argument)}].flags.c_contiguous:")
            source.add(f"    {leaf} = argument_leaves[{_index(argument)}]")
    if _depth(plan.tree) <= _MAX_DEPTH:
        built = _tree_text(plan.tree, iter(names), constant)
    else:
        built = f"_unflatten({constant(plan.tree)}, [{', '.join(names)}])"
    if plan.containers:
        built = f"_put_back({built}, {constant(plan.containers)}, arguments)"
    source.add(f"return {built}")
    return source.define("result", "result")


def _index(value):
    """An int (a position, an output's index) as text; anything else is refused."""
    return str(operator.index(value))


def _wrapped_text(index, wrapped):
    """The text of program output ``index`` as the result holds it: made a Tensor by
    ``wrap`` when it is one eagerly (in ``wrapped``: ``OutputPlan.wrapped``)."""
    text = f"outputs[{_index(index)}]"
    return f"wrap({text})" if index in wrapped else text


def _leaf_statements(source, name, kind, value, tensor):
    """Bind ``name`` to the result leaf ``(kind, value)`` (an ``OutputPlan.leaves`` item);
    ``tensor``: whether it is a Tensor eagerly."""
    if kind == "static":
        source.add(f"{name} = {source.constant(value)}")
    elif kind == "scalar":
        # A Tensor stays a (0-d) Tensor: it may carry the autograd graph. (a dim NumPy
        # computed, np.prod(x.shape), comes as an int: an np.int64)
        source.add(f"item = outputs[{_index(value)}]")
        source.add(f"{name} = item if hasattr(item, 'requires_grad') else "
                   + ("wrap(_asarray(item)[()])" if tensor else "_asarray(item)[()]"))
    elif kind == "value":  # a Python scalar (a run-time scalar input, or from one)
        source.add(f"item = outputs[{_index(value)}]")
        source.add(f"{name} = item.item() if type(item) is _ndarray else item")
    else:
        source.add(f"{name} = {_wrapped_text(value, {value} if tensor else ())}")


def _depth(tree):
    return 0 if tree.kind == "leaf" else 1 + max(map(_depth, tree.children), default=0)


def _tree_text(tree, names, constant):
    """``pytree.unflatten(tree, leaves)`` as one expression over the leaves' ``names``
    (an iterator), as ``pytree._build`` builds each kind of node."""
    if tree.kind == "leaf":
        return next(names)
    children = [_tree_text(child, names, constant) for child in tree.children]
    listed = ", ".join(children)
    if tree.kind == "rows":  # keys: a loop_rows.RowsLayout, which makes the list
        return f"{constant(tree.keys)}.build([{listed}])"
    if tree.kind == "dict":
        items = ", ".join(f"{constant(key)}: {child}" for key, child in zip(tree.keys, children))
        return f"{{{items}}}" if tree.mapping is None else f"{constant(tree.mapping)}({{{items}}})"
    if tree.kind == "list":
        return f"[{listed}]"
    if tree.keys is not None:  # a namedtuple's class
        return f"{constant(tree.keys)}({listed})"
    return f"({listed}{',' if len(children) == 1 else ''})"
