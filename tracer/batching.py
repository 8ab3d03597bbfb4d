"""Batching: a loop body's values with a leading axis over the loop index, as ``jax.vmap``.

``Batch`` emits the batched body (its values are ``(atom, batched)`` pairs: a batched atom
has a leading axis of length ``n``, item ``k`` being the body's value at index ``start +
k * step``), and ``RULES`` holds one batching rule per primitive: ``rule(batch, eqn,
args) -> atom``. A body a rule cannot batch raises ``NotBatchable`` with the reason.
``tracejit.tracer.loop_vectorize`` decides which loops are parallel maps and batches them
through these.

>>> affine_parts(DimExpr.symbol("i") * 3 + 2, "i")
(2, 3)
"""

from __future__ import annotations

import numpy as np

from .abstract import AbstractArray
from .dims import DimExpr
from .ir import Eqn, Graph, Var, infer_aval
from .ops.control import _evaluate
from .primitives import PRIMITIVES


class NotBatchable(Exception):
    """Why a loop is not a parallel map (it stays a loop)."""


# --- index arithmetic --------------------------------------------------------------------
def mentions(value, index):
    if isinstance(value, DimExpr):
        return index in value.symbols()
    if isinstance(value, tuple):
        return any(mentions(item, index) for item in value)
    if isinstance(value, Graph):
        return True  # a nested loop left in the body: no rule batches it
    return False


def affine_parts(value, index):
    """``value == a + c * index`` as ``(a, c)`` with ``c`` an int, or ``NotBatchable``."""
    if isinstance(value, int):
        return value, 0
    if not isinstance(value, DimExpr):
        raise NotBatchable(f"a parameter {value!r} is not an int")
    terms = dict(value.terms)
    coefficient = terms.pop((index,), 0)
    rest = DimExpr.make(terms) if terms else 0
    if mentions(rest, index):
        raise NotBatchable(f"{value} is not affine in the index")
    return rest, coefficient


# --- the batching context ----------------------------------------------------------------
class Names:
    """Fresh ``%N`` var names above every name in the graph (nested bodies included)."""

    def __init__(self, graph):
        self.next = _highest(graph) + 1

    def var(self, aval):
        var = Var(f"%{self.next}", aval)
        self.next += 1
        return var


def _highest(graph):
    highest = -1
    for var in list(graph.inputs) + [var for var, _ in graph.constants]:
        highest = max(highest, _number(var.name))
    for eqn in graph.equations:
        highest = max(highest, _number(eqn.out.name))
        for _, value in eqn.params:
            if isinstance(value, Graph):
                highest = max(highest, _highest(value))
    return highest


def _number(name):
    digits = name.lstrip("%")
    return int(digits) if digits.isdigit() else -1


class Batch:
    """Emits the batched body's equations. Values are ``(atom, batched)``: a batched atom
    has a leading axis of length ``n``, item ``k`` being the body's value at index
    ``start + k * step``.

    Symbolic (``bindings`` None, the pass): equations are recorded, their avals by the
    shape rules under ``context``. Concrete (``bindings`` maps every outer symbol to an
    int; ``run_batched``): each equation runs at once on NumPy values, ``values``."""

    def __init__(self, names, context, index, start, step, n, bindings=None):
        self.names, self.context = names, context
        self.index, self.start, self.step, self.n = index, start, step, n
        self.bindings = bindings
        self.emitted, self.values = [], {}

    def emit(self, prim, inputs, **params):
        if isinstance(prim, str):
            prim = PRIMITIVES[prim]
        if self.bindings is not None:
            return self._run(prim, inputs, params)
        try:
            aval = infer_aval(prim, inputs, params, self.context)
        except Exception as error:  # a shape the symbols' ranges do not decide
            raise NotBatchable(f"{prim.name} of the batch: {error}") from None
        out = self.names.var(aval)
        self.emitted.append(Eqn(prim, tuple(inputs), tuple(sorted(params.items())), out))
        return out

    def _run(self, prim, inputs, params):
        values = [self.values[atom.name] if isinstance(atom, Var)
                  else _evaluate(atom.value, self.bindings) for atom in inputs]
        concrete = {key: _evaluate(value, self.bindings) for key, value in params.items()}
        if prim.name == "multiply" and Product.fits(values):
            return self._lazy(Product(*values))  # the conv's window * filter: see sum
        if prim.name == "sum" and isinstance(values[0], Product) and not concrete["keepdims"]:
            return self.constant(values[0].sum(concrete["axes"]))
        values = [value.value() if isinstance(value, Product) else value for value in values]
        with np.errstate(all="ignore"):
            result = np.asarray(prim.impl(*values, **concrete))
        return self.constant(result)

    def _lazy(self, product):
        out = self.names.var(AbstractArray(product.shape, product.dtype))
        self.values[out.name] = product
        return out

    def write(self, buffer, atom, config):
        """Concrete writes: one copy of the buffer and a strided assignment (the symbolic
        form, ``where(pad(mask), pad(value), buffer)``, would pass over it four times)."""
        value = self.values[atom.name]
        value = value.value() if isinstance(value, Product) else value
        result = np.array(self.values[buffer.name])
        region = tuple(slice(low, low + (size - 1) * (interior + 1) + 1, interior + 1)
                       for (low, _, interior), size in zip(_evaluate(config, self.bindings),
                                                           np.shape(value)))
        result[region] = value
        return self.constant(result)

    def constant(self, value):
        """A var standing for the NumPy ``value`` (concrete mode)."""
        value = np.asarray(value)
        out = self.names.var(AbstractArray(value.shape, value.dtype))
        self.values[out.name] = value
        return out

    def moving(self, value):
        """``(base, delta)``: ``value`` at batch item ``k`` is ``base + delta * k``."""
        a, c = affine_parts(value, self.index)
        base = a + c * self.start
        if self.bindings is not None and isinstance(base, DimExpr):
            base = base.evaluate(self.bindings)
        return base, c * self.step

    def expand(self, atom, rank):
        """A batched ``atom`` with unit axes after the batch axis up to ``rank`` axes."""
        shape = atom.aval.shape
        if len(shape) >= rank:
            return atom
        return self.emit("reshape", [atom], shape=(shape[0], *(1,) * (rank - len(shape)),
                                                   *shape[1:]))

    def broadcast(self, atom):
        """An unbatched atom repeated ``n`` times along a new leading axis."""
        shape = atom.aval.shape
        return self.emit("broadcast_to", [atom], shape=(self.n, *shape))


