"""Int attributes that count a loop's trips: ``for _ in range(self.n_iter)``.

Raschka's classifiers keep their epoch count on the object (``Perceptron(n_iter=50)``,
``fit`` loops ``range(self.n_iter)``). An int read from an attribute is a setting, guarded
by value at every call, so each ``n_iter`` compiled a program of its own where
``range(len(X))`` is one loop for every length (a variant per value, past ``max_variants``
eager calls).

As torch.compile makes an int dynamic once it changes, an int attribute a jit function's
traces read with two values is a *count attribute* of that function from then on (the
shape policy remembers the values by the attribute's path: ``count_attribute``): traces
read it as a run-time number input (``OutsideInputs.number_input``, read through its path
and type-checked at every call) where it is a trip count (``is_trip_count``), and a
top-level ``range`` over it is a count as an int argument's is
(``tracejit.tracer.loop_trip_counts``: a symbol bound at each call from the attribute's
value). A count under ``TRIP_LOW`` is traced as a setting (a program of its own, as
before).

Anything else that needs it as a Python int (a shape, a slice bound, a loop that is not
captured: ``pin``) makes it a setting for good (the trace starts again:
``CountPinned``), so no use escapes the guards. Settings of other kinds (a flag, a float)
are never read so.

>>> import numpy as np
>>> from tracejit import jit
>>> class Descent:
...     def __init__(self, n_iter):
...         self.n_iter = n_iter
...     def fit(self, x):
...         w = np.zeros(3)
...         for _ in range(self.n_iter):
...             w = w - 0.1 * (w - x)
...         return w
>>> model = Descent(40)
>>> f = jit(model.fit, cache="memory")
>>> results = []
>>> for n in (40, 50, 60, 70):
...     model.n_iter = n
...     results.append(np.allclose(f(np.ones(3)), Descent(n).fit(np.ones(3))))
>>> all(results), f.stats()["compiles"]   # the first value, then one for every count
(True, 2)
"""

from __future__ import annotations

from . import loop_trip_counts
from .attribute_writes import NumberState


class CountPinned(NumberState):
    """A count attribute was needed as a Python int: trace again, with it a setting."""


def read(context, owner, path, value):
    """The run-time input a trace reads ``owner.<name>`` (at ``path``) as, when it is a
    count attribute; else None (a setting, guarded by value)."""
    policy = getattr(context, "count_policy", None)
    if policy is None or type(value) is not int or not path.steps or path.steps[-1][0] != (
            "attr") or getattr(context, "unroll_loops", False):
        return None
    if not policy.count_attribute(str(path), value) or not (
            loop_trip_counts.is_trip_count(value)):
        return None
    tracer = context.number_input(owner, path, value)
    context.trip_counts.attributes[tracer.ir_var.name] = str(path)
    return tracer


def leaves(context):
    """``{input name: leaf}`` of the count attributes this trace reads."""
    return {name: ("attribute", name) for name in context.trip_counts.attributes}


def is_attribute(counted_leaf):
    return type(counted_leaf) is tuple and counted_leaf[:1] == ("attribute",)


def pin(context, counted_leaves):
    """The count attributes among ``counted_leaves`` are needed as Python ints: settings
    from now on (raises ``CountPinned``), unless this trace cannot start again (another
    path of a variant: the guard stays a guard)."""
    wheres = [context.trip_counts.attributes[counted_leaf[1]] for counted_leaf in (
        counted_leaves) if is_attribute(counted_leaf)]
    policy = getattr(context, "count_policy", None)
    if not wheres or not hasattr(policy, "pin_count_attributes"):
        return
    policy.pin_count_attributes(wheres)
    raise CountPinned(f"{', '.join(wheres)} decides more than a loop's trip count")


def implicit_key(context, name):
    """The ``implicit_used`` key of the count attribute input ``name``."""
    return next(key for key, implicit in context.implicit_used.items()
                if context.inputs[implicit.input_index].name == name)
