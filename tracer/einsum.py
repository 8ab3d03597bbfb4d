"""``np.einsum`` and ``np.tensordot`` composed from primitives.

No new primitive: an einsum is parsed into labels per operand, then

* a label repeated inside one operand (``"ii->i"``, a trace ``"ii->"``) takes the diagonal
  with a select against ``eye`` and a sum, so it works on symbolic sizes;
* a label that appears in one operand only and not in the output is summed at once;
* operands are contracted left to right, two at a time: labels shared and kept are batch
  axes, shared and not kept are contracted, the rest are the left and right free axes.
  A pair with contracted labels becomes one ``matmul`` over ``(batch, L, K) @ (batch, K, R)``
  (transposes and reshapes around it: BLAS does the work, codegen fuses the rest); a pair
  without is a broadcast multiply;
* the result is transposed to the output's label order.

Gradients come from the primitives' VJPs. ``optimize=`` is accepted and ignored (the order
is left to right); ``np.einsum_path`` is not provided.

>>> a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
>>> bool(np.array_equal(einsum("ij,jk->ik", a, b), a @ b))
True
>>> float(einsum("ii", np.eye(3)))
3.0
"""

from __future__ import annotations

import string
from dataclasses import replace

import numpy as np

from . import ops
from .errors import UnsupportedError
from .ops import dtype_of
from .out_arguments import write_out
from .primitives import current_context
from .shapes import ShapeError, normalize_axis

shape_of, ndim_of = ops.shape_of, ops.ndim_of
_LETTERS = string.ascii_letters


# --- parsing ---------------------------------------------------------------------------
def _interleaved(arguments):
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as ``("ab,bc->ac", a, b)``."""
    arguments = list(arguments)
    operands, terms = [], []
    while len(arguments) >= 2:
        operands.append(arguments.pop(0))
        terms.append(arguments.pop(0))
    output = arguments[0] if arguments else None

    def letters(term):
        return "".join("..." if label is Ellipsis else _LETTERS[int(label)] for label in term)

    subscripts = ",".join(letters(term) for term in terms)
    if output is not None:
        subscripts += "->" + letters(output)
    return subscripts, operands


def parse(subscripts, operands):
    """Labels per operand and for the output, as lists of tokens; the dims an ellipsis
    stands for become tokens ``'.0'``, ``'.1'``, ... aligned from the right (they
    broadcast like NumPy's)."""
    subscripts = subscripts.replace(" ", "")
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: {len(terms)} operand subscripts for {len(operands)} "
                         "operands")
    ellipsis_rank = 0
    for term, operand in zip(terms, operands):
        if "..." in term:
            ellipsis_rank = max(ellipsis_rank, ndim_of(operand) - len(term.replace("...", "")))

    def tokens(term, rank):
        named = term.replace("...", "")
        for label in named:
            if label not in _LETTERS:
                raise ValueError(f"einsum: invalid subscript {label!r}")
        if "..." not in term:
            if rank is not None and len(named) != rank:
                raise ValueError(f"einsum: operand has {rank} dimensions, subscripts "
                                 f"{term!r} name {len(named)}")
            return list(named)
        head, _, tail = term.partition("...")
        count = ellipsis_rank if rank is None else rank - len(named)
        if count < 0:
            raise ValueError(f"einsum: subscripts {term!r} name more dimensions than the "
                             f"operand's {rank}")
        dots = [f".{ellipsis_rank - count + i}" for i in range(count)]
        return list(head) + dots + list(tail)

    labels = [tokens(term, ndim_of(operand)) for term, operand in zip(terms, operands)]
    if arrow:
        out = tokens(output, None)
        if len(set(out)) != len(out):
            raise ValueError("einsum: output subscript has a repeated label")
    else:
        # Implicit mode: the ellipsis dims first, then labels seen once, alphabetically.
        flat = [label for term in labels for label in term]
        dots = sorted({label for label in flat if label.startswith(".")},
                      key=lambda label: int(label[1:]))
        once = sorted(label for label in set(flat)
                      if not label.startswith(".") and flat.count(label) == 1)
        out = dots + once
    every = {label for term in labels for label in term}
    for label in out:
        if label not in every:
            raise ValueError(f"einsum: output subscript {label!r} does not appear in the "
                             "input subscripts")
    return labels, out