# --- one rule per primitive --------------------------------------------------------------
# rule(batch, eqn, args) -> atom (batched); args are (atom, batched) pairs. Rules run when at
# least one input is batched or a parameter moves with the index.
RULES = {}


def rule(*names):
    def register(function):
        for name in names:
            RULES[name] = function
        return function
    return register


def _static(eqn, batch):
    if any(mentions(value, batch.index) for _, value in eqn.params):
        raise NotBatchable(f"{eqn.prim.name}'s parameters move with the index")


def _pointwise(batch, eqn, args):
    _static(eqn, batch)
    rank = len(eqn.out.aval.shape) + 1
    inputs = [batch.expand(atom, rank) if batched else atom for atom, batched in args]
    return batch.emit(eqn.prim, inputs, **eqn.params_dict)


for _name, _prim in PRIMITIVES.items():
    if _prim.kind == "pointwise":
        RULES[_name] = _pointwise


@rule("sum", "prod", "max", "min", "any", "all")
def _reduce(batch, eqn, args):
    _static(eqn, batch)
    params = eqn.params_dict
    params["axes"] = tuple(axis + 1 for axis in params["axes"])
    return batch.emit(eqn.prim, [args[0][0]], **params)


@rule("argmax", "argmin")
def _arg_reduce(batch, eqn, args):
    _static(eqn, batch)
    params = eqn.params_dict
    params["axis"] = params["axis"] + 1
    return batch.emit(eqn.prim, [args[0][0]], **params)


@rule("cumsum", "cumprod")
def _scan(batch, eqn, args):
    _static(eqn, batch)  # along the last axis: a leading batch axis leaves it last
    return batch.emit(eqn.prim, [args[0][0]])


@rule("reshape")
def _reshape(batch, eqn, args):
    _static(eqn, batch)
    return batch.emit("reshape", [args[0][0]], shape=(batch.n, *eqn.params_dict["shape"]))


@rule("transpose")
def _transpose(batch, eqn, args):
    _static(eqn, batch)
    perm = eqn.params_dict["perm"]
    return batch.emit("transpose", [args[0][0]], perm=(0, *(axis + 1 for axis in perm)))


@rule("broadcast_to")
def _broadcast_to(batch, eqn, args):
    _static(eqn, batch)
    shape = eqn.params_dict["shape"]
    source = batch.expand(args[0][0], len(shape) + 1)
    return batch.emit("broadcast_to", [source], shape=(batch.n, *shape))


@rule("flip")
def _flip(batch, eqn, args):
    _static(eqn, batch)
    axes = tuple(axis + 1 for axis in eqn.params_dict["axes"])
    return batch.emit("flip", [args[0][0]], axes=axes)


@rule("sliding_window")
def _sliding_window(batch, eqn, args):
    _static(eqn, batch)
    params = eqn.params_dict
    params["axes"] = tuple(axis + 1 for axis in params["axes"])
    return batch.emit("sliding_window", [args[0][0]], **params)


@rule("concatenate")
def _concatenate(batch, eqn, args):
    _static(eqn, batch)
    inputs = [atom if batched else batch.broadcast(atom) for atom, batched in args]
    return batch.emit("concatenate", inputs, axis=eqn.params_dict["axis"] + 1)


