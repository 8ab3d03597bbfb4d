"""``read_relu_outputs(graph)``: a relu's backward mask compares the relu's output with 0,
not its input, so the input has one reader and the relu fuses into the matmul epilogue
that produces it.

A train step's backward masks the gradient with ``pre > 0`` (or ``pre <= 0``), where
``hidden = relu(pre)`` and ``pre = x @ w + b``. Read by the relu and by the mask, ``pre``
needed a buffer: the matmul wrote its product, a pointwise kernel applied bias and relu,
and the backward's epilogue read the product again. For ``hidden = where(pre <= 0, 0,
pre)`` (``nn.relu``) and ``hidden = maximum(pre, 0)``, ``hidden > 0`` is ``pre > 0`` and
``hidden <= 0`` is ``pre <= 0`` for every ``pre``, NaN and -0.0 included (a NaN passes
through both relus and compares false either way); ``<``, ``>=`` and ``==`` differ (at
``pre < 0`` the output is 0), so they are left alone. ``hidden`` is a buffer anyway: the
next layer's matmul reads it.

>>> import numpy as np
>>> from tracejit.tracer import trace
>>> def step(pre, g):
...     hidden = np.where(pre <= 0, 0, pre)
...     return hidden, np.where(pre > 0, g, 0)
>>> graph = read_relu_outputs(trace(step, np.ones(4), np.ones(4)).graph)
>>> [eqn.prim.name for eqn in graph.equations if graph.inputs[0] in eqn.inputs]
['less_equal', 'where']
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracejit.tracer.ir import Eqn, Literal, Var
from tracejit.tracer.ops import greater_equal_p, greater_p, less_equal_p, less_p, maximum_p, where_p

# Comparisons with 0 that give the same answer on a relu's output as on its input, as
# (primitive, position of the compared value); the other operand is the literal 0.
SAME_ON_OUTPUT = {(greater_p, 0), (less_p, 1), (less_equal_p, 0), (greater_equal_p, 1)}


def _is_zero(atom):
    return (isinstance(atom, Literal) and isinstance(atom.value, (bool, int, float, np.number))
            and not isinstance(atom.value, (bool, np.bool_)) and atom.value == 0)


def _relu_input(eqn, producers):
    """``pre`` if ``eqn`` is ``where(pre <= 0, 0, pre)`` or ``maximum(pre, 0)`` (either
    operand order), else None."""
    if eqn.prim is maximum_p:
        first, second = eqn.inputs
        if _is_zero(second) and isinstance(first, Var):
            return first
        if _is_zero(first) and isinstance(second, Var):
            return second
        return None
    if eqn.prim is not where_p:
        return None
    condition, if_true, if_false = eqn.inputs
    test = producers.get(condition.name) if isinstance(condition, Var) else None
    if test is None or not _is_zero(if_true) or not isinstance(if_false, Var):
        return None
    if test.prim is less_equal_p and tuple(test.inputs) == (if_false, test.inputs[1]):
        return if_false if _is_zero(test.inputs[1]) else None
    if test.prim is greater_equal_p and tuple(test.inputs) == (test.inputs[0], if_false):
        return if_false if _is_zero(test.inputs[0]) else None
    return None


def _compared_with_zero(eqn):
    """The position of the value ``eqn`` compares with 0 if it is one of
    ``SAME_ON_OUTPUT``, else None."""
    if len(eqn.inputs) != 2:
        return None
    for prim, position in SAME_ON_OUTPUT:
        if eqn.prim is prim and _is_zero(eqn.inputs[1 - position]):
            return position
    return None


def read_relu_outputs(graph):
    """``graph`` with each mask ``pre > 0`` / ``pre <= 0`` that follows the relu of ``pre``
    comparing the relu's output instead. A reader of the relu's own test (``pre <= 0``,
    shared with the mask after common subexpressions were merged, or read by the VJP of
    ``where``) gets a new equation, the same test on the output."""
    producers, body = {}, []
    relus = {}  # pre's name -> relu output
    own_tests = {}  # a relu's own test's name -> (relu output, the relu's name)
    retested = {}  # own test's name -> the same test on the relu's output
    names = [var.name for var in graph.inputs] + [var.name for var, _ in graph.constants]
    names += [eqn.out.name for eqn in graph.equations]
    # New vars are numbered past every name: the IR text round-trips only "%<number>".
    taken = [1 + max([int(name[1:]) for name in names if name[1:].isdigit()], default=-1)]
    for item in graph.body:
        if isinstance(item, Eqn):
            item = _read_output(item, relus, own_tests, retested, body, taken)
            producers[item.out.name] = item
            pre = _relu_input(item, producers)
            if pre is not None and pre.name not in relus and item.out.aval == pre.aval:
                relus[pre.name] = item.out
                if item.prim is where_p:
                    own_tests[item.inputs[0].name] = (item.out, item.out.name)
        body.append(item)
    return replace(graph, body=tuple(body))


def _read_output(eqn, relus, own_tests, retested, body, taken):
    """``eqn`` reading relu outputs where it may (see ``read_relu_outputs``); a test it
    needs on an output is appended to ``body`` first, named by ``taken`` (the next free
    var number, advanced)."""
    position = _compared_with_zero(eqn)
    compared = eqn.inputs[position] if position is not None else None
    if isinstance(compared, Var) and compared.name in relus:
        inputs = list(eqn.inputs)
        inputs[position] = relus[compared.name]
        return replace(eqn, inputs=tuple(inputs))
    inputs = list(eqn.inputs)
    for index, atom in enumerate(inputs):
        if not isinstance(atom, Var) or atom.name not in own_tests:
            continue
        output, relu_name = own_tests[atom.name]
        if eqn.out.name == relu_name:
            continue
        if atom.name not in retested:
            test = _producer_in(body, atom.name)
            name = f"%{taken[0]}"
            taken[0] += 1
            tested = [output if isinstance(value, Var) else value for value in test.inputs]
            retest = replace(test, inputs=tuple(tested), out=Var(name, atom.aval))
            body.append(retest)
            retested[atom.name] = retest.out
        inputs[index] = retested[atom.name]
    return replace(eqn, inputs=tuple(inputs))


def _producer_in(body, name):
    return next(item for item in reversed(body) if isinstance(item, Eqn) and item.out.name == name)