# --- the contraction -------------------------------------------------------------------
def _diagonal(x, labels):
    """Repeated labels within one operand reduced to one axis (the diagonal)."""
    labels = list(labels)
    while True:
        repeated = next((label for label in labels if labels.count(label) > 1), None)
        if repeated is None:
            return x, labels
        first = labels.index(repeated)
        second = labels.index(repeated, first + 1)
        size = shape_of(x)[first]
        if shape_of(x)[second] != size:
            raise ShapeError(f"einsum: dimensions of repeated label {repeated!r} differ "
                             f"({size} and {shape_of(x)[second]})")
        rank = ndim_of(x)
        row = ops.reshape(ops.iota(size, np.int64, like=x),
                          tuple(size if axis == first else 1 for axis in range(rank)))
        col = ops.reshape(ops.iota(size, np.int64, like=x),
                          tuple(size if axis == second else 1 for axis in range(rank)))
        # A select, not a multiply by eye: inf and NaN off the diagonal stay out of it.
        x = _sum(np.where(row == col, x, np.zeros((), dtype_of(x))), (second,))
        del labels[second]


def _sum(x, axes):
    """A sum that keeps ``x``'s dtype, as einsum's does (bools: any; small ints wrap)."""
    dtype = dtype_of(x)
    total = ops.reduce_sum(x, axes)
    return total if dtype_of(total) == dtype else total.astype(dtype)


def _sum_labels(x, labels, drop):
    axes = tuple(i for i, label in enumerate(labels) if label in drop)
    if not axes:
        return x, labels
    return _sum(x, axes), [label for label in labels if label not in drop]


def _arrange(x, labels, order):
    return ops.transpose(x, tuple(labels.index(label) for label in order))


def _sizes(x, labels, chosen):
    return tuple(shape_of(x)[labels.index(label)] for label in chosen)


def _product(dims):
    total = 1
    for dim in dims:
        total = total * dim
    return total


def _broadcast_dim(a, b):
    return b if isinstance(a, int) and a == 1 else a


def _contract_pair(a, a_labels, b, b_labels, keep):
    """``a`` and ``b`` contracted over their shared labels not in ``keep``."""
    shared = [label for label in a_labels if label in b_labels]
    batch = [label for label in shared if label in keep]
    summed = [label for label in shared if label not in keep]
    left = [label for label in a_labels if label not in b_labels]
    right = [label for label in b_labels if label not in a_labels]
    if not summed:
        # No contraction: a broadcast product, which codegen fuses with what follows.
        a = ops.reshape(_arrange(a, a_labels, batch + left),
                        _sizes(a, a_labels, batch + left) + (1,) * len(right))
        b = ops.reshape(_arrange(b, b_labels, batch + right),
                        _sizes(b, b_labels, batch) + (1,) * len(left)
                        + _sizes(b, b_labels, right))
        return a * b, batch + left + right
    batch_dims = tuple(_broadcast_dim(x, y) for x, y in zip(_sizes(a, a_labels, batch),
                                                           _sizes(b, b_labels, batch)))
    left_dims, right_dims = _sizes(a, a_labels, left), _sizes(b, b_labels, right)
    summed_dims = _sizes(a, a_labels, summed)
    a = ops.reshape(_arrange(a, a_labels, batch + left + summed),
                    _sizes(a, a_labels, batch) + (_product(left_dims), _product(summed_dims)))
    b = ops.reshape(_arrange(b, b_labels, batch + summed + right),
                    _sizes(b, b_labels, batch) + (_product(summed_dims), _product(right_dims)))
    product = ops.matmul(a, b)
    _note_einsum_order(product)
    return ops.reshape(product, batch_dims + left_dims + right_dims), batch + left + right