@rule("pad")
def _pad(batch, eqn, args):
    _static(eqn, batch)  # a pad that moves with the index is a write (handled apart)
    config = ((0, 0, 0), *eqn.params_dict["config"])
    return batch.emit("pad", [args[0][0]], config=config)


@rule("matmul")
def _matmul(batch, eqn, args):
    (a, a_batched), (b, b_batched) = args
    a_rank = len(a.aval.shape) - a_batched
    b_rank = len(b.aval.shape) - b_batched
    if (b_batched and b_rank < 2) or (a_batched and a_rank < 2 and (b_batched or b_rank != 2)):
        raise NotBatchable("matmul of a batched vector")
    if a_batched and a_rank < 2:
        return batch.emit("matmul", [a, b])  # (n, k) @ (k, p): the rows are the batch
    rank = max(a_rank, b_rank) + 1
    inputs = [batch.expand(atom, rank) if batched else atom for atom, batched in args]
    return batch.emit("matmul", inputs)


@rule("slice")
def _slice(batch, eqn, args):
    (source, batched), = args
    params = eqn.params_dict
    starts, limits, steps = params["starts"], params["limits"], params["steps"]
    moving = [axis for axis, (start, limit) in enumerate(zip(starts, limits))
              if mentions(start, batch.index) or mentions(limit, batch.index)]
    if not moving:
        if not batched:
            raise NotBatchable("slice: nothing batched")  # not reached: copied unbatched
        return batch.emit("slice", [source], starts=(0, *starts), limits=(batch.n, *limits),
                          steps=(1, *steps))
    if batched:
        raise NotBatchable("a slice that moves with the index of a value computed in the loop")
    if len(moving) > 1:
        raise NotBatchable("a slice that moves with the index along two axes")
    axis, = moving
    base, delta = batch.moving(starts[axis])
    limit_base, limit_delta = batch.moving(limits[axis])
    step = steps[axis]
    if limit_delta != delta or delta <= 0 or not isinstance(step, int):
        raise NotBatchable("a slice whose length changes with the index")
    count = eqn.out.aval.shape[axis]  # elements per window, every `step`
    extent = step * (count - 1) + 1  # a window's span
    # x[..., base + delta * k + step * m, ...]: windows of `extent` every `delta`, over the
    # span the batch reads, then every `step`-th element of each window.
    span = delta * (batch.n - 1) + extent
    starts2 = tuple(base if a == axis else s for a, s in enumerate(starts))
    limits2 = tuple(base + span if a == axis else limit for a, limit in enumerate(limits))
    steps2 = tuple(1 if a == axis else s for a, s in enumerate(steps))
    region = batch.emit("slice", [source], starts=starts2, limits=limits2, steps=steps2)
    windows = batch.emit("sliding_window", [region], axes=(axis,), sizes=(extent,),
                         strides=(delta,))
    rank = len(starts)
    if step != 1:
        shape = windows.aval.shape
        windows = batch.emit("slice", [windows], starts=(0,) * (rank + 1),
                             limits=shape, steps=(1,) * rank + (step,))
    # (..., n at axis, ..., window last) -> (n, ..., window at axis, ...)
    perm = [axis] + [rank if a == axis else a for a in range(rank)]
    return batch.emit("transpose", [windows], perm=tuple(perm))


class Product:
    """``a * b`` not yet computed: a ``sum`` over it runs as one ``np.einsum`` contraction
    (BLAS-backed) instead of materializing the broadcast product (the batched conv's
    ``windows * filters`` is 27x the output)."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.shape = np.broadcast_shapes(a.shape, b.shape)
        self.dtype = np.result_type(a, b)

    @staticmethod
    def fits(values):
        return (len(values) == 2 and all(isinstance(v, np.ndarray) for v in values)
                and values[0].dtype == values[1].dtype and values[0].dtype.kind == "f"
                and max(v.ndim for v in values) <= 20)

    def value(self):
        with np.errstate(all="ignore"):
            return np.multiply(self.a, self.b)

    def sum(self, axes):
        rank = len(self.shape)
        letters = "abcdefghijklmnopqrstuvwxyz"
        operands, subscripts = [], []
        for array in (self.a, self.b):
            array = array.reshape((1,) * (rank - array.ndim) + array.shape)
            keep = [k for k in range(rank) if not (array.shape[k] == 1 and self.shape[k] != 1)]
            operands.append(array.reshape([array.shape[k] for k in keep]))
            subscripts.append("".join(letters[k] for k in keep))
        out = "".join(letters[k] for k in range(rank) if k not in axes)
        with np.errstate(all="ignore"):
            result = np.einsum(f"{subscripts[0]},{subscripts[1]}->{out}", *operands,
                               optimize=True)
        return np.asarray(result, dtype=self.dtype)


class Counter:
    """Fresh var names for a concrete batch (``run_batched``), which has no graph to name
    above."""

    def __init__(self):
        self.next = 0

    def var(self, aval):
        self.next += 1
        return Var(f"%{self.next}", aval)