def _note_einsum_order(product):
    """NumPy's einsum (and tensordot's transposed copies) sums a contraction in its own
    order, not by the BLAS calls its matmul makes: the product's location says so, and
    ``margin_rules`` keeps its rounding bound where it takes a float64 product of exact
    operands as NumPy's to the bit."""
    var = getattr(product, "ir_var", None)
    locations = getattr(current_context(), "locations", None)
    if var is not None and locations is not None and var.name in locations:
        locations[var.name] = replace(locations[var.name], via="np.einsum")


def _is_one(dim):
    return isinstance(dim, (int, np.integer)) and dim == 1


def _broadcast_unit_labels(operands, labels):
    """A label of size 1 in one operand and n in another broadcasts, as NumPy's einsum
    does (``"ij,ij->i"`` with shapes (3, 1) and (3, 4))."""
    sizes = {}
    for operand, term in zip(operands, labels):
        for label, dim in zip(term, shape_of(operand)):
            if _is_one(dim):
                continue
            known = sizes.setdefault(label, dim)
            # dynamic dims too: the comparison is a shape guard (13 against 0 in an empty
            # batch must raise as NumPy does, not broadcast)
            if known is not dim and bool(known != dim):
                raise ValueError(f"einsum: operands could not be broadcast together: label "
                                 f"{label!r} has sizes {known} and {dim}")
    widened = []
    for operand, term in zip(operands, labels):
        shape = tuple(sizes.get(label, dim) if _is_one(dim) else dim
                      for label, dim in zip(term, shape_of(operand)))
        widened.append(ops.broadcast_to(operand, shape))
    return widened


def contract(labels, out, operands):
    """The einsum of ``operands`` (labels per operand, as ``parse`` gives) to ``out``."""
    operands, labels = list(operands), [list(term) for term in labels]
    for index, (operand, term) in enumerate(zip(operands, labels)):
        operands[index], labels[index] = _diagonal(operand, term)
    operands = _broadcast_unit_labels(operands, labels)
    result, result_labels = None, None
    for index, (operand, term) in enumerate(zip(operands, labels)):
        later = {label for other in labels[index + 1:] for label in other}
        keep = set(out) | later
        if result is None:
            result, result_labels = _sum_labels(operand, term, set(term) - keep)
            continue
        # Labels only this operand has (and nobody needs) are summed before the product.
        operand, term = _sum_labels(operand, term, set(term) - keep - set(result_labels))
        result, result_labels = _sum_labels(result, result_labels,
                                            set(result_labels) - keep - set(term))
        result, result_labels = _contract_pair(result, result_labels, operand, term, keep)
    return _arrange(result, result_labels, out)


def einsum(*arguments, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """NumPy's ``einsum`` (string or interleaved subscripts, ``...``, implicit output)."""
    if not isinstance(arguments[0], str):
        subscripts, operands = _interleaved(arguments)
    else:
        subscripts, operands = arguments[0], list(arguments[1:])
    if not operands:
        raise ValueError("einsum: no operands")
    operands = [operand if hasattr(operand, "shape") else np.asarray(operand)
                for operand in operands]
    if dtype is not None:
        operands = [operand.astype(dtype) for operand in operands]
    labels, output = parse(subscripts, operands)
    result = contract(labels, output, operands)
    if not output:
        # NumPy's einsum gives a scalar for a full contraction (tensordot a 0-d array): a
        # final sum over one element makes it one under the tracer too.
        result = _sum(ops.reshape(result, (1,)), (0,))
    if out is not None:
        return write_out(out, result, "np.einsum")
    return result


def numpy_tensordot(a, b, axes=2):
    """``np.tensordot`` as the user calls it: where the contracted axes are a's last and
    b's first, in order, NumPy reshapes both to matrices (views of C-ordered operands) and
    multiplies them by ``np.dot``, which makes the BLAS call its matmul makes (bit for bit:
    ``tests/tracer/test_unmodelled_branches.py``). Traced the same way, the product is a
    matmul of the user's line, so a decision on it is NumPy's call and needs no check
    (``margin_rules._numpy_matmul``), as for ``x @ w``; other axes go through the einsum
    path (transposed copies: NumPy's own order, checked)."""
    count = _leading_count(a, b, axes)
    if not count or count > min(ndim_of(a), ndim_of(b)) or any(
            x != y for x, y in zip(shape_of(a)[ndim_of(a) - count:], shape_of(b)[:count])):
        return tensordot(a, b, axes)
    kept_a, summed = shape_of(a)[:ndim_of(a) - count], shape_of(a)[ndim_of(a) - count:]
    kept_b = shape_of(b)[count:]
    product = ops.matmul(ops.reshape(a, (_product(kept_a), _product(summed))),
                         ops.reshape(b, (_product(summed), _product(kept_b))))
    return ops.reshape(product, tuple(kept_a) + tuple(kept_b))


def _leading_count(a, b, axes):
    """N when ``axes`` contracts a's last N axes with b's first N, in order; else None."""
    if isinstance(axes, (int, np.integer)):
        return int(axes)
    try:
        a_axes, b_axes = ([axis] if isinstance(axis, (int, np.integer)) else list(axis)
                          for axis in axes)
        a_axes = [normalize_axis(axis, ndim_of(a)) for axis in a_axes]
        b_axes = [normalize_axis(axis, ndim_of(b)) for axis in b_axes]
    except (TypeError, ValueError, IndexError):
        return None  # (the einsum path raises NumPy's error)
    count = len(a_axes)
    if len(b_axes) == count and a_axes == list(range(ndim_of(a) - count, ndim_of(a))) and (
            b_axes == list(range(count))):
        return count
    return None


def tensordot(a, b, axes=2):
    """NumPy's ``tensordot``: ``axes`` an int N (a's last N with b's first N) or a pair of
    axis sequences, composed as an einsum (``numpy_tensordot`` is ``np.tensordot``'s)."""
    if isinstance(axes, (int, np.integer)):
        count = int(axes)
        if count < 0:
            raise UnsupportedError("np.tensordot with negative axes is not supported")
        a_axes = list(range(ndim_of(a) - count, ndim_of(a)))
        b_axes = list(range(count))
    else:
        a_axes, b_axes = axes
        a_axes = [a_axes] if isinstance(a_axes, (int, np.integer)) else list(a_axes)
        b_axes = [b_axes] if isinstance(b_axes, (int, np.integer)) else list(b_axes)
    if len(a_axes) != len(b_axes):
        raise ValueError("shape-mismatch for sum")
    a_axes = [normalize_axis(axis, ndim_of(a)) for axis in a_axes]
    b_axes = [normalize_axis(axis, ndim_of(b)) for axis in b_axes]
    for a_axis, b_axis in zip(a_axes, b_axes):
        if shape_of(a)[a_axis] != shape_of(b)[b_axis]:
            raise ValueError("shape-mismatch for sum")
    if ndim_of(a) + ndim_of(b) - len(a_axes) > len(_LETTERS):
        raise UnsupportedError("np.tensordot: too many dimensions")
    names = iter(_LETTERS)
    a_labels = [next(names) for _ in range(ndim_of(a))]
    b_labels = [next(names) for _ in range(ndim_of(b))]
    for a_axis, b_axis in zip(a_axes, b_axes):
        b_labels[b_axis] = a_labels[a_axis]
    out = [label for axis, label in enumerate(a_labels) if axis not in a_axes]
    out += [label for axis, label in enumerate(b_labels) if axis not in b_axes]
    return contract([a_labels, b_labels], out, [a, b])
